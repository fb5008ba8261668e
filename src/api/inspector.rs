//! The inspector page: `GET /` and its assets, plain HTML, CSS and JavaScript embedded in the
//! binary (no build step, nothing fetched from elsewhere).
//!
//! The page is a client of the public API and nothing else: it reads `GET /api/tools?detail=full`
//! and `GET /api/sessions`, follows `GET /api/events`, and calls `POST /api/tools/invoke`. These
//! handlers only hand out the files, behind the same loopback guard as every route.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

/// One embedded file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// The page and everything it loads: the only files it may use (see [`CONTENT_SECURITY_POLICY`]).
const ASSETS: [Asset; 4] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("inspector/index.html"),
    },
    Asset {
        path: "/inspector.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("inspector/inspector.css"),
    },
    Asset {
        path: "/inspector.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("inspector/inspector.js"),
    },
    Asset {
        path: "/schema-form.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("inspector/schema-form.js"),
    },
];

/// What the page may load and run: its own files and the API of this server, and images given
/// inline as `data:` URLs (a tool's result); no inline script or style, no other origin, no
/// plugins, no framing (a page of another site cannot overlay it to steer clicks), and no form
/// submission (forms are sent by the script).
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    for asset in &ASSETS {
        cfg.service(
            super::resource(asset.path).route(super::read_route().to(move || serve(asset))),
        );
    }
}

/// One file, revalidated on every load (`no-cache`), so a new server version is never shown
/// with an old script.
async fn serve(asset: &'static Asset) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, asset.content_type))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(asset.body)
}
