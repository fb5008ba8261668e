//! Which calls run now, by call id, and where each runs: what a plugin's progress report
//! (`POST /api/tools/calls/{call_id}/progress`) is routed by. Whoever runs a call lists it
//! ([`CallBoard::list`]) for as long as the returned [`Listed`] lives: a live session with the
//! address that tells its model, text chat without one (its progress reaches only the event
//! stream). Call ids come from models, so two sessions may use the same one: the latest listed
//! wins until it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use actix::{Message, Recipient};

/// A plugin's progress message for a call that runs in a session: told to the model, which
/// speaks of it when idle if `speak`. The reply names the call's tool, or is `None` when no
/// such call runs there any more.
#[derive(Message, Debug)]
#[rtype(result = "Option<String>")]
pub(crate) struct CallProgress {
    pub call_id: String,
    pub message: String,
    pub speak: bool,
}

/// Where one listed call runs.
#[derive(Clone)]
pub(crate) struct Where {
    pub role: String,
    pub tool: String,
    /// The tool's source: a progress report for a call of a source bound to a plugin's token
    /// needs that token.
    pub source: String,
    /// The live session that tells its model; `None` for text chat.
    pub session: Option<Recipient<CallProgress>>,
}

#[derive(Default)]
struct Board {
    calls: HashMap<String, (u64, Where)>,
    next: u64,
}

/// The calls running now (shared by every clone).
#[derive(Clone, Default)]
pub(crate) struct CallBoard(Arc<Mutex<Board>>);

/// A call on the board: it leaves the board when this is dropped.
pub(crate) struct Listed {
    board: CallBoard,
    call_id: String,
    entry: u64,
}

impl CallBoard {
    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the call `call_id` as running at `place` until the returned value is dropped.
    pub(crate) fn list(&self, call_id: &str, place: Where) -> Listed {
        let mut board = self.board();
        board.next += 1;
        let entry = board.next;
        board.calls.insert(call_id.to_owned(), (entry, place));
        Listed {
            board: self.clone(),
            call_id: call_id.to_owned(),
            entry,
        }
    }

    /// Where the call `call_id` runs, if it runs.
    pub(crate) fn find(&self, call_id: &str) -> Option<Where> {
        self.board()
            .calls
            .get(call_id)
            .map(|(_, place)| place.clone())
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        let mut board = self.board.board();
        if board
            .calls
            .get(&self.call_id)
            .is_some_and(|(entry, _)| *entry == self.entry)
        {
            board.calls.remove(&self.call_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(tool: &str) -> Where {
        Where {
            role: "A".into(),
            tool: tool.into(),
            source: "plugin:x".into(),
            session: None,
        }
    }

    #[test]
    fn a_call_is_found_while_it_is_listed_and_the_latest_of_an_id_wins() {
        let board = CallBoard::default();
        assert!(board.find("c1").is_none());
        let first = board.list("c1", chat("one"));
        assert_eq!(board.find("c1").unwrap().tool, "one");
        let second = board.list("c1", chat("two"));
        assert_eq!(board.find("c1").unwrap().tool, "two");
        drop(first);
        assert_eq!(
            board.find("c1").unwrap().tool,
            "two",
            "the older end leaves the newer"
        );
        drop(second);
        assert!(board.find("c1").is_none());
    }
}
