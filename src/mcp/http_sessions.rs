//! `/mcp`'s sessions, bounded: rmcp's in-memory session manager with a maximum per character
//! (`[mcp_endpoint] max_sessions`). A session nobody ends (no `DELETE`) costs its worker and
//! buffers until its idle expiry, so a client that only ever initializes could fill the memory.
//!
//! Beyond the maximum, a new session takes the place of the least recently used one that is
//! idle (no request in flight, no stream open: a client in an editor that listens for
//! `list_changed` keeps its `GET` stream open, and its session); when every session is busy the
//! `initialize` is refused ([`SessionsFull`], a 503 with a JSON-RPC error). A session that stays
//! idle for `[mcp_endpoint] session_idle_seconds` is let go (its next request gets 404); one
//! with a request in flight or a stream open is never let go for want of use, however long the
//! call or the stream lasts. The route reserves
//! the place before handing the request to the transport ([`BoundedSessions::admit`]), and the
//! session created for that request takes it (the reservation travels with the request's task),
//! so concurrent `initialize`s never get past the bound. The idle session that makes room is
//! ended only when the new one is created: an `initialize` the transport refuses (a wrong
//! `Accept`, a bad message) ends nobody's session.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::Stream;
use indexmap::IndexMap;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};

/// Why an `initialize` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this character has {max} MCP sessions open and none is idle (mcp_endpoint.max_sessions): \
     end one with DELETE, or try again later"
)]
pub(crate) struct SessionsFull {
    pub max: usize,
}

tokio::task_local! {
    /// The place the route reserved for the session its `initialize` creates.
    static RESERVED: RefCell<Option<Reservation>>;
}

/// Runs `future` (the transport serving one request) with `reservation` for the session it
/// creates.
pub(crate) async fn with_reservation<F: Future>(reservation: Reservation, future: F) -> F::Output {
    RESERVED
        .scope(RefCell::new(Some(reservation)), future)
        .await
}

#[derive(Debug, Default)]
struct Table {
    /// Open sessions, the least recently used first, with their use.
    sessions: IndexMap<SessionId, Use>,
    /// Places reserved for sessions being created.
    reserved: usize,
}

/// How a session is used.
#[derive(Debug, Clone, Copy)]
struct Use {
    /// How many requests and streams it has going.
    busy: usize,
    /// When it was last used: created, sent a message, or a request or stream of it ended.
    last: Instant,
}

impl Use {
    fn new() -> Self {
        Self {
            busy: 0,
            last: Instant::now(),
        }
    }

    fn idle(&self) -> bool {
        self.busy == 0
    }
}

impl Table {
    /// Takes out the idle sessions unused for `idle` by `now`; returns them, and how long until
    /// the next one of those left would be (at most `idle`: a session idle from now on).
    fn expire(&mut self, now: Instant, idle: Duration) -> (Vec<SessionId>, Duration) {
        let mut expired = Vec::new();
        self.sessions.retain(|id, used| {
            let over = used.idle() && now.saturating_duration_since(used.last) >= idle;
            if over {
                expired.push(id.clone());
            }
            !over
        });
        let next = self
            .sessions
            .values()
            .filter(|used| used.idle())
            .map(|used| (used.last + idle).saturating_duration_since(now))
            .min()
            .unwrap_or(idle);
        (expired, next)
    }
}

/// A character's sessions: rmcp's manager, and their number and use.
pub(crate) struct BoundedSessions {
    inner: Arc<LocalSessionManager>,
    max: usize,
    table: Arc<Mutex<Table>>,
}

/// A place for one session; given back unless a session took it.
pub(crate) struct Reservation {
    table: Arc<Mutex<Table>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        lock(&self.table).reserved -= 1;
    }
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    // A count and an order: a panic under the lock leaves nothing worth refusing.
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

impl BoundedSessions {
    /// At most `max` sessions of `inner` (whose own idle expiry must be off), each let go once
    /// it has been idle for `idle`. Call within a Tokio runtime: the expiry runs as a task of
    /// its own, which ends with the sessions.
    pub(crate) fn new(inner: LocalSessionManager, max: usize, idle: Duration) -> Self {
        let sessions = Self {
            inner: Arc::new(inner),
            max,
            table: Arc::default(),
        };
        tokio::spawn(expire_idle(
            Arc::downgrade(&sessions.table),
            Arc::downgrade(&sessions.inner),
            idle,
        ));
        sessions
    }

    /// Reserves a place for a new session: a free one, or one an idle session will make when
    /// the new session is created ([`SessionManager::create_session`] ends the least recently
    /// used idle one then).
    pub(crate) fn admit(&self) -> Result<Reservation, SessionsFull> {
        let mut table = lock(&self.table);
        // Places past the bound, this one counted, each of which an idle session must make.
        let over = (table.sessions.len() + table.reserved + 1).saturating_sub(self.max);
        let idle = table.sessions.values().filter(|used| used.idle()).count();
        if over > idle {
            return Err(SessionsFull { max: self.max });
        }
        table.reserved += 1;
        Ok(Reservation {
            table: self.table.clone(),
        })
    }

    /// Ends the least recently used idle session if the sessions and reservations are past the
    /// bound; `Err` when none is idle any more.
    fn make_room(&self) -> Result<(), SessionsFull> {
        let evicted = {
            let mut table = lock(&self.table);
            if table.sessions.len() + table.reserved <= self.max {
                return Ok(());
            }
            let idle = table
                .sessions
                .iter()
                .position(|(_, used)| used.idle())
                .ok_or(SessionsFull { max: self.max })?;
            table.sessions.shift_remove_index(idle).map(|(id, _)| id)
        };
        if let Some(id) = evicted {
            tracing::info!(session = %id, max = self.max, "an MCP session of /mcp was ended to make room for a new one (the least recently used idle one)");
            let inner = self.inner.clone();
            tokio::spawn(async move {
                if let Err(e) = inner.close_session(&id).await {
                    tracing::debug!(session = %id, error = %e, "an evicted MCP session did not close cleanly");
                }
            });
        }
        Ok(())
    }

    /// Open sessions now.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.table).sessions.len()
    }

    /// The session was used: it becomes the most recently used.
    fn touch(&self, id: &SessionId) {
        let mut table = lock(&self.table);
        if let Some(index) = table.sessions.get_index_of(id) {
            table.sessions[index].last = Instant::now();
            let last = table.sessions.len() - 1;
            table.sessions.move_index(index, last);
        }
    }

    /// A request or stream of the session is going until the guard is dropped.
    fn busy(&self, id: &SessionId) -> Busy {
        self.touch(id);
        if let Some(used) = lock(&self.table).sessions.get_mut(id) {
            used.busy += 1;
        }
        Busy {
            table: self.table.clone(),
            id: id.clone(),
        }
    }
}

/// One request or stream going on in a session.
struct Busy {
    table: Arc<Mutex<Table>>,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(used) = lock(&self.table).sessions.get_mut(&self.id) {
            used.busy = used.busy.saturating_sub(1);
            used.last = Instant::now();
        }
    }
}

/// Lets go of the sessions idle for `idle`, waking when the next one would be, until the
/// sessions are gone.
async fn expire_idle(table: Weak<Mutex<Table>>, inner: Weak<LocalSessionManager>, idle: Duration) {
    loop {
        let Some(table) = table.upgrade() else { return };
        let (expired, next) = lock(&table).expire(Instant::now(), idle);
        drop(table);
        if !expired.is_empty() {
            let Some(inner) = inner.upgrade() else { return };
            for id in expired {
                tracing::debug!(session = %id, idle_seconds = idle.as_secs_f64(), "an idle MCP session of /mcp was let go");
                if let Err(e) = inner.close_session(&id).await {
                    tracing::debug!(session = %id, error = %e, "an idle MCP session did not close cleanly");
                }
            }
        }
        tokio::time::sleep(next).await;
    }
}

/// A stream of a session, which keeps it busy while it is open.
struct BusyStream {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    _busy: Busy,
}

impl Stream for BusyStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Errors of the sessions: rmcp's, or a session refused past the bound.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BoundedSessionsError {
    #[error(transparent)]
    Inner(#[from] LocalSessionManagerError),
    #[error(transparent)]
    Full(#[from] SessionsFull),
}

impl SessionManager for BoundedSessions {
    type Error = BoundedSessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // The route's reservation; a session created any other way must find a free place.
        let reserved = RESERVED.try_with(|r| r.borrow_mut().take()).ok().flatten();
        if reserved.is_some() {
            self.make_room()?;
        } else {
            let table = lock(&self.table);
            if table.sessions.len() + table.reserved >= self.max {
                return Err(SessionsFull { max: self.max }.into());
            }
        }
        let (id, transport) = self.inner.create_session().await?;
        let mut table = lock(&self.table);
        table.sessions.insert(id.clone(), Use::new());
        if let Some(reservation) = reserved {
            // The session holds the place now.
            table.reserved -= 1;
            std::mem::forget(reservation);
        }
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let _busy = self.busy(id);
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.table).sessions.shift_remove(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id);
        let inner = self.inner.create_stream(id, message).await?;
        Ok(BusyStream {
            inner: Box::pin(inner),
            _busy: busy,
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id);
        let inner = self.inner.create_standalone_stream(id).await?;
        Ok(BusyStream {
            inner: Box::pin(inner),
            _busy: busy,
        })
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id);
        let inner = self.inner.resume(id, last_event_id).await?;
        Ok(BusyStream {
            inner: Box::pin(inner),
            _busy: busy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn past_the_bound_the_least_recently_used_idle_session_makes_room() {
        let sessions = Arc::new(BoundedSessions::new(
            LocalSessionManager::default(),
            2,
            Duration::from_secs(3600),
        ));
        let mut ids = Vec::new();
        for _ in 0..2 {
            let reservation = sessions.admit().unwrap();
            let (id, _transport) = with_reservation(reservation, sessions.create_session())
                .await
                .unwrap();
            ids.push(id);
        }
        assert_eq!(sessions.len(), 2);
        // The first is busy (a stream open), so the second will go, but only when the new
        // session is created: a reservation given back (the transport refused the
        // `initialize`) ends nobody's session.
        let busy = sessions.busy(&ids[0]);
        drop(sessions.admit().unwrap());
        assert_eq!(sessions.len(), 2);
        let reservation = sessions.admit().unwrap();
        // One idle session makes room for one new session, not two.
        assert_eq!(sessions.admit().err(), Some(SessionsFull { max: 2 }));
        let (third, _transport) = with_reservation(reservation, sessions.create_session())
            .await
            .unwrap();
        assert_eq!(
            lock(&sessions.table).sessions.keys().collect::<Vec<_>>(),
            [&ids[0], &third]
        );
        // Every session busy: refused.
        let _third_busy = sessions.busy(&third);
        assert_eq!(sessions.admit().err(), Some(SessionsFull { max: 2 }));
        drop(busy);
        let _busy_again = sessions.busy(&ids[0]);
        assert_eq!(sessions.admit().err(), Some(SessionsFull { max: 2 }));
        // Without a reservation, a session finds no place.
        assert!(matches!(
            sessions.create_session().await,
            Err(BoundedSessionsError::Full(_))
        ));
    }
}
