//! The state file under faults (`--state FILE`), with the real binary as a child process: a
//! full disk refuses changes cleanly (nothing of a refused change is made) and they succeed
//! again once it has room, memory and disk agreeing after a restart; a damaged, truncated or
//! empty file stops start-up with an error that names it and says what to do, never a panic; a
//! store that went back to an earlier commit says so; a new file is its owner's only, one
//! others can read is warned about; the file never holds a token's plain SHA-256; and the
//! operator's unbinding and a restored tool's waking, stored first like every change, are not
//! made when the full disk cannot keep them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::{Child, TempDir, get};
use crate::durability::{post_with_token, serve};
use crate::fake_mcp::{CallAnswer, FakeMcp, Listing};
use crate::helpers::{cannot_run, settings, spawn_app_with};
use crate::ownership::{TOKEN_A, TOKEN_B, not_owner};

/// The small filesystem the full-disk test fills: room for the store and a few changes.
const DISK_BYTES: usize = 4 << 20;

/// The most registrations tried on the full disk before one must have been refused.
const MAX_TRIES_WHEN_FULL: usize = 20;

/// Registrations sent at once on the full disk.
const BURST: usize = 8;

/// The description of a registration tried on the full disk: more pages than a commit that
/// failed leaves free in the file.
const LARGE_BYTES: usize = 64 << 10;

/// A tmpfs of [`DISK_BYTES`] mounted on a fresh directory, unmounted when dropped.
struct SmallDisk {
    mount: PathBuf,
    _dir: TempDir,
}

impl SmallDisk {
    fn mount(test: &str) -> Result<Self, String> {
        let dir = TempDir::new(test);
        let mount = dir.path("disk");
        std::fs::create_dir(&mount).expect("mount point created");
        let size = format!("size={DISK_BYTES}");
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
            .arg(&mount)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (the test needs root, as in CI): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Self { mount, _dir: dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mount.join(name)
    }

    /// Fills every free byte with a file of its own.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.path("filler")).expect("filler created");
        let chunk = vec![0u8; 64 << 10];
        loop {
            match filler.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // The last pages a partial write left.
        let _ = filler.write(&[0; 1]);
    }

    fn free(&self) {
        std::fs::remove_file(self.path("filler")).expect("filler removed");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: a child that outlived its test still holding a file does not keep it mounted.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// A registration of `name` for every character, under `source`.
fn tool(name: &str, source: &str, description: &str) -> Value {
    json!({"name": name, "callback_url": "http://127.0.0.1:9/cb", "source": source,
           "description": description})
}

/// `name` → source of every tool `listing` gives `role`.
fn names_and_sources(listing: &Value, role: &str) -> BTreeMap<String, String> {
    listing["tools_by_role"][role]
        .as_array()
        .expect("the character's tools")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn listing(addr: SocketAddr) -> BTreeMap<String, String> {
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    names_and_sources(&listing, "Lanlan")
}

fn health_state(addr: SocketAddr) -> String {
    let (status, health) = get(addr, "/api/health");
    assert_eq!(status, 200);
    health["state"]
        .as_str()
        .expect("state in health")
        .to_owned()
}

/// Asserts that `answer` is the refusal of a change the full disk at `path` could not keep.
fn assert_not_stored(status: u16, answer: &Value, path: &Path) {
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["ok"], false);
    let detail = answer["detail"].as_str().unwrap();
    let prefix = format!(
        "the change could not be stored in the state file, so it was not made; try again once \
         the state file can be written: state file {}: ",
        path.display()
    );
    assert!(detail.starts_with(&prefix), "{detail}");
    assert!(
        detail.contains("No space left on device") || detail.contains("may rest on it"),
        "{detail}"
    );
}

/// Sends a change and checks it is either made (200, and the listing shows it) or refused
/// because the full disk at `path` could not keep it (503, and the listing does not): never
/// half. Returns whether it was made.
fn made_or_not(addr: SocketAddr, path: &Path, route: &str, body: &Value, token: &str) -> bool {
    let before = listing(addr);
    let (status, answer) = post_with_token(addr, route, body, token);
    let after = listing(addr);
    let name = body["name"].as_str().unwrap();
    let registers = route.ends_with("/register");
    if status == 200 {
        assert_eq!(
            after.contains_key(name),
            registers,
            "{route} {name} answered 200: {after:?}"
        );
        return true;
    }
    assert_not_stored(status, &answer, path);
    assert_eq!(after, before, "{route} {name} was refused, yet made");
    false
}

#[test]
fn a_full_disk_refuses_changes_cleanly_and_they_succeed_again_once_it_has_room() {
    const TEST: &str = "a_full_disk_refuses_changes_cleanly";
    let disk = match SmallDisk::mount("state-full-disk") {
        Ok(disk) => disk,
        Err(reason) => return cannot_run(TEST, &reason),
    };
    let path = disk.path("state.redb");
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    for name in ["kept", "doomed"] {
        let (status, answer) = post_with_token(
            addr,
            "/api/tools/register",
            &tool(name, "plugin:a", ""),
            TOKEN_A,
        );
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(health_state(addr), "ok");

    disk.fill();
    // Registrations until one is refused: each is made and stored, or refused with nothing
    // of it made. Large ones, so that each commit needs more pages than the file has free.
    let large = "d".repeat(LARGE_BYTES);
    let mut refused = false;
    for i in 0..MAX_TRIES_WHEN_FULL {
        let body = tool(&format!("large_{i}"), "plugin:a", &large);
        if !made_or_not(addr, &path, "/api/tools/register", &body, TOKEN_A) {
            refused = true;
            break;
        }
    }
    assert!(refused, "the full disk refused no registration");
    assert_eq!(health_state(addr), "failing");

    // A burst of large registrations at once: each refused, and none made, whether its commit
    // failed or it was decided behind one that did (it may rest on that one, so it is refused
    // without a try).
    let burst: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..BURST)
            .map(|i| {
                let body = tool(&format!("burst_{i}"), "plugin:a", &large);
                scope.spawn(move || post_with_token(addr, "/api/tools/register", &body, TOKEN_A))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (status, answer) in &burst {
        assert_not_stored(*status, answer, &path);
    }
    let now = listing(addr);
    assert!(
        !now.keys().any(|name| name.starts_with("burst_")),
        "refused, yet made: {now:?}"
    );

    // More changes while the disk is full, each made or not, never half: a registration that
    // would bind a new source (as large: refused), an unregistration (small: it may fit).
    let squat = tool("squat", "plugin:new", &large);
    let squatted = made_or_not(addr, &path, "/api/tools/register", &squat, TOKEN_B);
    assert!(!squatted, "a large registration was made on the full disk");
    let doomed = json!({"name": "doomed"});
    made_or_not(addr, &path, "/api/tools/unregister", &doomed, TOKEN_A);

    // Room again: changes succeed again. The new source is bound only if its registration was
    // made: a refused one bound nothing.
    disk.free();
    let (status, answer) = post_with_token(addr, "/api/tools/register", &squat, TOKEN_A);
    if squatted {
        assert_eq!((status, answer), (403, not_owner("plugin:new")));
    } else {
        assert_eq!(
            status, 200,
            "plugin:new was bound by a refused change: {answer}"
        );
    }
    let (status, answer) = post_with_token(addr, "/api/tools/unregister", &doomed, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    let after = tool("after", "plugin:a", "");
    let (status, _) = post_with_token(addr, "/api/tools/register", &after, TOKEN_A);
    assert_eq!(status, 200);
    assert_eq!(health_state(addr), "ok");
    let in_memory = listing(addr);
    assert!(in_memory.contains_key("kept") && in_memory.contains_key("after"));
    assert!(!in_memory.contains_key("doomed"));

    // After a restart, the store holds exactly what memory held, and the bindings.
    child.signal("KILL");
    child.wait();
    let log = child.stderr_after_exit();
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    assert_eq!(listing(addr), in_memory);
    // The bindings too: both sources are token A's.
    for (source, other) in [("plugin:a", TOKEN_B), ("plugin:new", TOKEN_B)] {
        let (status, answer) =
            post_with_token(addr, "/api/tools/clear", &json!({"source": source}), other);
        assert_eq!((status, answer), (403, not_owner(source)));
    }
    child.signal("TERM");
    child.wait();

    assert!(
        log.contains("ERROR")
            && log.contains("the state store cannot write its file: every change is refused"),
        "{log}"
    );
    assert!(
        log.contains("WARN")
            && log.contains(
                "the state store writes its file again: changes are stored, and made, again"
            ),
        "{log}"
    );
}

/// A state file holding two registrations and a binding, written by the server (killed).
fn a_store(dir: &TempDir) -> Vec<u8> {
    let path = dir.path("made.redb");
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    for name in ["one", "two"] {
        let body = tool(name, "plugin:a", "");
        let (status, _) = post_with_token(addr, "/api/tools/register", &body, TOKEN_A);
        assert_eq!(status, 200);
    }
    child.signal("KILL");
    child.wait();
    std::fs::read(&path).unwrap()
}

/// Starts the server on the state file `path` with `extra` arguments, expecting it to stop at
/// start: returns its stderr.
fn refused_at_start(path: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--character",
        "Lanlan",
        "--state",
        path.to_str().unwrap(),
    ];
    args.extend(extra);
    // What an operator sees by default: no backtrace, whose frames would name the panic the
    // store caught (`RUST_BACKTRACE` may be set where the tests run).
    let mut child = Child::start_with_env(&args, &[("RUST_BACKTRACE", "0")]);
    let status = child.wait();
    let log = child.stderr_after_exit();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        !log.to_lowercase().contains("panic"),
        "a panic was reported: {log}"
    );
    log
}

#[test]
fn a_damaged_or_empty_state_file_stops_start_up_with_an_error_naming_it_never_a_panic() {
    let dir = TempDir::new("state-damaged");
    let good = a_store(&dir);
    let path = dir.path("state.redb");
    let file = path.display().to_string();
    let mut cases = vec![
        ("truncated to half", good[..good.len() / 2].to_vec()),
        ("truncated to 4 KiB", good[..4096].to_vec()),
    ];
    for (case, offset) in [("byte 24 flipped", 24), ("byte 32 flipped", 32)] {
        let mut flipped = good.clone();
        flipped[offset] ^= 0xff;
        cases.push((case, flipped));
    }
    for (case, bytes) in cases {
        std::fs::write(&path, bytes).unwrap();
        let log = refused_at_start(&path, &[]);
        let error = format!("cannot open state file {file}: it is damaged (");
        assert!(log.contains(&error), "{case}: {log}");
        let advice = format!(
            "the server keeps no backup of it to fall back on: move the file aside (`mv {file} \
             {file}.damaged`) to start with an empty store"
        );
        assert!(log.contains(&advice), "{case}: {log}");
    }

    // An empty file is no store: refused, unless a new one is asked for.
    std::fs::write(&path, "").unwrap();
    let log = refused_at_start(&path, &[]);
    let error = format!(
        "state file {file} is empty (0 bytes): a store cut to nothing (a full disk, a copy that \
         failed) is not taken for a new one. If a new, empty store is meant, start with \
         --state-new (or `[state] new = true`); otherwise put back a copy you made: the server \
         keeps no backup of it"
    );
    assert!(log.contains(&error), "{log}");
    let mut child = Child::start(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--state",
        path.to_str().unwrap(),
        "--state-new",
    ]);
    let addr = child.listening("127.0.0.1");
    let (_, health) = get(addr, "/api/health");
    assert_eq!(
        (health["restored"].clone(), health["state"].clone()),
        (json!(0), json!("ok"))
    );
    child.signal("TERM");
    child.wait();
}

#[test]
fn a_last_commit_damaged_before_a_restart_is_reported_as_a_store_gone_back() {
    let dir = TempDir::new("state-went-back");
    let path = dir.path("state.redb");
    let marker = "the-last-registration-XYZZY";
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    for (name, description) in [("first", ""), ("last", marker)] {
        let body = tool(name, "plugin:a", description);
        let (status, _) = post_with_token(addr, "/api/tools/register", &body, TOKEN_A);
        assert_eq!(status, 200);
    }
    child.signal("KILL");
    child.wait();
    // One byte of the last commit's page flipped: the registration answered last is lost.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the last registration is in the file");
    bytes[at + 5] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();

    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let names: Vec<String> = listing(addr).into_keys().collect();
    assert_eq!(names, ["first"]);
    child.signal("TERM");
    child.wait();
    let log = child.stderr_after_exit();
    assert!(
        log.contains("WARN")
            && log.contains(
                "the state store went back to an earlier commit: its last commit was damaged, \
                 or incomplete (a crash while it was written); it opened on the commit before \
                 its last one"
            ),
        "{log}"
    );
}

#[test]
fn a_new_state_file_is_its_owners_only_and_one_others_can_read_is_warned_about() {
    let dir = TempDir::new("state-mode");
    let path = dir.path("state.redb");
    let (mut child, _) = serve(&path, &["Lanlan"], "info");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    child.signal("TERM");
    child.wait();
    let log = child.stderr_after_exit();
    assert!(!log.contains("can be read by other users"), "{log}");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (mut child, _) = serve(&path, &["Lanlan"], "info");
    child.signal("TERM");
    child.wait();
    let log = child.stderr_after_exit();
    let file = path.display().to_string();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains(
                "the state file can be read by other users: it holds the plugins' \
                 registrations and their token hashes; `chmod 600` it (its mode is left as it \
                 is)"
            )
            && l.contains(&format!("path={file}"))
            && l.contains("mode=\"644\"")),
        "{log}"
    );
    assert_eq!(mode(&path), 0o644, "its mode is left alone");
}

#[test]
fn the_state_file_holds_no_plain_hash_of_a_token_and_the_token_still_owns_its_source() {
    let dir = TempDir::new("state-salted");
    let path = dir.path("state.redb");
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let body = tool("weather", "plugin:w", "");
    let (status, _) = post_with_token(addr, "/api/tools/register", &body, TOKEN_A);
    assert_eq!(status, 200);
    child.signal("KILL");
    child.wait();
    let plain: [u8; 32] = Sha256::digest(TOKEN_A.as_bytes()).into();
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !bytes.windows(plain.len()).any(|w| w == plain),
        "the file holds SHA-256 of the token"
    );

    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let clear = json!({"source": "plugin:w"});
    let (status, answer) = post_with_token(addr, "/api/tools/clear", &clear, TOKEN_B);
    assert_eq!((status, answer), (403, not_owner("plugin:w")));
    let (status, answer) = post_with_token(addr, "/api/tools/clear", &clear, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    child.signal("TERM");
    child.wait();
}

/// A runtime MCP server's registration on a full disk: its listing and its record share one
/// commit, so it is refused whole (no tool made, the server not kept) and succeeds whole once
/// the disk has room.
#[actix_web::test]
async fn a_runtime_mcp_server_registered_on_a_full_disk_is_refused_whole() {
    const TEST: &str = "a_runtime_mcp_server_registered_on_a_full_disk";
    let disk = match SmallDisk::mount("state-full-disk-mcp") {
        Ok(disk) => disk,
        Err(reason) => return cannot_run(TEST, &reason),
    };
    let path = disk.path("state.redb");
    let mut config = settings(&["Lanlan"]);
    config.state.path = Some(path.clone());
    let app = spawn_app_with(config).await;
    let fake = FakeMcp::start(
        Listing::HugeDescription(LARGE_BYTES),
        CallAnswer::Text("ok".into()),
    );
    let body = json!({"name": "huge_server", "url": fake.url()});

    disk.fill();
    let (status, answer) = app.post("/api/mcp/register", &body).await;
    assert_not_stored(status, &answer, &path);
    let (_, servers) = app.get("/api/mcp").await;
    assert!(
        servers["runtime_mcp_servers"].get("huge_server").is_none(),
        "refused, yet kept: {servers}"
    );
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(listing["tools_by_role"]["Lanlan"], json!([]));

    disk.free();
    let (status, answer) = app.post("/api/mcp/register", &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tools"], json!(["huge"]));
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(listing["tools_by_role"]["Lanlan"][0]["name"], "huge");
    let (_, health) = app.get("/api/health").await;
    assert_eq!(health["state"], "ok");
}

/// The binding a runtime MCP server's registration makes is stored before the server is
/// connected to: on a full disk it is undone with the refusal (503), so the source is not left
/// bound in memory alone — another plugin may take it once the disk has room, and the file
/// agrees after a restart.
#[actix_web::test]
async fn a_runtime_mcp_servers_binding_the_full_disk_cannot_keep_is_undone() {
    const TEST: &str = "a_runtime_mcp_servers_binding_the_full_disk_cannot_keep_is_undone";
    let disk = match SmallDisk::mount("state-full-disk-mcp-bind") {
        Ok(disk) => disk,
        Err(reason) => return cannot_run(TEST, &reason),
    };
    let path = disk.path("state.redb");
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let fake = FakeMcp::start(
        Listing::Tools(vec![json!({"name": "note", "description": "Write a note.",
                                   "inputSchema": {"type": "object"}})]),
        CallAnswer::Text("ok".into()),
    );
    let body = json!({"name": "notes", "url": fake.url(), "source": "plugin:mcp-notes"});

    disk.fill();
    fill_the_file(addr, &path);
    let (status, answer) = register_mcp(addr, &body, TOKEN_A).await;
    assert_not_stored(status, &answer, &path);
    let (_, sources) = get(addr, "/api/sources");
    let bound = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["source"] == "plugin:mcp-notes" && s["bound"] == true);
    assert!(
        !bound,
        "a binding the store could not keep is kept: {sources}"
    );
    let (_, servers) = get(addr, "/api/mcp");
    assert!(
        servers["runtime_mcp_servers"].get("notes").is_none(),
        "{servers}"
    );

    disk.free();
    let (status, answer) = register_mcp(addr, &body, TOKEN_B).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tools"], json!(["note"]), "{answer}");
    child.signal("KILL");
    child.wait();
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let (status, answer) = register_mcp(addr, &body, TOKEN_A).await;
    assert_eq!((status, answer), (403, not_owner("plugin:mcp-notes")));
    child.signal("TERM");
    child.wait();
}

/// `POST /api/mcp/register` with `token`, off the test's thread: the fake MCP server it
/// connects to answers on that thread.
async fn register_mcp(addr: SocketAddr, body: &Value, token: &'static str) -> (u16, Value) {
    let body = body.clone();
    actix_web::rt::task::spawn_blocking(move || {
        post_with_token(addr, "/api/mcp/register", &body, token)
    })
    .await
    .expect("the request was sent")
}

/// Large registrations of `source` on the full disk until one is refused (each made or not,
/// never half): the file's free pages are then used up, and the store fails.
fn fill_the_file(addr: SocketAddr, path: &Path) {
    let large = "d".repeat(LARGE_BYTES);
    for i in 0..MAX_TRIES_WHEN_FULL {
        let body = tool(&format!("filler_{i}"), "plugin:filler", &large);
        if !made_or_not(addr, path, "/api/tools/register", &body, TOKEN_A) {
            return;
        }
    }
    panic!("the full disk refused no registration");
}

/// The operator's unbinding is stored before it is made: on a full disk it is refused (503)
/// and the source stays bound — the squatter's token still changes it, the owner's is still
/// refused — and once the disk has room it is made, and the owner binds its source.
#[actix_web::test]
async fn an_unbinding_the_full_disk_cannot_keep_leaves_the_source_bound() {
    const TEST: &str = "an_unbinding_the_full_disk_cannot_keep_leaves_the_source_bound";
    let disk = match SmallDisk::mount("state-full-disk-unbind") {
        Ok(disk) => disk,
        Err(reason) => return cannot_run(TEST, &reason),
    };
    let path = disk.path("state.redb");
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let operator = child.printed_token().expect("a made token").to_owned();
    let unbind = async || {
        let client = crate::helpers::test_client();
        let mut response = client
            .delete(format!("http://{addr}/api/sources/plugin:notes/binding"))
            .insert_header(("authorization", format!("Bearer {operator}")))
            .send()
            .await
            .expect("request sent");
        let body = response.body().await.expect("body read");
        (
            response.status().as_u16(),
            crate::helpers::parse_json(&body),
        )
    };
    let squat = tool("notes", "plugin:notes", "");
    let (status, answer) = post_with_token(addr, "/api/tools/register", &squat, TOKEN_B);
    assert_eq!(status, 200, "{answer}");

    disk.fill();
    fill_the_file(addr, &path);
    let (status, answer) = unbind().await;
    assert_not_stored(status, &answer, &path);
    // Still bound, in memory as in the file: the squatter's token changes the source, the
    // owner's does not.
    let owners = tool("notes", "plugin:notes", "the owner's");
    let (status, answer) = post_with_token(addr, "/api/tools/register", &owners, TOKEN_A);
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    let (_, sources) = get(addr, "/api/sources");
    let notes = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "plugin:notes")
        .cloned();
    assert_eq!(notes.unwrap()["bound"], true, "{sources}");

    disk.free();
    let (status, answer) = unbind().await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "source": "plugin:notes", "unbound": true})
        )
    );
    let (status, answer) = post_with_token(addr, "/api/tools/register", &owners, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    child.signal("KILL");
    child.wait();
    // The file agrees: the owner's binding is the one kept.
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let (status, answer) = post_with_token(addr, "/api/tools/register", &squat, TOKEN_B);
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    child.signal("TERM");
    child.wait();
}

/// The state of `name` in the listing of Lanlan (`active` or `dormant`), if it is listed.
fn tool_state(addr: SocketAddr, name: &str) -> Option<String> {
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    listing["tools_by_role"]["Lanlan"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)
        .map(|t| t["state"].as_str().unwrap_or_default().to_owned())
}

/// A restored tool's waking ends its stored dormant time, and that is stored before the tool
/// is given to the models: on a full disk the waking is not made — the tool stays dormant and
/// its callback is probed again — and once the disk has room the next probe's answer wakes it.
#[actix_web::test]
async fn a_restored_tools_waking_the_full_disk_cannot_keep_leaves_it_dormant_until_the_disk_has_room()
 {
    use tokio::io::AsyncWriteExt;

    const TEST: &str = "a_restored_tools_waking_the_full_disk_cannot_keep";
    let disk = match SmallDisk::mount("state-full-disk-wake") {
        Ok(disk) => disk,
        Err(reason) => return cannot_run(TEST, &reason),
    };
    let path = disk.path("state.redb");
    let port = crate::callback_server::ClosedPort::new();
    // Registered without a token: its source is unbound, so an HTTP answer wakes it. Large:
    // its record, rewritten when it wakes, does not fit in what a full file has free.
    let mut sleeper = tool("sleeper", "plugin:sleeper", &"s".repeat(LARGE_BYTES));
    sleeper["callback_url"] = json!(port.url("/sleeper"));
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let (status, answer) = crate::cli::post(addr, "/api/tools/register", &sleeper);
    assert_eq!(status, 200, "{answer}");
    child.signal("KILL");
    child.wait();

    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    assert_eq!(tool_state(addr, "sleeper").as_deref(), Some("dormant"));
    disk.fill();
    fill_the_file(addr, &path);

    let listener =
        crate::callback_server::listen(port.port()).expect("listening on the tool's port");
    let probe = async || {
        let mut stream = tokio::time::timeout(crate::helpers::HTTP_DEADLINE, listener.accept())
            .await
            .expect("a probe within the deadline")
            .expect("accepted")
            .0;
        let mut buf = Vec::new();
        let request = crate::callback_server::read_request(&mut stream, &mut buf)
            .await
            .expect("the probe's request");
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("HEAD", "/sleeper")
        );
        stream
    };
    let answer = async |mut stream: tokio::net::TcpStream| {
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
    };
    // The first answer finds the disk full: the waking is not stored, so not made, and the
    // origin is probed again (a tool that woke would not be).
    answer(probe().await).await;
    let second = probe().await;
    assert_eq!(tool_state(addr, "sleeper").as_deref(), Some("dormant"));

    // Room again: the next answer wakes it.
    disk.free();
    answer(second).await;
    let deadline = std::time::Instant::now() + crate::helpers::HTTP_DEADLINE;
    while tool_state(addr, "sleeper").as_deref() != Some("active") {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool did not wake once the disk had room"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    child.signal("TERM");
    child.wait();
    let log = child.stderr_after_exit();
    assert!(
        log.contains("tool change not made: the state store could not keep it"),
        "{log}"
    );
}
