use serde_json::json;

use crate::helpers::{spawn_app, tool_body};

#[actix_web::test]
async fn register_then_list() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let (status, body) = app
        .register(&tool_body(
            "get_weather",
            "http://127.0.0.1:9333/cb",
            "plugin:weather",
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "registered": "get_weather", "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["get_weather"], "Mio": ["get_weather"]})
    );
}
