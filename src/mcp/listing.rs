//! Listing an MCP server's tools, every page of them, within bounds: a server (configured, or
//! registered at run time by a plugin) cannot make the listing run forever or take all memory.
//! A tool larger than a plugin could register over HTTP, or listed twice, is skipped; the
//! listing ends at its count, its size, its number of pages, or a cursor the server gave
//! before. Used by both kinds of MCP client ([`super::client`], [`super::runtime`]).

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};

use std::collections::HashSet;

use super::bounds::{MAX_LISTING_BYTES, MAX_TOOL_DEFINITION_BYTES, json_bytes};
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
    /// Tools left out while listing (too large, or listed before), with why.
    pub refused: Vec<Skipped>,
    /// What was left unread, in words, when the listing was cut short.
    pub cut: Option<String>,
}

impl Listing {
    /// The tools as this server's definitions, and those that cannot be registered (with the
    /// part of the listing left unread, if any, as one more entry).
    pub(crate) fn definitions(&self) -> (Vec<Definition>, Vec<Skipped>) {
        let mut definitions = Vec::with_capacity(self.tools.len());
        let mut skipped = self.refused.clone();
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

/// Lists every page of `peer`'s tools, up to [`MAX_LISTED_TOOLS`] tools, [`MAX_LIST_PAGES`]
/// pages and [`MAX_LISTING_BYTES`], until a cursor comes back.
pub(crate) async fn list_every_tool(peer: &Peer<RoleClient>) -> Result<Listing, ServiceError> {
    let mut listing = Listing::default();
    let mut taken = Taken::default();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await?;
        if let Some(cut) = taken.page(&mut listing, page.tools) {
            listing.cut = Some(cut);
            return Ok(listing);
        }
        cursor = page.next_cursor;
        match &cursor {
            None => return Ok(listing),
            Some(next) if !taken.cursors.insert(next.clone()) => {
                listing.cut = Some(format!(
                    "the server gave the cursor {:?} a second time: the listing ends there",
                    crate::domain::peer_text::bounded_str(next)
                ));
                return Ok(listing);
            }
            Some(_) => {}
        }
    }
    listing.cut = Some(format!(
        "the listing goes on past {MAX_LIST_PAGES} pages: the rest were not read"
    ));
    Ok(listing)
}

/// What a listing took so far.
#[derive(Default)]
struct Taken {
    names: HashSet<String>,
    cursors: HashSet<String>,
    bytes: usize,
}

impl Taken {
    /// Takes a page's tools into `listing`; why the listing ends here, if it does.
    fn page(&mut self, listing: &mut Listing, tools: Vec<Tool>) -> Option<String> {
        for tool in tools {
            let name = tool.name.to_string();
            let bytes = tool_bytes(&tool);
            if bytes > MAX_TOOL_DEFINITION_BYTES {
                listing.refused.push(Skipped {
                    reason: format!(
                        "its name, description and inputSchema are {bytes} bytes; at most \
                         {MAX_TOOL_DEFINITION_BYTES} are taken (as a registration's body)"
                    ),
                    name: crate::domain::peer_text::bounded(name),
                });
                continue;
            }
            if !self.names.insert(name.clone()) {
                listing.refused.push(Skipped {
                    name,
                    reason: "listed more than once: the first is taken".to_owned(),
                });
                continue;
            }
            if self.bytes + bytes > MAX_LISTING_BYTES {
                return Some(format!(
                    "the listing is over {MAX_LISTING_BYTES} bytes: the rest were not taken"
                ));
            }
            if listing.tools.len() == MAX_LISTED_TOOLS {
                return Some(format!(
                    "the listing has more than {MAX_LISTED_TOOLS} tools: the rest were not read"
                ));
            }
            self.bytes += bytes;
            listing.tools.push(tool);
        }
        None
    }
}

/// A listed tool's size: what of it a session's tool update carries.
fn tool_bytes(tool: &Tool) -> usize {
    tool.name.len()
        + tool.description.as_deref().map_or(0, str::len)
        + json_bytes(&*tool.input_schema)
}
