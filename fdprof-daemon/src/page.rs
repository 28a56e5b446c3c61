//! The live page at `/`: one HTML file, its stylesheet and its script, embedded in the binary
//! (nothing is fetched from elsewhere). The script fills the page from `/report.json` and
//! `/flamegraph.svg` as it loads and at each interval `/api/v1/stream` announces; it reads the
//! credential from the cookie a `?token=` answer sets, as every endpoint takes it.

use std::sync::Arc;

use axum::{
    extract::State as Shared,
    http::header,
    response::{IntoResponse, Response},
};

use super::app::App;

const HTML: &str = include_str!("page/index.html");
const CSS: &str = include_str!("page/page.css");
const SCRIPT: &str = include_str!("page/page.js");

/// Only the daemon's own script and styles run; inline styles for the flamegraph's SVG.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                      img-src 'self' data:; object-src 'none'; frame-ancestors 'none'";

fn embedded(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn index() -> Response {
    embedded("text/html; charset=utf-8", HTML)
}

pub(super) async fn css() -> Response {
    embedded("text/css; charset=utf-8", CSS)
}

pub(super) async fn script() -> Response {
    embedded("text/javascript; charset=utf-8", SCRIPT)
}

/// The target names, for the page's selector.
pub(super) async fn targets(Shared(app): Shared<Arc<App>>) -> Response {
    let names: Vec<String> = app.state.read().names.keys().cloned().collect();
    let json = serde_json::to_string(&names).unwrap_or_else(|_| "[]".into());
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}
