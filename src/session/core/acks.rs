//! The updates of a session awaiting their acknowledgement — the app's and the server's, in the
//! order they were sent — and how an acknowledgement or a refusal is matched to one of them.
//! The app never sees the answers to the server's own updates, and every acknowledgement it
//! sees answers one of its own.

use std::sync::Arc;

use super::{ForeignTool, Seen, SessionCore, SyncError};
use crate::domain::tool::SharedTool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    App,
    Server,
}

/// An update sent upstream and not yet answered.
#[derive(Debug)]
pub(super) struct Pending {
    origin: Origin,
    event_id: Option<String>,
    /// The tool names it carries, when it sets tools.
    names: Option<Names>,
    /// How many registered tools it carries.
    registered: usize,
    /// Timed out: its waiters have failed; a late acknowledgement is swallowed.
    abandoned: bool,
    /// When it was sent: its acknowledgement's wait is measured from here.
    sent: std::time::Instant,
}

/// The tool names an update carries: the session's own, then the registered ones (kept as the
/// shared tools, so that sending an update copies no name).
#[derive(Debug)]
struct Names {
    own: Vec<String>,
    registered: Arc<[SharedTool]>,
}

impl Names {
    fn iter(&self) -> impl Iterator<Item = &str> {
        self.own
            .iter()
            .map(String::as_str)
            .chain(self.registered.iter().map(|t| t.name.as_str()))
    }

    /// The same names as `echoed`, in any order (a provider may list them in its own).
    fn same_as(&self, echoed: &[String]) -> bool {
        if self.own.len() + self.registered.len() != echoed.len() {
            return false;
        }
        let mut mine: Vec<&str> = self.iter().collect();
        let mut theirs: Vec<&str> = echoed.iter().map(String::as_str).collect();
        mine.sort_unstable();
        theirs.sort_unstable();
        mine == theirs
    }
}

/// Whether an acknowledgement echoing `echoed` answers an update that carried `expected`
/// (either unknown counts as a match).
fn matching(expected: Option<&Names>, echoed: Option<&[String]>) -> bool {
    match (expected, echoed) {
        (Some(expected), Some(echoed)) => expected.same_as(echoed),
        _ => true,
    }
}

/// An app's own update of the session's tools (a relay's), as it goes upstream.
#[derive(Debug)]
pub(crate) struct AppUpdate {
    /// The event as it goes upstream, when it differs from what the app sent.
    pub rewritten: Option<String>,
    pub event_id: Option<String>,
    /// The app's own tools, when its update sets tools.
    pub tools: Option<Vec<ForeignTool>>,
    /// The app's session settings (its tools left out): what later server-built updates keep.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Registered tools left out because the app has a tool of the same name.
    pub clashes: Vec<String>,
    /// The tool names the update carries upstream, when it sets tools.
    pub names: Option<Vec<String>>,
}

impl SessionCore {
    /// The server's update `event_id`, carrying the own tools and `registered`, awaits its
    /// acknowledgement.
    pub(super) fn expect_acknowledgement(
        &mut self,
        event_id: String,
        registered: Arc<[SharedTool]>,
    ) {
        let names = Names {
            own: self.own_tools.iter().map(|t| t.name.clone()).collect(),
            registered,
        };
        self.pending.push_back(Pending {
            origin: Origin::Server,
            event_id: Some(event_id),
            registered: names.registered.len(),
            names: Some(names),
            abandoned: false,
            sent: std::time::Instant::now(),
        });
    }

    /// The server's updates still awaited have timed out: a late answer to one is swallowed.
    pub(super) fn abandon_server_updates(&mut self) {
        for p in self.pending.iter_mut() {
            if p.origin == Origin::Server && !p.abandoned {
                p.abandoned = true;
            }
        }
    }

    /// The app sent its own update of the session (a relay); the text to send upstream instead
    /// of the app's, when the registered tools were merged into it.
    pub(crate) fn app_update(&mut self, update: AppUpdate) -> Option<String> {
        self.own_settings.extend(update.settings);
        let mut registered = 0;
        if let Some(own) = update.tools {
            self.own_tools = own;
            registered = self.registered.len() - update.clashes.len();
            self.note_clashes(update.clashes);
        }
        self.pending.push_back(Pending {
            origin: Origin::App,
            event_id: update.event_id,
            names: update.names.map(|own| Names {
                own,
                registered: Arc::from([]),
            }),
            registered,
            abandoned: false,
            sent: std::time::Instant::now(),
        });
        update.rewritten
    }

    pub(super) fn on_updated(&mut self, echoed: Option<Vec<ForeignTool>>) -> Seen {
        let names: Option<Vec<String>> = echoed
            .as_ref()
            .map(|tools| tools.iter().map(|t| t.name.clone()).collect());
        // An update that timed out may still be answered late; past it, its answer never came.
        while let Some(front) = self.pending.front().filter(|p| p.abandoned) {
            let late = matching(front.names.as_ref(), names.as_deref());
            let pending = self.pending.pop_front().expect("the front was just seen");
            if late {
                tracing::debug!(character = %self.character, "late acknowledgement of a timed-out tool update");
                if self.protocol.tools_need_new_connection() && pending.origin == Origin::Server {
                    // A new connection that took the tools after all (its update waited for a
                    // moment to open it): the session has them now.
                    self.took_late(pending.registered);
                }
                return Seen::Ours;
            }
        }
        let awaited = self.pending.front().is_some_and(|front| {
            match (&front.names, names.as_deref()) {
                (Some(expected), Some(echoed)) if !expected.same_as(echoed) => {
                    // Not what the front update carries: on a shared session, someone else's
                    // update; otherwise the front's answer, unless it repeats the previous one.
                    !self.shared && self.acknowledged.as_deref() != Some(echoed)
                }
                _ => true,
            }
        });
        if awaited {
            let front = self.pending.pop_front().expect("the front was just seen");
            self.acknowledged =
                names.or_else(|| front.names.map(|n| n.iter().map(str::to_owned).collect()));
            return match front.origin {
                Origin::App => Seen::Pass,
                Origin::Server => {
                    self.events
                        .observer()
                        .metrics()
                        .session_synced(self.kind, front.sent.elapsed());
                    self.settle(Ok(()), front.registered);
                    Seen::Ours
                }
            };
        }
        if names.is_some() && names == self.acknowledged {
            tracing::debug!(character = %self.character, "ignoring a repeated acknowledgement of the previous update");
            return Seen::Ours;
        }
        Seen::Described {
            started: false,
            tools: echoed,
        }
    }

    pub(super) fn on_refused(&mut self, message: String, event_id: Option<String>) -> Seen {
        let position = match &event_id {
            Some(id) => self
                .pending
                .iter()
                .position(|p| p.event_id.as_deref() == Some(id.as_str())),
            // Without an event id, an error while the server's update is the next to be
            // answered is taken as its refusal, as the providers send it.
            None => self
                .pending
                .iter()
                .position(|p| !p.abandoned)
                .filter(|&i| self.pending[i].origin == Origin::Server),
        };
        let Some(position) = position else {
            return Seen::Error { message, event_id };
        };
        let pending = self.pending.remove(position).expect("the position exists");
        match pending.origin {
            Origin::App => Seen::Pass,
            Origin::Server => {
                if !pending.abandoned {
                    self.settle(Err(SyncError::Refused(message)), 0);
                }
                // An error that names no event may be the app's: it sees it too.
                if event_id.is_none() {
                    Seen::Pass
                } else {
                    Seen::Ours
                }
            }
        }
    }
}
