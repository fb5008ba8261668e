//! A real browser as the counterpart of the CORS rules: headless Chromium (driven through the
//! [`crate::browser`] harness) loads a page served from another loopback port, which registers a
//! tool and lists the tools with `fetch` (a JSON POST, so Chromium sends its preflight first); a
//! page served under a foreign name is refused before its request is sent. Without Chromium the
//! test skips, and under `CI=true` it fails.

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;

use crate::browser::Browser;
use crate::helpers::{TestApp, spawn_app};

/// The page: registers `from_page` and lists the tools, then writes what it saw into `#out`.
fn page(api: &str) -> String {
    format!(
        r#"<!doctype html><html><body><pre id="out">pending</pre><script>
(async () => {{
  const lines = [];
  try {{
    const r = await fetch("{api}/api/tools/register", {{
      method: "POST",
      headers: {{"Content-Type": "application/json"}},
      body: JSON.stringify({{name: "from_page", callback_url: "http://127.0.0.1:9/cb", source: "page"}}),
    }});
    lines.push("register " + r.status + " " + (await r.json()).affected_roles.join(","));
    const l = await fetch("{api}/api/tools");
    const listed = (await l.json()).tools_by_role;
    lines.push("list " + l.status + " " + Object.keys(listed).map(k => k + ":" + listed[k].map(t => t.name).join("+")).join(","));
  }} catch (e) {{
    lines.push("refused " + e.name);
  }}
  document.getElementById("out").textContent = lines.join(" | ");
}})();
</script></body></html>"#
    )
}

/// Serves `html` at `/` on a free loopback port; returns the port.
fn serve_page(html: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        let html = html.clone();
        App::new().route(
            "/",
            web::get().to(move || {
                let html = html.clone();
                async move { HttpResponse::Ok().content_type("text/html").body(html) }
            }),
        )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    port
}

/// Opens `url` and returns the text of `#out` once the page has written its result there.
async fn run_page(browser: &Browser, url: &str) -> String {
    browser.client.goto(url).await.expect("page opened");
    let out = browser
        .wait_xpath("//pre[@id='out' and text() != 'pending']")
        .await;
    out.text().await.expect("the page's output")
}

async fn listed(app: &TestApp) -> serde_json::Value {
    app.tool_names(None).await
}

#[actix_web::test]
async fn a_page_on_another_loopback_port_calls_the_api_from_chromium() {
    const TEST: &str = "a_page_on_another_loopback_port_calls_the_api_from_chromium";
    // `evil.example` is resolved to loopback by this browser only.
    let Some(browser) =
        Browser::start(TEST, &["--host-resolver-rules=MAP evil.example 127.0.0.1"]).await
    else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    let api = format!("http://127.0.0.1:{}", app.addr.port());
    let port = serve_page(page(&api));

    // Served from `localhost` on another port: a cross-origin page on loopback.
    let out = run_page(&browser, &format!("http://localhost:{port}/")).await;
    assert_eq!(out, "register 200 Lanlan | list 200 Lanlan:from_page");
    assert_eq!(listed(&app).await, json!({"Lanlan": ["from_page"]}));

    // The same page under a foreign name: its preflight is refused, so the POST is never sent.
    let (status, _) = app
        .post("/api/tools/unregister", &json!({"name": "from_page"}))
        .await;
    assert_eq!(status, 200);
    let out = run_page(&browser, &format!("http://evil.example:{port}/")).await;
    assert_eq!(out, "refused TypeError");
    assert_eq!(listed(&app).await, json!({"Lanlan": []}));
    browser.close().await;
}
