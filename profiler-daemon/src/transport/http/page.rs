//! The web view's page: `GET /` serves `web/index.html`, and `/ui/FILE`
//! its scripts and style sheet (`web/*.js`, `web/app.css`) and the flame
//! graph viewer it draws with (d3-flame-graph on d3, fetched at pinned
//! versions by `cargo xtask` and embedded by the build script).
//!
//! Owns the page's files; it must not answer the page's data requests
//! (`view`, `source`).

use axum::{
    Router,
    extract::Path,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::routes::{Answer, HttpError, Routes};
use crate::quote;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/web_viewer.rs"));
}

const INDEX_HTML: &str = include_str!("web/index.html");

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// The page's own files under `/ui/`: name, content type, text.
const FILES: &[(&str, &str, &str)] = &[
    ("app.js", JAVASCRIPT, include_str!("web/app.js")),
    ("timeline.js", JAVASCRIPT, include_str!("web/timeline.js")),
    ("tables.js", JAVASCRIPT, include_str!("web/tables.js")),
    ("source.js", JAVASCRIPT, include_str!("web/source.js")),
    ("names.js", JAVASCRIPT, include_str!("web/names.js")),
    ("peeks.js", JAVASCRIPT, include_str!("web/peeks.js")),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("web/app.css"),
    ),
];

/// The page and its files.
pub(super) fn routes() -> Router<Routes> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(ui_file))
}

/// The page. It holds no data: a client the listener refuses gets it too,
/// and then the refusal from the first `/api/` request, shown on the page.
async fn index() -> Response {
    if embedded::VIEWER_FILES.is_empty() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "this profilerd was built without the web view's flame graph viewer (a plain \
             `cargo build`); build it with `cargo xtask build`, which fetches the viewer from \
             the npm registry at its pinned version, or use the other routes and profilerctl\n",
        )
            .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
        .into_response()
}

async fn ui_file(Path(file): Path<String>) -> Answer {
    let own = FILES
        .iter()
        .find(|(name, _, _)| *name == file)
        .map(|(_, content_type, text)| (*content_type, text.as_bytes()));
    let viewer = || {
        embedded::VIEWER_FILES
            .iter()
            .find(|(name, _, _)| *name == file)
            .map(|(_, content_type, bytes)| (*content_type, *bytes))
    };
    let (content_type, bytes): (&str, &'static [u8]) = own.or_else(viewer).ok_or_else(|| {
        HttpError(
            StatusCode::NOT_FOUND,
            format!("the web view has no file {}; open / instead", quote(&file)),
        )
    })?;
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_nothing_inline_that_its_content_security_policy_blocks() {
        let html = INDEX_HTML.to_ascii_lowercase();
        for tag in html.split('<').skip(1) {
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            let attributes = tag.split_whitespace().skip(1);
            for attribute in attributes {
                assert!(
                    !attribute.starts_with("on") && !attribute.starts_with("style="),
                    "an inline handler or style: <{tag}>"
                );
            }
            if tag.starts_with("script") {
                assert!(tag.contains(" src=\"/ui/"), "an inline script: <{tag}>");
            }
            assert!(!tag.starts_with("style"), "an inline style sheet");
        }
        assert!(!html.contains("javascript:"));
    }

    #[test]
    fn the_page_and_its_files_are_served_and_nothing_else() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let served = |file: &str| {
            let response = runtime
                .block_on(ui_file(Path(file.to_owned())))
                .ok()
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let served = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
            served.to_owned()
        };
        for (file, content_type, text) in FILES {
            assert!(!text.is_empty(), "{file}");
            assert_eq!(served(file), *content_type, "{file}");
            let extension = file.rsplit('.').next().unwrap_or_default();
            let kind = if extension == "js" {
                "javascript"
            } else {
                extension
            };
            assert!(content_type.contains(kind), "{file}: {content_type}");
        }
        for (name, _, bytes) in embedded::VIEWER_FILES {
            assert!(!bytes.is_empty(), "{name}");
            served(name);
        }
        let Err(HttpError(status, _)) = runtime.block_on(ui_file(Path("../Cargo.toml".to_owned())))
        else {
            panic!("a file outside the page was served");
        };
        assert_eq!(status, StatusCode::NOT_FOUND);
        // Every file the page loads is served.
        let viewer = ["d3.min.js", "d3-flamegraph.min.js", "d3-flamegraph.css"];
        for file in FILES.iter().map(|(name, _, _)| *name).chain(viewer) {
            assert!(INDEX_HTML.contains(&format!("/ui/{file}")), "{file}");
        }
    }
}
