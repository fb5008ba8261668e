//! Listing an MCP server's tools, every page of them, within bounds: a server (configured, or
//! registered at run time by a plugin) cannot make the listing run forever or take all memory.
//! Used by both kinds of MCP client ([`super::client`], [`super::runtime`]).

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};

use super::mapping::{self, Definition, Skipped};

/// Most tools taken from one server's listing: far more than any model is usefully given (the
/// OpenAI APIs take 128 functions per request), small enough that a server listing without end
/// cannot fill the memory. The rest are reported as skipped.
pub(crate) const MAX_LISTED_TOOLS: usize = 1024;

/// Most pages read from one listing: a server whose cursors never end (each page empty, say)
/// stops being read here.
pub(crate) const MAX_LIST_PAGES: usize = 256;

/// One complete listing: the tools taken, and whether the server had more than the bounds let
/// through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    pub tools: Vec<Tool>,
    /// What was left unread, in words, when the listing was cut short.
    pub cut: Option<String>,
}

impl Listing {
    /// The tools as this server's definitions, and those that cannot be registered (with the
    /// part of the listing left unread, if any, as one more entry).
    pub(crate) fn definitions(&self) -> (Vec<Definition>, Vec<Skipped>) {
        let mut definitions = Vec::with_capacity(self.tools.len());
        let mut skipped = Vec::new();
        for tool in &self.tools {
            match mapping::definition(tool) {
                Ok(definition) => definitions.push(definition),
                Err(skip) => skipped.push(skip),
            }
        }
        if let Some(cut) = &self.cut {
            skipped.push(Skipped {
                name: "…".to_owned(),
                reason: cut.clone(),
            });
        }
        (definitions, skipped)
    }
}

/// Lists every page of `peer`'s tools, up to [`MAX_LISTED_TOOLS`] tools and [`MAX_LIST_PAGES`]
/// pages.
pub(crate) async fn list_every_tool(peer: &Peer<RoleClient>) -> Result<Listing, ServiceError> {
    let mut listing = Listing::default();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await?;
        listing.tools.extend(page.tools);
        if listing.tools.len() > MAX_LISTED_TOOLS {
            listing.tools.truncate(MAX_LISTED_TOOLS);
            listing.cut = Some(format!(
                "the listing has more than {MAX_LISTED_TOOLS} tools: the rest were not read"
            ));
            return Ok(listing);
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(listing);
        }
    }
    listing.cut = Some(format!(
        "the listing goes on past {MAX_LIST_PAGES} pages: the rest were not read"
    ));
    Ok(listing)
}
