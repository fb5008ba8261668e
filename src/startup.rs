//! `Application`: the one seam `main` and the tests use to build and run the server.
//!
//! It binds the socket first (so the real port is known, and `[::]` is dual-stack), starts the
//! actors before `HttpServer::new` (whose factory runs once per worker thread), and serves the
//! API until stopped.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::Addr;
use actix_web::dev::Server;
use actix_web::{App, HttpServer, middleware, web};
use anyhow::Context;
use socket2::{Domain, Socket, Type};

use crate::actors::router::{
    CloseAllConnections, Directory, Keeping, Router, ShareDirectory, WatchClears, WatchWakes,
};
use crate::actors::settings::CharacterSettings;
use crate::api::{self, AppState};
use crate::config::Settings;
use crate::dispatch::Dispatcher;
use crate::domain::dormant::{DormantTool, epoch_millis, from_epoch_millis};
use crate::domain::operator::OperatorToken;
use crate::domain::ownership::{ConfiguredSource, SharedOwners};
use crate::events::EventHub;
use crate::mcp::client::McpClient;
use crate::mcp::http_serve::McpEndpoint;
use crate::mcp::runtime::{CloseMcpPlugins, McpKeeping, McpPlugins, restore as restore_mcp};
use crate::mcp::status::McpBoard;
use crate::observe::Observer;
use crate::policy::Policy;
use crate::state::{Op, StateStore};

/// Pending connections the kernel queues for us: enough for bursts of plugin start-ups and
/// benchmark clients.
const LISTEN_BACKLOG: i32 = 1024;

/// Longest a client may take to send a request head (actix-web's default, made explicit):
/// longer, it gets a 408 and the connection is closed. The body has its own bound,
/// [`crate::api::body::BODY_READ_TIMEOUT`].
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Time the HTTP server gives the answers of abandoned calls to go out after the grace period,
/// before it closes the connections still open: answering is immediate, a second is plenty.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(1);

pub struct Application {
    server: Server,
    local_addr: SocketAddr,
    router: Addr<Router>,
    dispatcher: Dispatcher,
    stop_grace: Duration,
    events: EventHub,
    /// Kept for as long as the server runs: an actor with no address left would stop.
    _mcp_clients: Vec<Addr<McpClient>>,
    mcp_plugins: Addr<McpPlugins>,
    mcp_endpoint: McpEndpoint,
    operator_token: OperatorToken,
}

/// Stops a running [`Application`] gracefully; cheap to clone.
#[derive(Clone)]
pub struct Stopper {
    server: actix_web::dev::ServerHandle,
    router: Addr<Router>,
    dispatcher: Dispatcher,
    events: EventHub,
    grace: Duration,
    mcp_plugins: Addr<McpPlugins>,
    mcp_endpoint: McpEndpoint,
}

impl Stopper {
    /// Ends the open event streams, stops accepting connections and lets running calls —
    /// invokes and the model sessions' calls alike — finish for the grace period; those still
    /// running then are answered with a tool error saying the server is stopping. Then closes
    /// every relay (its app and its model get 1001 "going away") and attachment, so none
    /// outlives the server, and waits until each is gone (its model answered the close, or
    /// `CLOSE_GRACE` (two seconds) passed). Resolves once the server has
    /// stopped and no call is running.
    pub async fn stop(&self) {
        // Event streams never end by themselves: ended now, the stop does not wait for their
        // clients. Neither do the streams of `/mcp`'s sessions.
        self.events.close();
        self.mcp_endpoint.close();
        // No new connection from now on, but the open ones are still served. The server itself
        // is stopped only once no call runs: actix-server 2.6 can drop a request still running
        // when its graceful stop closes the workers' connection channel.
        self.server.pause().await;
        if tokio::time::timeout(self.grace, self.dispatcher.idle())
            .await
            .is_err()
        {
            tracing::warn!(
                grace_seconds = self.grace.as_secs_f64(),
                "calls still running at the end of the grace period are answered with an error"
            );
            self.dispatcher.abandon_calls(self.grace);
            self.dispatcher.idle().await;
        }
        // A relay is an open HTTP connection the graceful stop would otherwise wait for; its
        // calls are answered by now. The server is stopped only once every relay and
        // attachment is gone: a worker that stops stops its thread (actix-server), which drops
        // whatever still runs there, a close frame not yet sent included. A router that is gone
        // has no sessions left to close.
        let _ = self.router.send(CloseAllConnections).await;
        // The MCP sessions this server opened with plugins' servers are ended (`DELETE`), so a
        // plugin is not left holding one. An actor that has stopped has none left.
        let _ = self.mcp_plugins.send(CloseMcpPlugins).await;
        self.server.stop(true).await;
        // The last spans go to the collector (bounded; blocking, so off the async threads).
        let observer = self.events.observer().clone();
        let _ = tokio::task::spawn_blocking(move || observer.shut_down()).await;
    }
}

impl Application {
    /// Binds, starts the actors and builds the server; call [`run_until_stopped`] to serve.
    /// Must be called inside an actix system (`#[actix_web::main]` / `#[actix_web::test]`).
    ///
    /// [`run_until_stopped`]: Application::run_until_stopped
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        if !settings.bind.ip().is_loopback() {
            warn_non_loopback_bind(settings.bind);
        }
        let listener =
            bind(settings.bind).with_context(|| format!("cannot listen on {}", settings.bind))?;
        let local_addr = listener.local_addr()?;

        for c in &settings.characters {
            if let Some(session) = &c.session {
                session
                    .check_keys()
                    .with_context(|| format!("character {:?}", c.name))?;
            }
            if let Some(chat) = &c.chat {
                chat.api_key()
                    .with_context(|| format!("character {:?}", c.name))?;
                if reaches_this_server(&chat.url, local_addr) {
                    anyhow::bail!(
                        "character {:?}: chat.url {} is this server's own chat endpoint: \
                         requests would loop; point it at the chat model's server",
                        c.name,
                        chat.url
                    );
                }
            }
        }
        let observer = Observer::new(&settings.trace)?;
        let events = EventHub::with_observer(&settings.events, observer);
        let policy = Policy::new(events.clone());
        let owners = SharedOwners::new(settings.plugin_tokens);
        bind_configured_sources(&settings.configured_sources, &owners)?;
        let (keeping, mcp_keeping) = keep_state(&settings, owners.clone(), local_addr).await?;
        let restored = keeping.dormant.len();
        let keeps_state = keeping.store.is_some();
        let store_status = keeping.store.as_ref().map(StateStore::status);
        let (router, dispatcher) = Router::launch_keeping(
            settings.characters.clone(),
            &settings.dispatch,
            events.clone(),
            policy.clone(),
            keeping,
        );
        // One supervised client per MCP server: each registers its server's tools through the
        // router as soon as it has listed them.
        let mcp = McpBoard::new(&settings.mcp_servers, events.clone());
        let mcp_clients = settings
            .mcp_servers
            .iter()
            .map(|s| {
                McpClient::launch(
                    s.clone(),
                    router.clone(),
                    mcp.clone(),
                    settings.dispatch.max_response_bytes,
                )
            })
            .collect();
        let directory = router
            .send(ShareDirectory)
            .await
            .context("the router stopped during start-up")?;
        warn_unknown_pinned(&settings.characters, &directory);
        // The `tool` labels of tools that are gone are given to new ones.
        events
            .observer()
            .metrics()
            .watch_tools(Arc::new(directory.clone()));
        // The MCP servers plugins register at run time; the router tells it about clears, which
        // end the connection of a server of the cleared source.
        let mcp_plugins = McpPlugins::launch(
            router.clone(),
            directory.clone(),
            mcp.clone(),
            settings.dispatch.max_response_bytes,
            owners.clone(),
            mcp_keeping,
        );
        router
            .send(WatchClears(mcp_plugins.clone().recipient()))
            .await
            .context("the router stopped during start-up")?;
        router
            .send(WatchWakes(mcp_plugins.clone().recipient()))
            .await
            .context("the router stopped during start-up")?;
        let mcp_endpoint = McpEndpoint::new(
            directory.clone(),
            dispatcher.clone(),
            events.clone(),
            policy.clone(),
            settings.mcp_endpoint.clone(),
        );
        let operator_token = settings
            .operator_token
            .clone()
            .unwrap_or_else(OperatorToken::generate);
        let state = web::Data::new(AppState {
            operator: api::operator::Operator::new(operator_token.clone(), settings.decisions),
            router: router.clone(),
            dispatcher: dispatcher.clone(),
            directory,
            events: events.clone(),
            policy,
            keep_alive: settings.events.keep_alive,
            mcp,
            mcp_plugins: mcp_plugins.clone(),
            mcp_endpoint: mcp_endpoint.clone(),
            local_addr,
            owners,
            keeps_state,
            restored,
            store_status,
        });

        let mut server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                // The guard wraps everything, CORS included: a foreign page gets a 403 even for a
                // preflight.
                .wrap(api::guard::cors())
                .wrap(middleware::from_fn(api::guard::loopback_only))
                .configure(api::configure)
                .default_service(web::to(api::not_found))
        })
        .client_request_timeout(REQUEST_HEAD_TIMEOUT)
        .on_connect(|connection, _| {
            if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
                let _ = tcp.set_nodelay(true);
            }
        })
        // The backstop of a graceful stop: calls are answered at the end of the grace period,
        // so only a connection that will not take its answer is still open after this.
        .shutdown_timeout((settings.stop_grace + ANSWER_MARGIN).as_secs().max(1))
        // A client that closes its connection has gone away: the request's handler is dropped
        // at once, which ends an invoke's callback exchange instead of letting it run to its
        // timeout for nobody (HTTP clients do not half-close after a request).
        .h1_allow_half_closed(false)
        // Whoever runs the application decides how it stops (`main` turns SIGINT and SIGTERM
        // into a graceful stop through `handle()`); actix's own handlers would treat SIGINT
        // as a forced stop and race it.
        .disable_signals()
        .listen(listener)?;
        if let Some(workers) = settings.workers {
            server = server.workers(workers);
        }
        Ok(Self {
            server: server.run(),
            local_addr,
            router,
            dispatcher,
            stop_grace: settings.stop_grace,
            events,
            _mcp_clients: mcp_clients,
            mcp_plugins,
            mcp_endpoint,
            operator_token,
        })
    }

    /// What stops this application gracefully (what `main` calls on SIGTERM and SIGINT).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            server: self.server.handle(),
            router: self.router.clone(),
            dispatcher: self.dispatcher.clone(),
            events: self.events.clone(),
            grace: self.stop_grace,
            mcp_plugins: self.mcp_plugins.clone(),
            mcp_endpoint: self.mcp_endpoint.clone(),
        }
    }

    /// The address actually bound (the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The router, for in-process plugins and tests.
    pub fn router(&self) -> Addr<Router> {
        self.router.clone()
    }

    /// The dispatcher, for in-process callers that run tool calls themselves.
    pub fn dispatcher(&self) -> Dispatcher {
        self.dispatcher.clone()
    }

    /// The event hub, for in-process code that publishes or subscribes. The [`Stopper`] closes
    /// it; whoever stops the server through [`handle`](Application::handle) instead must
    /// [`EventHub::close`] it first, or the graceful stop waits for the open event streams.
    pub fn events(&self) -> EventHub {
        self.events.clone()
    }

    /// The person's credential (`[security] operator_token_env`, or made at this start): what
    /// `Authorization: Bearer` must carry to decide an approval or free a source's binding. The
    /// binary prints it once, in the inspector's address; nothing else shows it.
    pub fn operator_token(&self) -> &OperatorToken {
        &self.operator_token
    }

    /// A handle that stops the server (gracefully when asked to).
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until the server is stopped through its [`handle`](Application::handle). Nothing
    /// is served, and no signal is handled, until this is awaited; the caller installs its own
    /// signal handling (as `main` does).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

/// The first line of the warning printed when binding anything but loopback.
pub const NON_LOOPBACK_WARNING: &str = "WARNING: listening on a non-loopback address";

/// Says, where nobody can miss it, that the port is open to the network. It goes to stderr
/// directly as well as to the log, because a log filter (`RUST_LOG=error`) must not hide it.
fn warn_non_loopback_bind(bind: SocketAddr) {
    let text = format!(
        "{NON_LOOPBACK_WARNING} ({bind}): the port is reachable from other machines. \
         The API still answers only loopback callers (403 for everyone else), but nothing \
         needs this: bind 127.0.0.1 (the default) unless you know why not"
    );
    eprintln!("\n{}\n{text}\n{}\n", "!".repeat(78), "!".repeat(78));
    tracing::warn!(bind = %bind, "{text}");
}

/// Whether `url` names this server's own address (a chat upstream that would be itself).
fn reaches_this_server(url: &str, local: SocketAddr) -> bool {
    let Ok(url) = url::Url::parse(url) else {
        return false;
    };
    crate::domain::callback_url::CallbackUrl::parse(url.as_str())
        .is_ok_and(|callback| callback.reaches(local))
}

/// A listening socket on `addr`; an IPv6 wildcard also accepts IPv4 (dual-stack).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Binds the `[[security.source]]` sources to the tokens their variables hold, before anything
/// else can bind them; a variable that is missing or holds no token stops start-up, naming the
/// variable and the key (never the value).
fn bind_configured_sources(
    configured: &[ConfiguredSource],
    owners: &SharedOwners,
) -> anyhow::Result<()> {
    for (i, bound) in configured.iter().enumerate() {
        let token = bound
            .token()
            .map_err(|e| anyhow::anyhow!("key `security.source[{i}].token_env`: {e}"))?;
        owners.with(|owners| owners.configure(bound.source.clone(), token));
        tracing::info!(source = %bound.source, token_env = %bound.token_env, "source bound by the configuration");
    }
    Ok(())
}

/// Opens the state store when the settings name one, binds the sources it recorded to their
/// salted token hashes (not those the configuration binds: its binding wins, and the stored
/// one is dropped), and reads back its tools and runtime MCP servers (each with the registration
/// parser, as when it was registered) to be restored dormant: the router's part and the MCP
/// registry's. A tool of a character that is no longer configured, or one this version no
/// longer accepts, is left out with a warning; so is such an MCP server. Each restored tool or
/// server keeps the time it went dormant; those going dormant now have it stored before the
/// server starts (so their time counts across restarts). A restored tool or server of a bound
/// source waits for its owner before anything wakes it.
async fn keep_state(
    settings: &Settings,
    owners: SharedOwners,
    local_addr: SocketAddr,
) -> anyhow::Result<(Keeping, McpKeeping)> {
    let mut keeping = Keeping {
        owners,
        store: None,
        dormant: Vec::new(),
        dormant_ttl: settings.state.dormant_ttl,
    };
    let mut mcp_keeping = McpKeeping {
        dormant_ttl: settings.state.dormant_ttl,
        ..McpKeeping::default()
    };
    let Some(path) = &settings.state.path else {
        return Ok((keeping, mcp_keeping));
    };
    let (store, restored) = StateStore::open(path, settings.state.new)?;
    let overridden: Vec<String> = keeping.owners.with(|owners| {
        let mut overridden = Vec::new();
        for (source, salted) in restored.owners {
            if !owners.restore(source.clone(), salted) {
                overridden.push(source);
            }
        }
        overridden
    });
    // Stored before the server starts, as every change is before it is made: a start whose
    // store cannot keep these stops here (the file was writable a moment ago, when it opened).
    let mut kept = Vec::new();
    for source in overridden {
        // The configuration's binding wins; the stored one would come back if it went.
        tracing::warn!(%source, "a stored binding of a source the configuration binds is dropped");
        let what = format!("cannot drop the stored binding of {source:?}");
        kept.push((what, store.submit(Op::Unbind { source })));
    }
    let now = SystemTime::now();
    let since = |stored: Option<u64>| stored.map_or(now, from_epoch_millis);
    let bound = |source: &str| keeping.owners.with(|owners| owners.is_bound(source));
    let mut going_dormant = Vec::new();
    for (character, name, stored) in restored.tools {
        if !settings.characters.iter().any(|c| c.name == character) {
            tracing::warn!(%character, %name, "a stored tool's character is not configured: not restored");
            continue;
        }
        match api::restore_tool(&stored.body, local_addr) {
            Ok(tool) => {
                if stored.dormant_since.is_none() {
                    going_dormant.push((character.clone(), name));
                }
                keeping.dormant.push(DormantTool {
                    character,
                    awaits_owner: bound(&tool.source),
                    tool: std::sync::Arc::new(tool),
                    mcp: false,
                    since: since(stored.dormant_since),
                });
            }
            Err(e) => {
                tracing::warn!(%character, %name, "a stored tool could not be read again: {e}");
            }
        }
    }
    let characters: Vec<String> = settings.characters.iter().map(|c| c.name.clone()).collect();
    let configured = |name: &str| settings.mcp_servers.iter().any(|s| s.name == name);
    let mut going_dormant_servers = Vec::new();
    for (name, stored) in restored.mcp_servers {
        let registration = api::restore_mcp_server(&stored.body, local_addr, configured).and_then(
            |registration| match &registration.role {
                Some(role) if !characters.contains(role) => {
                    Err(format!("its role {role:?} is not a configured character"))
                }
                _ => Ok(registration),
            },
        );
        let token = keeping
            .owners
            .with(|owners| owners.owner_of(&stored.source));
        let dormant_since = since(stored.dormant_since);
        let restored = registration
            .and_then(|r| restore_mcp(&name, &stored, r, &characters, token, dormant_since));
        match restored {
            Ok((server, tools)) => {
                if stored.dormant_since.is_none() {
                    going_dormant_servers.push(name);
                }
                keeping.dormant.extend(tools);
                mcp_keeping.restored.push(server);
            }
            Err(e) => {
                tracing::warn!(mcp_server = %name, "a stored MCP server could not be read again: {e}");
            }
        }
    }
    if !going_dormant.is_empty() || !going_dormant_servers.is_empty() {
        let marked = store.submit(Op::Dormant {
            tools: going_dormant,
            servers: going_dormant_servers,
            since: epoch_millis(now),
        });
        let what = "cannot keep when restored tools went dormant".to_owned();
        kept.push((what, marked));
    }
    for (what, durable) in kept {
        durable
            .await
            .unwrap_or_else(|_| Err("the state store stopped".into()))
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    }
    tracing::info!(path = %path.display(), restored = keeping.dormant.len(), mcp_servers = mcp_keeping.restored.len(), "state store opened");
    mcp_keeping.store = Some(store.clone());
    keeping.store = Some(store);
    Ok((keeping, mcp_keeping))
}

/// A pinned tool no character holds at start is worth a line, not an error: its plugin or MCP
/// server may register it later, and it is pinned from then on. Restored tools count as held.
fn warn_unknown_pinned(characters: &[CharacterSettings], directory: &Directory) {
    for character in characters {
        if character.tools.pinned.is_empty() {
            continue;
        }
        let Ok(listed) = directory.list(Some(&character.name)) else {
            continue;
        };
        let Some(listed) = listed.first() else {
            continue;
        };
        let mut held: Vec<&str> = listed.tools.tools().map(|t| t.name.as_str()).collect();
        held.extend(listed.dormant.iter().map(|d| d.name.as_str()));
        for name in character.tools.unknown_pinned(&held) {
            tracing::warn!(
                character = %character.name,
                tool = name,
                "a pinned tool ([character.tools] pinned) is not registered now; it is pinned \
                 once it registers"
            );
        }
    }
}
