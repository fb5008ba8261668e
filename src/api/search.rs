//! `GET /api/tools/search`: a character's tools ranked for a text, best first.
//!
//! The handler parses the query string, loads the character's published snapshot from the
//! `Directory` (no message to anyone: the snapshot carries its search index) and searches it on
//! the worker's own thread, then announces the search (`tool.search`, which never carries the
//! text) and answers.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody, FieldError, ValidationErrorBody};
use crate::events::{SearchKind, ToolSearched};

/// Longest query, in characters: a request in a sentence or two, and the bound `find_tools`
/// gives the model's query too.
pub(crate) const MAX_QUERY_CHARS: usize = 512;

/// Most tools one search answers with: more than a model is given at once after a search, few
/// enough that an answer stays small.
pub(crate) const MAX_SEARCH_LIMIT: usize = 50;

/// Tools a search answers with when it names no `limit`.
pub(crate) const DEFAULT_SEARCH_LIMIT: usize = 10;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        super::resource("/api/tools/search")
            .app_data(super::query_config())
            .route(super::read_route().to(search)),
    );
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SearchQuery {
    /// The character whose tools are searched.
    #[param(required = true)]
    role: Option<String>,
    /// What to search for, 1 to 512 characters: a request in words, a tool's name, a few
    /// keywords.
    #[param(required = true, min_length = 1, max_length = 512)]
    q: Option<String>,
    /// At most this many tools, 1 to 50 (default 10).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 50)]
    limit: Option<String>,
}

/// A search's answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SearchResponse<'a> {
    /// The character searched.
    role: &'a str,
    /// The query, as given.
    query: &'a str,
    /// The tools found, best first (equal scores by name, ascending); only tools that share a
    /// word with the query, so possibly fewer than `limit`, or none.
    tools: Vec<FoundTool<'a>>,
}

/// One tool found.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FoundTool<'a> {
    name: &'a str,
    /// The lifecycle tag `clear` uses.
    source: &'a str,
    description: &'a str,
    /// How well it matches: higher is better; comparable within one answer only.
    score: f64,
}

/// A failing query parameter.
fn invalid(field: &str, kind: &'static str, msg: impl Into<String>) -> FieldError {
    FieldError {
        loc: vec!["query".into(), field.into()],
        msg: msg.into(),
        kind,
    }
}

/// The role, query and limit, or every parameter that fails.
fn parse(query: SearchQuery) -> Result<(String, String, usize), ApiError> {
    let mut errors = Vec::new();
    let role = query.role.filter(|r| !r.is_empty());
    if role.is_none() {
        errors.push(invalid(
            "role",
            "missing",
            "Field required: the character to search",
        ));
    }
    let q = query.q;
    match &q {
        None => errors.push(invalid(
            "q",
            "missing",
            "Field required: what to search for",
        )),
        Some(text) => {
            let chars = text.chars().count();
            if chars == 0 {
                errors.push(invalid(
                    "q",
                    "string_too_short",
                    format!("must be 1 to {MAX_QUERY_CHARS} characters, got none"),
                ));
            } else if chars > MAX_QUERY_CHARS {
                errors.push(invalid(
                    "q",
                    "string_too_long",
                    format!("must be 1 to {MAX_QUERY_CHARS} characters, got {chars}"),
                ));
            }
        }
    }
    let limit = match query.limit.as_deref() {
        None => Some(DEFAULT_SEARCH_LIMIT),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_SEARCH_LIMIT).contains(&n) => Some(n),
            _ => {
                errors.push(invalid(
                    "limit",
                    "value_error",
                    format!("must be a whole number from 1 to {MAX_SEARCH_LIMIT}, got {text:?}"),
                ));
                None
            }
        },
    };
    match (role, q, limit) {
        (Some(role), Some(q), Some(limit)) if errors.is_empty() => Ok((role, q, limit)),
        _ => Err(ApiError::Validation(errors)),
    }
}

/// A character's tools that best match a text, best first: ranked by the tool's name (split
/// at case changes, `_`, `.`, `-`), description, parameter names and descriptions and source,
/// then by what the text and each tool are about (compiled-in token vectors), locally and
/// deterministically.
#[utoipa::path(
    get,
    path = "/api/tools/search",
    tag = "tools",
    params(SearchQuery),
    responses(
        (status = 200, description = "The tools found, best first", body = SearchResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
        (status = 422, description = "`role` or `q` is missing, `q` is over 512 characters, `limit` is not 1 to 50, or the query string could not be read", body = ValidationErrorBody),
    )
)]
async fn search(
    state: web::Data<AppState>,
    query: web::Query<SearchQuery>,
) -> Result<HttpResponse, ApiError> {
    let (role, text, limit) = parse(query.into_inner())?;
    // The character's published snapshot, read on this worker's thread.
    let listed = state.directory.list(Some(&role))?;
    let snapshot = &listed[0].tools;
    let hits = snapshot.search(&text, limit);
    let found: Vec<&str> = hits.iter().map(|hit| hit.item.name.as_str()).collect();
    state.events.tool_searched(&ToolSearched {
        role: &role,
        query_length: text.chars().count(),
        found: &found,
        kind: SearchKind::Api,
    });
    let tools = hits
        .iter()
        .map(|hit| FoundTool {
            name: &hit.item.name,
            source: &hit.item.source,
            description: &hit.item.description,
            score: hit.score,
        })
        .collect();
    Ok(HttpResponse::Ok().json(SearchResponse {
        role: &role,
        query: &text,
        tools,
    }))
}
