//! Opening the state file, at start and again after a failure.
//!
//! At start: a missing file is created with mode 0600 (it holds the plugins' registrations and
//! their token hashes); an existing one keeps its mode, with a warning when group or others may
//! read it. An empty (0-byte) file is refused unless a new store is asked for (`--state-new`):
//! a store cut to nothing is not to be taken for a new one. A file that cannot be opened for
//! any other reason — in use, not a store, of another format, damaged — ends start-up with an
//! error that names it and says what to do; `redb` panics on some damaged files (a truncated
//! one, a flipped byte in its header), so every call into it here runs under [`quietly`], which
//! turns a panic into that error without printing a panic report.
//!
//! A store that opens on an earlier commit than the last one written is reported with a
//! warning. `redb` keeps the last two commits and goes back to the earlier one when the last
//! one's pages do not match their checksums — a damaged page, or a commit a crash interrupted.
//! After a crash it checks while it repairs, and calls back with where it is: a call at
//! [`ROLLBACK_PROGRESS`] is that step. `redb` does not check a file that was closed cleanly, so
//! it is checked here ([`Database::check_integrity`]): such a file's last commit (the one
//! `redb` makes as it closes) is a two-phase commit, which it never goes back from, so a damaged
//! page is a start-up error rather than data read from it; should a check go back all the same,
//! the file's commit counter before and after it says how many commits were lost.

use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use redb::{Builder, Database, DatabaseError, StorageError};

use super::Restored;
use super::tables;

/// The mode of a new state file: its owner's only.
const NEW_FILE_MODE: u32 = 0o600;

/// Permission bits that let group or others read a file.
const READABLE_BY_OTHERS: u32 = 0o044;

/// The progress `redb` (2.6) reports its repair at when it found the last commit's pages
/// damaged and went back to the commit before (`Database::do_repair`).
const ROLLBACK_PROGRESS: f64 = 0.3;

/// A store opened at start.
pub(super) struct Opened {
    pub db: Database,
    pub restored: Restored,
    /// Whether it opened on an earlier commit than the last one written ([`warn_went_back`]).
    pub went_back: Option<WentBack>,
}

/// How far back a store went, as far as can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WentBack {
    /// The commit before the last one: `redb`'s repair after a crash went back, and a crash
    /// keeps no count.
    OneCommit,
    /// The file's commit counter went from `last` to `opened`.
    Commits { last: u64, opened: u64 },
}

/// Opens the store at `path` at start and reads what it holds; `empty_is_new`: an empty file
/// starts a new store (`--state-new`).
pub(super) fn at_start(path: &Path, empty_is_new: bool) -> anyhow::Result<Opened> {
    let file = path.display().to_string();
    let (handle, created) = file_of(path, &file, empty_is_new)?;
    let repair = Arc::new(Repair::default());
    let db = open_database(handle, repair.clone()).map_err(|why| cannot_open(&file, &why))?;
    let (db, went_back) = if repair.went_back.load(Ordering::Acquire) {
        (db, Some(WentBack::OneCommit))
    } else if created || repair.ran.load(Ordering::Acquire) {
        (db, None)
    } else {
        check_clean_file(db, &file)?
    };
    match read(&db, &file) {
        Ok(restored) => Ok(Opened {
            db,
            restored,
            went_back,
        }),
        Err(e) => {
            // Closing writes to the file, which `redb` may panic on too.
            let _ = quietly(move || drop(db));
            Err(e)
        }
    }
}

/// Checks the format of the store at `file` (upgrading an older one) and reads what it holds.
fn read(db: &Database, file: &str) -> anyhow::Result<Restored> {
    quietly(|| tables::check_format(db, file))
        .map_err(|why| cannot_open(file, &damaged(&why)))?
        .map_err(|e| anyhow::anyhow!("{e:#}; {}", move_aside(file)))?;
    quietly(|| tables::read_all(db))
        .map_err(|why| cannot_open(file, &damaged(&why)))?
        .map_err(|e| anyhow::anyhow!("state file {file}: {e:#}; {}", move_aside(file)))
}

/// What `redb`'s repair of a file did while it was opened.
#[derive(Default)]
struct Repair {
    /// It repaired the file (it was not closed cleanly).
    ran: AtomicBool,
    /// It went back to the commit before the last one.
    went_back: AtomicBool,
}

/// Opens the store at `path` again, after a failure: the file is this server's; a repair that
/// goes back a commit only drops the commit that failed.
pub(super) fn again(path: &Path) -> Result<Database, String> {
    let handle = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| e.to_string())?;
    open_database(handle, Arc::default())
}

/// The file at `path`, created with mode 0600 when missing (`true`), else as it is.
fn file_of(path: &Path, file: &str, empty_is_new: bool) -> anyhow::Result<(File, bool)> {
    let created = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(NEW_FILE_MODE)
        .open(path);
    let error = match created {
        Ok(handle) => return Ok((handle, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match OpenOptions::new().read(true).write(true).open(path) {
                Ok(handle) => return existing(handle, file, empty_is_new).map(|h| (h, false)),
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    anyhow::bail!(
        "cannot open state file {file}: {error} (check that the directory exists and that this \
         user may read and write the file)"
    )
}

/// Checks an existing file before it is opened as a store: refused when empty (unless a new
/// store is meant), a warning when others may read it.
fn existing(handle: File, file: &str, empty_is_new: bool) -> anyhow::Result<File> {
    let metadata = handle
        .metadata()
        .map_err(|e| anyhow::anyhow!("cannot open state file {file}: {e}"))?;
    if metadata.len() == 0 && !empty_is_new {
        anyhow::bail!(
            "state file {file} is empty (0 bytes): a store cut to nothing (a full disk, a copy \
             that failed) is not taken for a new one. If a new, empty store is meant, start with \
             --state-new (or `[state] new = true`); otherwise put back a copy you made: the \
             server keeps no backup of it"
        );
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & READABLE_BY_OTHERS != 0 {
        tracing::warn!(
            path = %file,
            mode = format!("{mode:o}"),
            "the state file can be read by other users: it holds the plugins' registrations and \
             their token hashes; `chmod 600` it (its mode is left as it is)"
        );
    }
    Ok(handle)
}

/// `redb`'s open of `handle`, a panic included in its error; `repair` says what its repair did.
fn open_database(handle: File, repair: Arc<Repair>) -> Result<Database, String> {
    let mut builder = Builder::new();
    builder.set_repair_callback(move |session| {
        repair.ran.store(true, Ordering::Release);
        if (session.progress() - ROLLBACK_PROGRESS).abs() < f64::EPSILON {
            repair.went_back.store(true, Ordering::Release);
        }
    });
    quietly(|| builder.create_file(handle))
        .map_err(|why| damaged(&format!("the redb library stopped on it: {why}")))?
        .map_err(|e| describe(&e))
}

/// A file that was closed cleanly, checked as `redb` checks one after a crash: a damaged page is
/// an error; should the check go back to an earlier commit, the commit counter says how far.
fn check_clean_file(mut db: Database, file: &str) -> anyhow::Result<(Database, Option<WentBack>)> {
    let checked = quietly(|| {
        let before = tables::commits(&db).ok();
        let clean = db.check_integrity()?;
        let after = tables::commits(&db).ok();
        Ok::<_, DatabaseError>((clean, before, after))
    });
    match checked {
        Ok(Ok((true, _, _))) => Ok((db, None)),
        Ok(Ok((false, Some(last), Some(opened)))) if opened < last => {
            Ok((db, Some(WentBack::Commits { last, opened })))
        }
        Ok(Ok((false, _, _))) => {
            tracing::warn!(
                path = %file,
                "the state file's allocation records were damaged and have been repaired; no \
                 commit was lost"
            );
            Ok((db, None))
        }
        Ok(Err(e)) => {
            let _ = quietly(move || drop(db));
            Err(cannot_open(file, &describe(&e)))
        }
        Err(why) => {
            let _ = quietly(move || drop(db));
            Err(cannot_open(file, &damaged(&why)))
        }
    }
}

/// Says that the store at `file` went back to an earlier commit, and how far.
pub(super) fn warn_went_back(file: &Path, went_back: WentBack) {
    let lost = match went_back {
        WentBack::Commits { last, opened } => format!(
            "the file's last commit was number {last} and it opened on number {opened}: {} \
             lost",
            last - opened
        ),
        WentBack::OneCommit => "it opened on the commit before its last one".to_owned(),
    };
    tracing::warn!(
        path = %file.display(),
        "the state store went back to an earlier commit: its last commit was damaged, or \
         incomplete (a crash while it was written); {lost}. Changes answered just before the \
         server stopped may be missing: plugins that register again at start put theirs back"
    );
}

/// `redb`'s error, said for the operator.
fn describe(error: &DatabaseError) -> String {
    match error {
        DatabaseError::DatabaseAlreadyOpen => "another process has it open (another \
             runtime-tools server?): stop that one, or give this server another file"
            .to_owned(),
        DatabaseError::Storage(StorageError::Io(e))
            if e.kind() == std::io::ErrorKind::InvalidData =>
        {
            "it is not a runtime-tools state file, or its header is damaged".to_owned()
        }
        DatabaseError::Storage(StorageError::Io(e))
            if e.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            damaged(&format!("it ends too early: {e}"))
        }
        DatabaseError::Storage(StorageError::Io(e)) => format!("it cannot be read or written: {e}"),
        other => damaged(&other.to_string()),
    }
}

fn damaged(why: &str) -> String {
    format!("it is damaged ({why})")
}

/// The start-up error for `file`, which cannot be opened because of `why`.
fn cannot_open(file: &str, why: &str) -> anyhow::Error {
    if why.starts_with("another process") {
        return anyhow::anyhow!("cannot open state file {file}: {why}");
    }
    anyhow::anyhow!("cannot open state file {file}: {why}; {}", move_aside(file))
}

/// What to do with a state file that cannot be opened.
fn move_aside(file: &str) -> String {
    format!(
        "the server keeps no backup of it to fall back on: move the file aside (`mv {file} \
         {file}.damaged`) to start with an empty store, which plugins then register their \
         tools in again, or put back a copy you made"
    )
}

thread_local! {
    /// Whether a panic on this thread is being caught by [`quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// The message of the panic [`quietly`] caught.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic in it into an error with the panic's message, and without the
/// panic report (the process's hook still reports every other panic).
pub(super) fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let text = payload_text(info.payload());
                CAUGHT.with(|caught| *caught.borrow_mut() = Some(text));
            } else {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET.with(|q| q.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    outcome.map_err(|payload| {
        CAUGHT
            .with(|caught| caught.borrow_mut().take())
            .unwrap_or_else(|| payload_text(payload.as_ref()))
    })
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}
