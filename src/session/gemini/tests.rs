use serde_json::{Value, json};

use super::app::app_setup;
use super::read::{self, Signals};
use super::*;
use crate::domain::call::{ToolAnswer, ToolCall};
use crate::domain::tool::test_tools;
use crate::session::core::{Call, Interruption};

fn gemini(handle: Option<&str>) -> Gemini {
    Gemini::new(Rc::new(RefCell::new(handle.map(str::to_owned))))
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn the_setup_keeps_the_sessions_settings_and_tools_and_asks_for_resumption() {
    let own = app_setup(
        r#"{"setup": {"model": "models/m", "generationConfig": {"temperature": 0.50},
            "tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "app_clock"}]}]}}"#,
    )
    .unwrap();
    assert!(!own.resumes);
    let tools = test_tools(&["get_weather"]);
    let keep = Keep {
        tools: &own.own,
        settings: Some(&own.settings),
    };
    let setup = gemini(None).tool_update(&tools, keep, "e1");
    assert_eq!(
        parsed(&setup),
        json!({"setup": {"model": "models/m", "generationConfig": {"temperature": 0.5},
            "tools": [{"googleSearch": {}}, {"functionDeclarations": [
                {"name": "app_clock"},
                {"name": "get_weather", "description": "", "parametersJsonSchema": {"type": "object", "properties": {}}}]}],
            "sessionResumption": {}}})
    );
    // The held handle resumes the session.
    let resumed = gemini(Some("h1")).tool_update(&tools, keep, "e2");
    assert_eq!(
        parsed(&resumed)["setup"]["sessionResumption"],
        json!({"handle": "h1"})
    );
    // Nothing to declare: no tools key at all.
    let bare = gemini(None).tool_update(&[], Keep::default(), "e3");
    assert_eq!(parsed(&bare), json!({"setup": {"sessionResumption": {}}}));
}

#[test]
fn an_apps_setup_that_asks_for_resumption_keeps_its_settings_and_handle() {
    let app = app_setup(
        r#"{"setup": {"model": "m", "session_resumption": {"handle": "app-h"},
            "tools": [{"function_declarations": [{"name": "a"}, {"name": "b"}]}]}}"#,
    )
    .unwrap();
    assert!(app.resumes);
    assert_eq!(
        app.own.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let keep = Keep {
        tools: &app.own,
        settings: Some(&app.settings),
    };
    let setup = parsed(&gemini(None).tool_update(&[], keep, "e"));
    assert_eq!(
        setup["setup"]["sessionResumption"],
        json!({"handle": "app-h"})
    );
    assert_eq!(
        setup["setup"]["tools"],
        json!([{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}])
    );
    assert!(app_setup(r#"{"clientContent": {}}"#).is_none());
    assert!(app_setup("not json").is_none());
}

fn result(call_id: &str, output: &str, error: Option<&str>) -> ToolResult {
    let call = ToolCall::from_raw(call_id.into(), "t".into(), "{}".into());
    match error {
        Some(e) => call.error(e.into()),
        None => call.result(
            ToolAnswer::from_local(Ok(serde_json::from_str(output).unwrap())),
            Vec::new(),
        ),
    }
}

#[test]
fn a_turns_answers_go_in_one_tool_response_with_outputs_exactly_as_written() {
    let results = [
        result("c1", r#"{"temp": 21}"#, None),
        result("c2", r#""sunny""#, None),
        result("c3", "null", Some("location not found")),
    ];
    let text = gemini(None).call_outputs(&results, "e");
    assert_eq!(
        parsed(&text),
        json!({"toolResponse": {"functionResponses": [
            {"id": "c1", "name": "t", "response": {"temp": 21}},
            {"id": "c2", "name": "t", "response": {"result": "sunny"}},
            {"id": "c3", "name": "t", "response": {"error": "location not found"}}]}})
    );
    assert_eq!(gemini(None).continue_turn("e"), None);
    assert_eq!(gemini(None).answers(), Answers::TogetherPerTurn);
}

#[test]
fn server_messages_read_as_the_core_needs_them() {
    assert_eq!(
        read::server_message(r#"{"setupComplete": {}}"#),
        Ok(ModelEvent::Updated { tools: None })
    );
    let turn = "toolCall:c1,c2".to_owned();
    assert_eq!(
        read::server_message(
            r#"{"toolCall": {"functionCalls": [{"id": "c1", "name": "a", "args": {"n": 1.50}},
                {"id": "c2", "name": "b"}]}}"#
        ),
        Ok(ModelEvent::TurnDone {
            turn: Some(turn.clone()),
            calls: vec![
                Call {
                    turn: Some(turn.clone()),
                    call_id: "c1".into(),
                    name: "a".into(),
                    arguments: r#"{"n": 1.50}"#.into(),
                },
                Call {
                    turn: Some(turn),
                    call_id: "c2".into(),
                    name: "b".into(),
                    arguments: "{}".into(),
                },
            ],
            cancelled: false,
        })
    );
    assert_eq!(
        read::server_message(r#"{"tool_call_cancellation": {"ids": ["c1"]}}"#),
        Ok(ModelEvent::Interrupted(Interruption::Calls(vec![
            "c1".into()
        ])))
    );
    assert_eq!(
        read::server_message(r#"{"serverContent": {"interrupted": true}}"#),
        Ok(ModelEvent::Other)
    );
    assert!(read::server_message(r#"{"toolCall": {"functionCalls": [{"name": "a"}]}}"#).is_err());
    assert!(read::server_message("[1]").is_err());
}

#[test]
fn resumption_updates_and_go_away_are_read_for_the_actor() {
    assert_eq!(
        read::signals(r#"{"sessionResumptionUpdate": {"newHandle": "h", "resumable": true}}"#),
        Signals {
            resumption: Some((Some("h".into()), true)),
            go_away: None
        }
    );
    assert_eq!(
        read::signals(r#"{"sessionResumptionUpdate": {"resumable": false}}"#).resumption,
        Some((None, false))
    );
    assert_eq!(
        read::signals(r#"{"goAway": {"timeLeft": "1.5s"}}"#).go_away,
        Some(std::time::Duration::from_millis(1500))
    );
    assert_eq!(
        read::signals(r#"{"serverContent": {}}"#),
        Signals::default()
    );
}
