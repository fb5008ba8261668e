//! A real browser as the counterpart of the CORS rules: headless Chromium loads a page served
//! from another loopback port, which registers a tool and lists the tools with `fetch` (a JSON
//! POST, so Chromium sends its preflight first); a page served under a foreign name is refused
//! before its request is sent.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;

use crate::helpers::{HTTP_DEADLINE, TestApp, cannot_run, spawn_app};

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

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Loads `url` in headless Chromium (with `extra` flags) and returns the text of `#out`.
async fn run_page(browser: &'static str, url: String, extra: Vec<String>) -> String {
    let dom = actix_web::rt::task::spawn_blocking(move || {
        let profile =
            std::env::temp_dir().join(format!("rt-chromium-{}-{}", std::process::id(), url.len()));
        let mut child = Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            // Lets the page's promises settle before the DOM is printed.
            .arg("--virtual-time-budget=10000")
            .args(extra)
            .arg("--dump-dom")
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            let _ = tx.send(text);
        });
        let dom = rx.recv_timeout(HTTP_DEADLINE * 2);
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(profile);
        dom.expect("chromium printed the page within the deadline")
    })
    .await
    .unwrap();
    let start = dom.find("<pre id=\"out\">").expect("the page's output") + 14;
    let end = dom[start..].find("</pre>").unwrap() + start;
    dom[start..end].to_owned()
}

async fn listed(app: &TestApp) -> serde_json::Value {
    app.tool_names(None).await
}

#[actix_web::test]
async fn a_page_on_another_loopback_port_calls_the_api_from_chromium() {
    const TEST: &str = "a_page_on_another_loopback_port_calls_the_api_from_chromium";
    let Some(browser) = chromium() else {
        return cannot_run(TEST, "chromium is not installed");
    };
    let app = spawn_app(&["Lanlan"]).await;
    let api = format!("http://127.0.0.1:{}", app.addr.port());
    let port = serve_page(page(&api));

    // Served from `localhost` on another port: a cross-origin page on loopback.
    let out = run_page(browser, format!("http://localhost:{port}/"), vec![]).await;
    assert_eq!(out, "register 200 Lanlan | list 200 Lanlan:from_page");
    assert_eq!(listed(&app).await, json!({"Lanlan": ["from_page"]}));

    // The same page under a foreign name (resolved to loopback by the browser only): its
    // preflight is refused, so the POST is never sent.
    let (status, _) = app
        .post("/api/tools/unregister", &json!({"name": "from_page"}))
        .await;
    assert_eq!(status, 200);
    let out = run_page(
        browser,
        format!("http://evil.example:{port}/"),
        vec!["--host-resolver-rules=MAP evil.example 127.0.0.1".to_owned()],
    )
    .await;
    assert_eq!(out, "refused TypeError");
    assert_eq!(listed(&app).await, json!({"Lanlan": []}));
}
