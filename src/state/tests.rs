//! The store on its own: changes kept across reopening, the format versions, the file's mode,
//! empty and damaged files, salted bindings, and a damaged last commit reported.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::open::WentBack;
use super::*;
use crate::domain::ownership::TokenHash;

fn stored(source: &str, origin: &str) -> Option<StoredTool> {
    Some(StoredTool {
        source: source.into(),
        origin: origin.into(),
        body: "{}".into(),
        dormant_since: None,
    })
}

fn register(name: &str, source: &str, origin: &str) -> Op {
    Op::Register {
        characters: vec!["A".into(), "B".into()],
        name: name.into(),
        stored: stored(source, origin),
    }
}

fn run(store: &StateStore, op: Op) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(store.submit(op)).unwrap().unwrap();
}

fn names(restored: &Restored) -> Vec<String> {
    restored
        .tools
        .iter()
        .map(|(c, n, _)| format!("{c}/{n}"))
        .collect()
}

/// A fresh directory for one test.
fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("state-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens `path` once the writer thread of a store dropped before has closed it.
fn reopen(path: &Path) -> (StateStore, Restored) {
    loop {
        match StateStore::open(path, false) {
            Ok(opened) => return opened,
            Err(e) if e.to_string().contains("another process has it open") => {
                std::thread::yield_now();
            }
            Err(e) => panic!("{e:#}"),
        }
    }
}

/// Waits until the writer of a store dropped before has closed `path`.
fn closed(path: &Path) {
    drop(reopen(path));
    // And that one's writer too.
    loop {
        match open::at_start(path, false) {
            Ok(_) => return,
            Err(e) if e.to_string().contains("another process has it open") => {
                std::thread::yield_now();
            }
            Err(e) => panic!("{e:#}"),
        }
    }
}

#[test]
fn changes_survive_reopening_and_a_foreign_version_is_refused() {
    let dir = dir();
    let path = dir.join("state.redb");
    {
        let (store, restored) = StateStore::open(&path, false).unwrap();
        assert!(restored.tools.is_empty());
        run(&store, register("a", "plugin:x", "http://127.0.0.1:1"));
        run(&store, register("b", "plugin:x", "http://127.0.0.1:2"));
        run(&store, register("c", "plugin:y", "http://127.0.0.1:1"));
        run(
            &store,
            Op::Unregister {
                characters: vec!["B".into()],
                name: "c".into(),
            },
        );
        run(
            &store,
            Op::RemoveOrigin {
                characters: vec!["A".into(), "B".into()],
                source: "plugin:x".into(),
                origin: "http://127.0.0.1:2".into(),
            },
        );
        let token = TokenHash::from_header(b"token-of-plugin-x-0001").unwrap();
        run(
            &store,
            Op::Bind {
                source: "plugin:x".into(),
                hash: *token.bytes(),
            },
        );
        for name in ["m1", "m2"] {
            let stored = StoredMcpServer {
                source: format!("mcp:{name}"),
                body: "{}".into(),
                tools: "[]".into(),
                dormant_since: None,
            };
            let name = name.into();
            run(&store, Op::McpRegister { name, stored });
        }
        run(&store, Op::McpUnregister { name: "m1".into() });
        let bind = |source: &str| Op::Bind {
            source: source.into(),
            hash: [8; 32],
        };
        run(&store, bind("plugin:y"));
        let unbind = Op::Unbind {
            source: "plugin:y".into(),
        };
        run(&store, unbind);
        // A tool already dormant keeps its time; an awake one loses it.
        for since in [5, 9] {
            let dormant = Op::Dormant {
                tools: vec![("A".into(), "a".into()), ("B".into(), "a".into())],
                servers: vec!["m2".into(), "gone".into()],
                since,
            };
            run(&store, dormant);
        }
        let awake = Op::Awake {
            tools: vec![("B".into(), "a".into()), ("B".into(), "gone".into())],
        };
        run(&store, awake);
    }
    let (store, restored) = reopen(&path);
    assert_eq!(names(&restored), ["A/a", "A/c", "B/a"]);
    let since: Vec<_> = restored
        .tools
        .iter()
        .map(|(_, _, t)| t.dormant_since)
        .collect();
    assert_eq!(since, [Some(5), None, None]);
    let [(source, salted)] = &restored.owners[..] else {
        panic!("one binding: {:?}", restored.owners);
    };
    assert_eq!(source, "plugin:x");
    assert!(salted.verifies(&TokenHash::from_header(b"token-of-plugin-x-0001").unwrap()));
    assert!(!salted.verifies(&TokenHash::from_header(b"token-of-plugin-y-0002").unwrap()));
    let servers: Vec<_> = restored
        .mcp_servers
        .iter()
        .map(|(n, s)| (n.as_str(), s.source.as_str(), s.dormant_since))
        .collect();
    assert_eq!(servers, [("m2", "mcp:m2", Some(5))]);
    run(
        &store,
        Op::Clear {
            characters: vec!["A".into()],
            source: "plugin:x".into(),
        },
    );
    assert_eq!(store.status().name(), "ok");
    drop(store);

    // A file of another format version is refused, naming both versions and the file.
    let other = dir.join("other.redb");
    tables::older::write(&other, 99, None);
    let refused = StateStore::open(&other, false).unwrap_err().to_string();
    assert!(refused.contains("format version 99"), "{refused}");
    assert!(
        refused.contains("reads versions [1, 2] and 3 only"),
        "{refused}"
    );
    assert!(refused.contains(other.to_str().unwrap()), "{refused}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_older_file_is_read_and_its_bindings_salted() {
    let dir = dir();
    let token = b"token-of-plugin-x-0001";
    let plain: [u8; 32] = Sha256::digest(token).into();
    for version in [1, 2] {
        let path = dir.join(format!("v{version}.redb"));
        tables::older::write(&path, version, Some(("plugin:x", plain)));
        let (store, restored) = StateStore::open(&path, false).unwrap();
        drop(store);
        assert!(restored.mcp_servers.is_empty());
        let [(source, salted)] = &restored.owners[..] else {
            panic!("one binding: {:?}", restored.owners);
        };
        assert_eq!(source, "plugin:x");
        // The upgraded binding still admits its token...
        assert!(salted.verifies(&TokenHash::from_header(token).unwrap()));
        // ...and the file no longer holds the token's plain hash.
        closed(&path);
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(32).any(|w| w == plain),
            "version {version}: the plain hash is still in the file"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_binding_is_stored_salted_per_binding() {
    let dir = dir();
    let path = dir.join("state.redb");
    let token = b"token-of-plugin-x-0001";
    let plain: [u8; 32] = Sha256::digest(token).into();
    {
        let (store, _) = StateStore::open(&path, false).unwrap();
        for source in ["plugin:x", "plugin:y"] {
            run(
                &store,
                Op::Bind {
                    source: source.into(),
                    hash: plain,
                },
            );
        }
    }
    let (store, restored) = reopen(&path);
    drop(store);
    let hashes: Vec<[u8; SaltedHash::LEN]> =
        restored.owners.iter().map(|(_, s)| s.to_bytes()).collect();
    assert_eq!(hashes.len(), 2);
    assert_ne!(hashes[0], hashes[1], "one token, two bindings, two salts");
    closed(&path);
    let bytes = std::fs::read(&path).unwrap();
    assert!(!bytes.windows(32).any(|w| w == plain));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_new_file_is_its_owners_only_and_an_empty_one_is_refused_unless_a_new_store_is_meant() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir();
    let path = dir.join("new.redb");
    drop(StateStore::open(&path, false).unwrap());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let empty = dir.join("empty.redb");
    std::fs::write(&empty, "").unwrap();
    let refused = StateStore::open(&empty, false).unwrap_err().to_string();
    assert!(
        refused.starts_with(&format!(
            "state file {} is empty (0 bytes): a store cut to nothing",
            empty.display()
        )),
        "{refused}"
    );
    assert!(refused.contains("--state-new"), "{refused}");
    let (store, restored) = StateStore::open(&empty, true).unwrap();
    assert!(restored.tools.is_empty());
    run(&store, register("a", "plugin:x", "http://127.0.0.1:1"));
    drop(store);
    // Once it holds a store, it opens as any other.
    let (_, restored) = reopen(&empty);
    assert_eq!(names(&restored), ["A/a", "B/a"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// A store holding a few registrations, closed.
fn a_store(path: &Path) {
    let (store, _) = StateStore::open(path, false).unwrap();
    for i in 0..20 {
        run(
            &store,
            register(&format!("t{i}"), "plugin:x", "http://127.0.0.1:1"),
        );
    }
    drop(store);
    closed(path);
}

#[test]
fn a_damaged_file_is_refused_with_what_to_do_never_a_panic() {
    let dir = dir();
    let good = dir.join("good.redb");
    a_store(&good);
    let bytes = std::fs::read(&good).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("truncated to 100 bytes".into(), bytes[..100].to_vec()),
        ("truncated to 4 KiB".into(), bytes[..4096].to_vec()),
        (
            "truncated to half".into(),
            bytes[..bytes.len() / 2].to_vec(),
        ),
    ];
    for offset in [9, 12, 16, 20, 24, 28, 32, 40] {
        let mut flipped = bytes.clone();
        flipped[offset] ^= 0xff;
        cases.push((format!("byte {offset} flipped"), flipped));
    }
    for (case, damaged) in cases {
        let path = dir.join("damaged.redb");
        std::fs::write(&path, &damaged).unwrap();
        match StateStore::open(&path, false) {
            Ok((store, restored)) => {
                // A flip redb does not need to read is no damage: what was stored is there.
                drop(store);
                assert_eq!(restored.tools.len(), 40, "{case}");
            }
            Err(e) => {
                let text = e.to_string();
                let file = path.display().to_string();
                assert!(
                    text.starts_with(&format!("cannot open state file {file}: ")),
                    "{case}: {text}"
                );
                assert!(
                    text.contains(
                        "the server keeps no backup of it to fall back on: move the \
                                   file aside"
                    ),
                    "{case}: {text}"
                );
            }
        }
        closed_or_refused(&path);
        std::fs::remove_file(&path).unwrap();
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Waits until nothing holds `path` open (a store opened on it is dropped).
fn closed_or_refused(path: &Path) {
    while open::at_start(path, false)
        .err()
        .is_some_and(|e| e.to_string().contains("another process has it open"))
    {
        std::thread::yield_now();
    }
}

/// A store whose last commit registered `marker`'s tool, left as a crash leaves it (the
/// database never closed), copied to `crashed` (the original stays locked by this process).
fn crashed_after(path: &Path, crashed: &Path, marker: &str) {
    let opened = open::at_start(path, false).unwrap();
    let first = register("first", "plugin:x", "http://127.0.0.1:1");
    tables::commit(&opened.db, [first].iter()).unwrap();
    let last = Op::Register {
        characters: vec!["A".into()],
        name: "last".into(),
        stored: stored(marker, "http://127.0.0.1:1"),
    };
    tables::commit(&opened.db, [last].iter()).unwrap();
    std::fs::copy(path, crashed).unwrap();
    // Never closed: no clean-shutdown mark, no commit of its own at close.
    std::mem::forget(opened);
}

/// Flips one bit of `marker`'s bytes in the file at `path`.
fn flip_in(path: &Path, marker: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the marker is in the file");
    bytes[at + 3] ^= 0x01;
    std::fs::write(path, &bytes).unwrap();
}

#[test]
fn a_damaged_last_commit_after_a_crash_is_reported_and_the_one_before_opened() {
    let dir = dir();
    let (path, crashed) = (dir.join("state.redb"), dir.join("crashed.redb"));
    let marker = "the-last-registration-ZZZZ";
    crashed_after(&path, &crashed, marker);
    flip_in(&crashed, marker);
    let opened = open::at_start(&crashed, false).unwrap();
    assert_eq!(opened.went_back, Some(WentBack::OneCommit));
    assert_eq!(names(&opened.restored), ["A/first", "B/first"]);

    // Undamaged, the same crash opens on its last commit, and says nothing.
    let intact = dir.join("intact.redb");
    crashed_after(&dir.join("other.redb"), &intact, marker);
    let opened = open::at_start(&intact, false).unwrap();
    assert_eq!(opened.went_back, None);
    assert_eq!(names(&opened.restored), ["A/first", "A/last", "B/first"]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_damaged_page_of_a_cleanly_closed_file_is_refused_not_read() {
    let dir = dir();
    let path = dir.join("state.redb");
    let marker = "the-last-registration-ZZZZ";
    {
        let (store, _) = StateStore::open(&path, false).unwrap();
        let last = Op::Register {
            characters: vec!["A".into()],
            name: "last".into(),
            stored: stored(marker, "http://127.0.0.1:1"),
        };
        run(&store, last);
    }
    // Closed cleanly by its writer once that has stopped; opened by nothing else since.
    while open::again(&path).is_err() {
        std::thread::yield_now();
    }
    flip_in(&path, marker);
    let refused = StateStore::open(&path, false).unwrap_err().to_string();
    assert!(
        refused.starts_with(&format!(
            "cannot open state file {}: it is damaged (",
            path.display()
        )),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_commit_that_reports_an_error_but_reached_the_file_counts_as_stored() {
    let dir = dir();
    let path = dir.join("state.redb");
    let opened = open::at_start(&path, false).unwrap();
    let status = StoreStatus::default();
    let mut writer = writer::Writer::new(path.clone(), opened.db, status.clone());
    writer.fail_after_commit = true;
    let (done, mut answer) = oneshot::channel();
    let request = Request {
        ops: vec![register("landed", "plugin:x", "http://127.0.0.1:1")],
        seen: Some(0),
        reply: Reply::Commit(done),
    };
    writer.take(vec![request]);
    assert_eq!(answer.try_recv().unwrap(), Ok(()), "answered as stored");
    assert_eq!(status.name(), "ok");
    drop(writer);
    let (_, restored) = reopen(&path);
    assert_eq!(names(&restored), ["A/landed", "B/landed"]);
    let _ = std::fs::remove_dir_all(dir);
}
