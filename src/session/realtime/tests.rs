use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::read::{event_type, leading_type, server_event};
use super::*;
use crate::domain::callback_url::CallbackUrl;
use crate::domain::images::ToolImage;
use crate::domain::tool::{ToolSpec, empty_parameters, test_tools};
use crate::session::core::{Call, Interruption};

fn session_update(dialect: Dialect, tools: &[SharedTool], event_id: &str) -> Value {
    serde_json::from_str(&merged_update_text(
        dialect,
        tools,
        Keep::default(),
        event_id,
    ))
    .unwrap()
}

fn tools() -> Vec<SharedTool> {
    vec![Arc::new(ToolSpec::remote(
        "get_weather",
        "Get weather.",
        empty_parameters(),
        "plugin:w",
        CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
        Duration::from_secs(5),
    ))]
}

#[test]
fn openai_shape() {
    let update = session_update(Dialect::Openai, &tools(), "e1");
    assert_eq!(
        update,
        json!({"type": "session.update", "event_id": "e1", "session": {
            "type": "realtime",
            "tools": [{"type": "function", "name": "get_weather", "description": "Get weather.",
                       "parameters": {"type": "object", "properties": {}}}],
            "tool_choice": "auto"
        }})
    );
    let empty = session_update(Dialect::Openai, &[], "e2");
    assert_eq!(empty["session"], json!({"type": "realtime", "tools": []}));
}

#[test]
fn qwen_shape() {
    let update = session_update(Dialect::Qwen, &tools(), "e");
    assert_eq!(
        update["session"]["tools"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(update["session"]["tools"][0]["type"], "function");
    assert_eq!(update["session"]["enable_search"], false);
    let empty = session_update(Dialect::Qwen, &[], "e");
    assert_eq!(empty["session"], json!({"tools": []}));
}

#[test]
fn images_go_in_one_user_message_after_the_output() {
    use crate::domain::call::ToolCall;
    let image = |prompt: &str| ToolImage {
        mime: "image/png",
        width: 1,
        height: 1,
        data_b64: "iVBO".into(),
        vision_prompt: prompt.into(),
    };
    let call = ToolCall::from_raw("c9".into(), "cam".into(), "{}".into());
    let mut result = call.error("x".into());
    result.images = vec![image("look"), image("")];
    let event: Value =
        serde_json::from_str(&Realtime(Dialect::Openai).images(&result, "e1")).unwrap();
    assert_eq!(
        event,
        json!({"type": "conversation.item.create", "event_id": "e1", "item": {
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Image from tool cam (call_id c9): look"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
            {"type": "input_text", "text": "Image from tool cam (call_id c9)"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
        ]}})
    );
    assert_eq!(
        Realtime(Dialect::Glm).images_not_taken(2),
        "2 image(s) not shown: this model session (glm dialect) takes no images"
    );
    assert!(Dialect::Openai.takes_images() && !Dialect::Qwen.takes_images());
}

#[test]
fn glm_shape() {
    let update = session_update(Dialect::Glm, &tools(), "e");
    assert_eq!(update["session"]["tools"][0]["name"], "get_weather");
    assert_eq!(
        update["session"]["turn_detection"],
        json!({"type": "server_vad"})
    );
}

fn echoed_names(event: &str) -> Option<Vec<String>> {
    match server_event(event) {
        Ok(ModelEvent::Updated { tools } | ModelEvent::Started { tools }) => {
            tools.map(|t| t.into_iter().map(|t| t.name).collect())
        }
        other => panic!("not a session event: {other:?}"),
    }
}

#[test]
fn session_events_echo_their_tools() {
    let flat = r#"{"type":"session.updated","session":{"type":"realtime","tools":[{"type":"function","name":"a","parameters":{"x":[1,{"y":2}]}},{"type":"function","name":"b"}]}}"#;
    assert_eq!(echoed_names(flat), Some(vec!["a".into(), "b".into()]));
    let nested = r#"{"type":"session.created","session":{"tools":[{"type":"function","function":{"name":"q"}}]}}"#;
    assert_eq!(echoed_names(nested), Some(vec!["q".into()]));
    let Ok(ModelEvent::Updated { tools: Some(tools) }) = server_event(flat) else {
        panic!("session.updated")
    };
    assert_eq!(
        tools[0].json.get(),
        r#"{"type":"function","name":"a","parameters":{"x":[1,{"y":2}]}}"#,
        "kept byte for byte"
    );
}

fn own_tool(json: &str) -> ForeignTool {
    ForeignTool::from_raw(RawValue::from_string(json.to_owned()).unwrap())
}

#[test]
fn merged_updates_keep_the_sessions_own_tools_and_settings() {
    let own = [own_tool(
        r#"{"type":"function","name":"mine","parameters":{}}"#,
    )];
    let mut settings = Map::new();
    settings.insert("tool_choice".into(), json!("required"));
    settings.insert("voice".into(), json!("marin"));
    let keep = Keep {
        tools: &own,
        settings: Some(&settings),
    };
    let update: Value =
        serde_json::from_str(&merged_update_text(Dialect::Openai, &tools(), keep, "e")).unwrap();
    assert_eq!(
        update["session"],
        json!({"type": "realtime", "tools": [
            {"type": "function", "name": "mine", "parameters": {}},
            {"type": "function", "name": "get_weather", "description": "Get weather.",
             "parameters": {"type": "object", "properties": {}}}],
            "tool_choice": "required"}),
        "the app's tool first, its tool_choice kept, nothing else it set resent"
    );
    let glm: Value =
        serde_json::from_str(&merged_update_text(Dialect::Glm, &[], keep, "e")).unwrap();
    assert_eq!(
        glm["session"]["turn_detection"],
        json!({"type": "server_vad"})
    );
}

#[test]
fn an_apps_update_gets_the_registered_tools_merged() {
    let text = r#"{"type":"session.update","event_id":"app_1","session":{"type":"realtime","instructions":"be brief","tools":[{"type":"function","name":"get_weather","parameters":{}},{"type":"function","name":"own","parameters":{}}]}}"#;
    let update = app::session_update(
        Dialect::Openai,
        &test_tools(&["get_weather", "lookup"]),
        text,
    )
    .unwrap();
    assert_eq!(update.event_id.as_deref(), Some("app_1"));
    assert_eq!(update.clashes, ["get_weather"]);
    assert_eq!(
        update.names,
        Some(vec!["get_weather".into(), "own".into(), "lookup".into()])
    );
    let sent: Value = serde_json::from_str(update.rewritten.as_deref().unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"type": "session.update", "event_id": "app_1", "session": {
            "type": "realtime", "instructions": "be brief", "tools": [
                {"type": "function", "name": "get_weather", "parameters": {}},
                {"type": "function", "name": "own", "parameters": {}},
                {"type": "function", "name": "lookup", "description": "",
                 "parameters": {"type": "object", "properties": {}}}]}})
    );
    assert_eq!(
        Value::Object(update.settings),
        json!({"type": "realtime", "instructions": "be brief"})
    );

    let qwen = app::session_update(
        Dialect::Qwen,
        &test_tools(&["lookup"]),
        r#"{"type":"session.update","session":{"tools":[]}}"#,
    )
    .unwrap();
    let sent: Value = serde_json::from_str(qwen.rewritten.as_deref().unwrap()).unwrap();
    assert_eq!(sent["session"]["tools"][0]["function"]["name"], "lookup");
}

#[test]
fn other_app_events_and_updates_without_tools_pass_as_written() {
    let tools = test_tools(&["lookup"]);
    assert!(
        app::session_update(
            Dialect::Openai,
            &tools,
            r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#
        )
        .is_none()
    );
    assert!(app::session_update(Dialect::Openai, &tools, "not json").is_none());
    let update = app::session_update(
        Dialect::Openai,
        &tools,
        r#"{"type":"session.update","session":{"type":"realtime","instructions":"x"}}"#,
    )
    .unwrap();
    assert_eq!(update.rewritten, None);
    assert_eq!(update.names, None);
}

#[test]
fn the_type_is_read_without_the_rest_when_it_comes_first() {
    assert_eq!(leading_type(r#"{"type":"a.b","x":1}"#), Some("a.b"));
    assert_eq!(leading_type(" {\n \"type\" : \"a\" }"), Some("a"));
    assert_eq!(leading_type(r#"{"event_id":"e","type":"a"}"#), None);
    assert_eq!(
        leading_type(r#"{"type":"a\u002eb"}"#),
        None,
        "escapes take the long way"
    );
    assert_eq!(
        event_type(r#"{"event_id":"e","type":"a"}"#).as_deref(),
        Some("a")
    );
    assert_eq!(event_type(r#"{"type":"a\u002eb"}"#).as_deref(), Some("a.b"));
    assert_eq!(
        server_event(r#"{"event_id":"e","type":"session.updated","session":{}}"#),
        Ok(ModelEvent::Updated { tools: None })
    );
}

/// A call of turn `turn` as the session reads it.
fn call(turn: Option<&str>, call_id: &str, name: &str, arguments: &str) -> Call {
    Call {
        turn: turn.map(str::to_owned),
        call_id: call_id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn calls_are_read_leniently_a_member_of_the_wrong_type_being_absent() {
    let call_event = |text: &str| match server_event(text) {
        Ok(ModelEvent::Call(call)) => Ok(call),
        Ok(other) => panic!("{text}: {other:?}"),
        Err(e) => Err(e),
    };
    assert_eq!(
        call_event(
            r#"{"type":"response.function_call_arguments.done","response_id":"r1","item_id":"i","output_index":0,"call_id":"c1","name":"get_weather","arguments":"{\"city\": \"T\u00f6kyo\"}"}"#
        ),
        Ok(call(
            Some("r1"),
            "c1",
            "get_weather",
            "{\"city\": \"Tökyo\"}"
        ))
    );
    assert_eq!(
        call_event(r#"{"type":"response.function_call_arguments.done","call_id":"c1"}"#),
        Ok(call(None, "c1", "", ""))
    );
    assert_eq!(
        call_event(
            r#"{"type":"response.function_call_arguments.done","name":"n","arguments":"{}"}"#
        ),
        Err(ReadError::MissingField {
            kind: "response.function_call_arguments.done",
            field: "call_id"
        })
    );
    assert_eq!(
        call_event(
            r#"{"type":"response.function_call_arguments.done","call_id":"c1","name":7,"arguments":{"a":1}}"#
        ),
        Ok(call(None, "c1", "", "")),
        "members of the wrong type are absent"
    );
    assert_eq!(
        call_event(
            r#"{"type":"response.function_call_arguments.done","call_id":"c1","call_id":"c2"}"#
        ),
        Ok(call(None, "c2", "", "")),
        "a member written twice: the last wins, as in a parsed tree"
    );
    assert_eq!(
        call_event(
            r#"{"type":"response.function_call_arguments.done","response_id":null,"call_id":"c\n1"}"#
        ),
        Ok(call(None, "c\n1", "", ""))
    );
    let done = |text: &str| match server_event(text) {
        Ok(ModelEvent::TurnDone {
            turn,
            calls,
            cancelled: false,
        }) => (turn, calls),
        other => panic!("{text}: {other:?}"),
    };
    assert_eq!(
        done(
            r#"{"type":"response.done","response":{"id":"r1","status":"completed","usage":{"total_tokens":12345678901234567890123},"output":[{"type":"message","content":[{"type":"audio","transcript":"hi"}]},{"type":"function_call","call_id":"c1","name":"n","arguments":"{}"},{"type":"function_call","name":"no_id"},{"type":"mcp_call","call_id":"m1","name":"other"}]}}"#
        ),
        (Some("r1".into()), vec![call(Some("r1"), "c1", "n", "{}")])
    );
    for empty in [
        r#"{"type":"response.done","response":null}"#,
        r#"{"type":"response.done"}"#,
        r#"{"type":"response.done","response":[1,2]}"#,
    ] {
        assert_eq!(done(empty), (None, vec![]), "{empty}");
    }
    assert_eq!(
        done(r#"{"type":"response.done","response":{"id":"r1","output":"not a list"}}"#),
        (Some("r1".into()), vec![])
    );
    assert_eq!(
        done(
            r#"{"type":"response.done","response":{"id":5,"output":[{"type":"function_call","call_id":"c1"}]}}"#
        ),
        (None, vec![call(None, "c1", "", "")])
    );
}

#[test]
fn server_events() {
    assert_eq!(
        server_event(r#"{"type":"session.updated","session":{}}"#),
        Ok(ModelEvent::Updated { tools: None })
    );
    assert_eq!(
        server_event(r#"{"type":"session.created","session":{"type":"realtime"}}"#),
        Ok(ModelEvent::Started { tools: None })
    );
    assert_eq!(
        server_event(r#"{"type":"response.audio.delta","delta":"AAA"}"#),
        Ok(ModelEvent::Other)
    );
    assert_eq!(
        server_event(
            r#"{"type":"error","error":{"type":"invalid_request_error","code":"bad_tool","message":"Invalid tool","event_id":"e7"}}"#
        ),
        Ok(ModelEvent::Refused {
            message: "Invalid tool (bad_tool)".into(),
            event_id: Some("e7".into())
        })
    );
    let call = server_event(
        r#"{"type":"response.function_call_arguments.done","response_id":"r1","item_id":"i","output_index":0,"call_id":"c1","name":"get_weather","arguments":"{\"city\": \"Tokyo\"}"}"#,
    )
    .unwrap();
    assert_eq!(
        call,
        ModelEvent::Call(Call {
            turn: Some("r1".into()),
            call_id: "c1".into(),
            name: "get_weather".into(),
            arguments: "{\"city\": \"Tokyo\"}".into()
        })
    );
    let done = server_event(
        r#"{"type":"response.done","response":{"id":"r1","output":[{"type":"function_call","call_id":"c1","name":"n","arguments":"{}"},{"type":"message"}]}}"#,
    )
    .unwrap();
    let ModelEvent::TurnDone {
        turn,
        calls,
        cancelled: false,
    } = done
    else {
        panic!("response.done")
    };
    assert_eq!(turn.as_deref(), Some("r1"));
    assert_eq!(calls.len(), 1);
    assert!(server_event("not json").is_err());
    assert!(server_event("[1]").is_err());
}

#[test]
fn the_person_speaking_and_a_cancelled_response_are_interruptions() {
    assert_eq!(
        server_event(
            r#"{"type":"input_audio_buffer.speech_started","event_id":"e1","audio_start_ms":1000,"item_id":"i1"}"#
        ),
        Ok(ModelEvent::SpeechStarted)
    );
    // Written with its type last: read whole, the same.
    assert_eq!(
        server_event(r#"{"audio_start_ms":1000,"type":"input_audio_buffer.speech_started"}"#),
        Ok(ModelEvent::SpeechStarted)
    );
    assert_eq!(
        server_event(r#"{"type":"input_audio_buffer.speech_stopped","audio_end_ms":9}"#),
        Ok(ModelEvent::SpeechStopped)
    );
    assert_eq!(
        server_event(
            r#"{"type":"response.created","response":{"id":"r9","status":"in_progress"}}"#
        ),
        Ok(ModelEvent::TurnStarted)
    );
    assert_eq!(
        server_event(
            r#"{"type":"response.done","response":{"id":"r1","status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"},"output":[{"type":"function_call","call_id":"c1","name":"n","arguments":"{}"}]}}"#
        ),
        Ok(ModelEvent::TurnDone {
            turn: Some("r1".into()),
            calls: vec![call(Some("r1"), "c1", "n", "{}")],
            cancelled: true
        })
    );
    for status in [r#""incomplete""#, r#""failed""#, "7", "null"] {
        let done =
            format!(r#"{{"type":"response.done","response":{{"id":"r1","status":{status}}}}}"#);
        assert!(
            matches!(
                server_event(&done),
                Ok(ModelEvent::TurnDone {
                    cancelled: false,
                    ..
                })
            ),
            "{done}"
        );
    }
}

#[test]
fn an_apps_user_message_and_response_cancel_begin_a_new_turn() {
    let turn = |text: &str| match app::app_event(Dialect::Openai, &[], text) {
        app::AppEvent::Interrupts(interruption) => Some(interruption),
        app::AppEvent::Update(_) => panic!("{text} is no update"),
        app::AppEvent::Other => None,
    };
    assert_eq!(
        turn(
            r#"{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"Stop, what about Osaka?"}]}}"#
        ),
        Some(Interruption::NewTurn)
    );
    assert_eq!(
        turn(r#"{"type":"conversation.item.create","item":{"role":"user","content":[]}}"#),
        Some(Interruption::NewTurn)
    );
    assert_eq!(
        turn(r#"{"type":"response.cancel","event_id":"a1"}"#),
        Some(Interruption::NewTurn)
    );
    assert_eq!(
        turn(r#"{"type":"response.cancel","response_id":"resp_7"}"#),
        Some(Interruption::Turn("resp_7".into()))
    );
    for not_a_turn in [
        // The app answering a call of its own tool, or the assistant's or the system's words.
        r#"{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"c","output":"{}"}}"#,
        r#"{"type":"conversation.item.create","item":{"type":"message","role":"assistant","content":[]}}"#,
        r#"{"type":"conversation.item.create","item":{"type":"message","role":"system","content":[]}}"#,
        r#"{"type":"conversation.item.create","item":{"type":"message","role":7}}"#,
        r#"{"type":"conversation.item.create","item":"user"}"#,
        r#"{"type":"conversation.item.create"}"#,
        r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#,
        r#"{"type":"response.create"}"#,
        "not json",
    ] {
        assert_eq!(turn(not_a_turn), None, "{not_a_turn}");
    }
    assert!(matches!(
        app::app_event(
            Dialect::Openai,
            &[],
            r#"{"type":"session.update","session":{"type":"realtime"}}"#
        ),
        app::AppEvent::Update(_)
    ));
}
