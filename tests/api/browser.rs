//! A real browser for the page's tests: Debian's headless Chromium driven over WebDriver by its
//! chromedriver, one driver process and one fresh browser profile per test.
//!
//! Without the browser installed a test skips (saying so); under `CI=true` it fails instead, so a
//! CI machine that lost the browser cannot pass without running these tests.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Longest wait for anything the page should show (a loaded 2-core machine, a cold browser).
pub const PAGE_DEADLINE: Duration = Duration::from_secs(30);

/// Longest wait for the driver to start and the browser to open.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// How long one start of chromedriver may take to say it is ready (it usually takes well under
/// a second), and how many starts are tried.
const DRIVER_ATTEMPT_DEADLINE: Duration = Duration::from_secs(20);
const DRIVER_ATTEMPTS: u32 = 3;

/// What chromedriver prints once it listens (`--port=0` picks a free port).
const DRIVER_READY: &str = "started successfully on port ";

/// Switches that keep Chromium from reaching for the network on its own (update checks,
/// sync, QUIC probes), which fail noisily on a machine without internet access, and that let it
/// run as root in a container (`--no-sandbox`) without a GPU.
const QUIET_SWITCHES: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// The viewport every test starts with: the size the page is designed for.
pub const WINDOW: (u32, u32) = (1280, 800);

pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

/// Whether the browser is here; `None` (after saying why) when a test should skip.
fn available(test: &str) -> Option<()> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return Some(());
    }
    let reason = format!(
        "{} not installed (Debian packages chromium and chromium-driver; .ci/run installs them)",
        missing.join(" and ")
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {reason}");
    }
    println!("SKIPPED {test}: {reason}");
    None
}

impl Browser {
    /// A browser in a [`WINDOW`]-sized window, or `None` when this machine has none (not under
    /// CI). `extra` switches are added to the browser's command line.
    pub async fn start(test: &str, extra: &[&str]) -> Option<Browser> {
        available(test)?;
        static PROFILES: AtomicUsize = AtomicUsize::new(0);
        let profile = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "chromium-profile-{}-{}",
            std::process::id(),
            PROFILES.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("profile directory");

        let (driver, port) = start_driver();
        let mut args: Vec<String> = QUIET_SWITCHES.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1));
        args.extend(extra.iter().map(|s| s.to_string()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = tokio::time::timeout(
            START_DEADLINE,
            ClientBuilder::new(connector)
                .capabilities(capabilities)
                .connect(&format!("http://127.0.0.1:{port}")),
        )
        .await
        .expect("the browser starts in time")
        .expect("a WebDriver session");
        let browser = Browser {
            client,
            driver,
            profile,
        };
        browser.set_viewport(WINDOW.0, WINDOW.1).await;
        Some(browser)
    }

    /// Sizes the window so that the page itself (not counting the browser's own frame) gets
    /// `width` x `height`.
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .expect("window resized");
        let frame = self
            .eval(
                "return [outerWidth - innerWidth, outerHeight - innerHeight];",
                vec![],
            )
            .await;
        let extra = |i: usize| frame[i].as_u64().expect("a frame size") as u32;
        self.client
            .set_window_size(width + extra(0), height + extra(1))
            .await
            .expect("window resized");
    }

    /// Opens `url` and waits for the page's stream status to say it is live.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("page opened");
        self.wait_css("#stream-status[data-state='live']").await;
    }

    /// Waits for an element matching a CSS selector.
    pub async fn wait_css(&self, selector: &str) -> Element {
        self.wait_for(Locator::Css(selector), selector).await
    }

    /// Waits for an element matching an XPath expression.
    pub async fn wait_xpath(&self, xpath: &str) -> Element {
        self.wait_for(Locator::XPath(xpath), xpath).await
    }

    async fn wait_for(&self, locator: Locator<'_>, what: &str) -> Element {
        match self
            .client
            .wait()
            .at_most(PAGE_DEADLINE)
            .for_element(locator)
            .await
        {
            Ok(element) => element,
            Err(e) => {
                let text = match self.client.find(Locator::Css("body")).await {
                    Ok(body) => body.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                panic!(
                    "no {what} on the page within {PAGE_DEADLINE:?} ({e}); the page says:\n{text}"
                )
            }
        }
    }

    /// Runs `script` in every page this browser opens from now on, before the page's own
    /// scripts (Chromium's `Page.addScriptToEvaluateOnNewDocument`).
    pub async fn before_each_page(&self, script: &str) {
        let command = DevTools {
            command: "Page.addScriptToEvaluateOnNewDocument",
            params: json!({"source": script}),
        };
        self.client
            .issue_cmd(command)
            .await
            .expect("chromedriver runs the DevTools command");
    }

    /// Runs a script in the page and returns its value.
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script {script:?} failed: {e}"))
    }

    /// Closes the browser session (the driver then ends the browser).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver runs in its own process group with the browser it started: end them all,
        // whether or not the test got as far as closing the session.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Starts chromedriver on a free loopback port; returns it and the port. A driver that does not
/// say it is ready within [`DRIVER_ATTEMPT_DEADLINE`] is killed and started again, up to
/// [`DRIVER_ATTEMPTS`] times: on a loaded machine one start in many has stayed silent.
fn start_driver() -> (Child, u16) {
    for attempt in 1..=DRIVER_ATTEMPTS {
        if let Some(started) = try_start_driver() {
            return started;
        }
        println!(
            "{CHROMEDRIVER} did not say it was ready within {DRIVER_ATTEMPT_DEADLINE:?} (attempt {attempt})"
        );
    }
    panic!(
        "{CHROMEDRIVER} did not say it was ready in {DRIVER_ATTEMPTS} attempts of {DRIVER_ATTEMPT_DEADLINE:?}"
    )
}

fn try_start_driver() -> Option<(Child, u16)> {
    use std::os::unix::process::CommandExt;

    // Its own log, shown when it stays silent: what it was doing instead.
    static LOGS: AtomicUsize = AtomicUsize::new(0);
    let log = std::env::temp_dir().join(format!(
        "chromedriver-{}-{}.log",
        std::process::id(),
        LOGS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut driver = Command::new(CHROMEDRIVER)
        .arg("--port=0")
        .arg(format!("--log-path={}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{CHROMEDRIVER} runs: {e}"));
    let mut stdout = driver.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    // The ready line may come without its newline for a while: read bytes, not lines. The
    // thread drains the driver's output for as long as it runs.
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let mut sent = false;
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            if sent {
                continue;
            }
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if let Some(at) = text.find(DRIVER_READY) {
                let digits: String = text[at + DRIVER_READY.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let complete = text[at + DRIVER_READY.len() + digits.len()..].starts_with('.');
                if let (true, Ok(port)) = (complete, digits.parse::<u16>()) {
                    let _ = tx.send(port);
                    sent = true;
                }
            }
        }
    });
    let started = rx.recv_timeout(DRIVER_ATTEMPT_DEADLINE);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match started {
        Ok(port) => Some((driver, port)),
        Err(_) => {
            let _ = driver.kill();
            let _ = driver.wait();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            println!(
                "{CHROMEDRIVER}'s log, last lines first:\n{}",
                tail.join("\n")
            );
            None
        }
    }
}

/// A chromedriver command that runs one Chrome DevTools Protocol command in the browser.
#[derive(Debug)]
struct DevTools {
    command: &'static str,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for DevTools {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        let session = session_id.unwrap_or_default();
        base_url.join(&format!("session/{session}/goog/cdp/execute"))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"cmd": self.command, "params": self.params});
        (http::Method::POST, Some(body.to_string()))
    }
}
