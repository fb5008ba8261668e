//! The messages `McpPlugins` handles: registrations and removals from the routes, clears from
//! the router, and what its servers' connections report.

use super::*;

impl Actor for McpPlugins {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Plugins register at any rate; an unbounded mailbox keeps each sender's order.
        ctx.set_mailbox_capacity(0);
        self.watch_restored(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        for (_, server) in self.servers.drain(..) {
            server.cancel.cancel();
        }
    }
}

impl Handler<RegisterMcpServer> for McpPlugins {
    type Result = ResponseActFuture<Self, Result<McpRegistered, McpPluginError>>;

    fn handle(
        &mut self,
        RegisterMcpServer {
            registration,
            token,
            record,
        }: RegisterMcpServer,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        if let Err(refused) = self.check(&registration) {
            return Box::pin(fut::ready(Err(refused)));
        }
        // The server it replaces, if any, is a change to that server's source too.
        let replaced = self.source_of(&registration.name);
        let who = Credential::Plugin(token);
        // A binding this registration makes is stored before the server is connected to (and
        // before the registration's own record, which waits for its listing); one the store
        // cannot keep is undone, and nothing is registered.
        let (binding, bound) =
            match self
                .owners
                .authorize(who, replaced, Some(&registration.source))
            {
                Err(refused) => {
                    return Box::pin(fut::ready(Err(RouterError::from(refused).into())));
                }
                Ok(Some((source, hash))) => {
                    let stored = self.journal(Op::Bind {
                        source: source.clone(),
                        hash: *hash.bytes(),
                    });
                    (Some((source, hash)), stored)
                }
                Ok(None) => (None, None),
            };
        self.next_generation += 1;
        let generation = self.next_generation;
        let name = registration.name.clone();
        self.pending
            .insert(name.clone(), (generation, registration.source.clone()));
        let registration = Arc::new(registration);
        let listener = Listener {
            plugins: ctx.address(),
            name: name.clone(),
            generation,
        };
        let opening = {
            let (registration, max_result_bytes) = (registration.clone(), self.max_result_bytes);
            async move {
                durable(bound).await?;
                Ok(open(registration, listener, max_result_bytes).await)
            }
        };
        Box::pin(opening.into_actor(self).then(move |opened, act, ctx| {
            // Registrations of one name take effect in the order they arrived: one that a later
            // one overtook while connecting is dropped.
            let latest = act.pending.get(&name).map(|(g, _)| *g) == Some(generation);
            if latest {
                act.pending.shift_remove(&name);
            }
            let opened = match opened {
                Ok(opened) => opened,
                Err(not_stored) => {
                    if let Some((source, hash)) = binding {
                        act.owners.with(|owners| owners.undo_binding(&source, &hash));
                    }
                    return Box::pin(fut::ready(Err(not_stored)))
                        as LocalBoxActorFuture<Self, _>;
                }
            };
            let done: LocalBoxActorFuture<Self, Result<McpRegistered, McpPluginError>> =
                match opened {
                    Err(failure) => {
                        tracing::warn!(mcp_server = %name, url = %registration.url.as_written(), stage = failure.stage.name(), error = %failure.error, "MCP server could not be registered");
                        Box::pin(fut::ready(Ok(McpRegistered::failed(
                            Some(failure.stage),
                            format!("{}: {}", failure.stage.name(), failure.error),
                        ))))
                    }
                    Ok(_) if !latest => Box::pin(fut::ready(Ok(McpRegistered::failed(
                        None,
                        "a later registration of the same name was made while this one \
                         connected; it replaced this one"
                            .to_owned(),
                    )))),
                    Ok(opened) => act.install(registration, generation, opened, token, record, ctx),
                };
            done
        }))
    }
}

impl Handler<UnregisterMcpServer> for McpPlugins {
    type Result = ResponseFuture<Result<McpUnregistered, McpPluginError>>;

    fn handle(&mut self, msg: UnregisterMcpServer, _: &mut Self::Context) -> Self::Result {
        let who = Credential::Plugin(msg.token);
        if let Err(refused) = self.owners.authorize(who, self.source_of(&msg.name), None) {
            return Box::pin(async move { Err(RouterError::from(refused).into()) });
        }
        if let Some(removed) = self.forget_restored(&msg.name, "unregistered") {
            tracing::info!(mcp_server = %msg.name, "restored MCP server unregistered");
            return removed;
        }
        match self.retire(&msg.name, "unregistered", true, true) {
            None => Box::pin(async { Ok(McpUnregistered::default()) }),
            Some(retired) => {
                tracing::info!(mcp_server = %msg.name, "MCP server unregistered");
                Box::pin(async move {
                    Ok(McpUnregistered {
                        removed: true,
                        report: retired.await?,
                    })
                })
            }
        }
    }
}

impl Handler<SourceCleared> for McpPlugins {
    type Result = ResponseFuture<()>;

    /// The clear removed the tools already; the connections of that source close (and a
    /// listing still on its way to the router is taken back after it).
    fn handle(&mut self, msg: SourceCleared, _: &mut Self::Context) -> Self::Result {
        let names: Vec<(String, bool)> = self
            .servers
            .iter()
            .filter(|(_, s)| s.registration.source == msg.source)
            .map(|(name, s)| (name.clone(), s.applying > 0))
            .collect();
        let mut retired: Vec<_> = names
            .into_iter()
            .filter_map(|(name, applying)| {
                tracing::info!(mcp_server = %name, source = %msg.source, "MCP server's source cleared: its connection is closed");
                self.retire(&name, "cleared", applying, true)
            })
            .collect();
        // A restored server of that source: the clear removed its dormant tools already.
        let restored: Vec<String> = self
            .restoring
            .iter()
            .filter(|(_, r)| r.registration.source == msg.source)
            .map(|(name, _)| name.clone())
            .collect();
        for name in restored {
            if let Some(forgotten) = self.forget_restored(&name, "cleared") {
                retired.push(forgotten.map(|done| done.map(|u| u.report)).boxed());
            }
        }
        Box::pin(async move {
            futures_util::future::join_all(retired).await;
        })
    }
}

impl Handler<CloseMcpPlugins> for McpPlugins {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: CloseMcpPlugins, _: &mut Self::Context) -> Self::Result {
        let closing: Vec<_> = self
            .servers
            .drain(..)
            .map(|(_, server)| close(server.cancel, server.closed))
            .collect();
        Box::pin(async move {
            futures_util::future::join_all(closing).await;
        })
    }
}

impl Handler<ToolListChanged> for McpPlugins {
    type Result = ();

    fn handle(&mut self, msg: ToolListChanged, ctx: &mut Self::Context) {
        let Some(server) = self
            .servers
            .get_mut(&msg.name)
            .filter(|s| s.generation == msg.generation)
        else {
            return;
        };
        if server.listing {
            server.relist = true;
            return;
        }
        self.relist(msg.name, ctx);
    }
}

impl Handler<ConnectionEnded> for McpPlugins {
    type Result = ();

    fn handle(&mut self, msg: ConnectionEnded, ctx: &mut Self::Context) {
        if self
            .servers
            .get(&msg.name)
            .is_none_or(|s| s.generation != msg.generation)
        {
            return;
        }
        tracing::warn!(mcp_server = %msg.name, reason = %msg.reason, "MCP server's connection ended: its tools are removed");
        let reason = format!("connection ended: {}", msg.reason);
        if let Some(retired) = self.retire(&msg.name, &reason, true, false) {
            ctx.spawn(retired.into_actor(self).map(|_, _, _| ()));
        }
    }
}

impl Handler<ServerDead> for McpPlugins {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: ServerDead, _: &mut Self::Context) -> Self::Result {
        let url = match self
            .servers
            .get(&msg.name)
            .filter(|s| s.generation == msg.generation)
        {
            Some(server) => server.registration.url.as_written().to_owned(),
            None => return Box::pin(async {}),
        };
        let reason = format!(
            "auto_removed: {} calls in a row could not connect to {url}",
            msg.failures
        );
        let Some(retired) = self.retire(&msg.name, &reason, true, false) else {
            return Box::pin(async {});
        };
        let name = msg.name;
        Box::pin(async move {
            let Ok(report) = retired.await else {
                return;
            };
            tracing::warn!(
                mcp_server = %name,
                url = %url,
                failures = msg.failures,
                removed = report.removed,
                affected_roles = ?report.affected_roles,
                "removed the tools of an MCP server that stopped accepting connections"
            );
        })
    }
}
