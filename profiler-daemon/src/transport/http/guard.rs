//! What every request to the HTTP listener passes before its route, and
//! what every answer carries:
//!
//! - the `Host` must be one of the listener's (see `hosts`), so that a page
//!   whose name DNS points at the listener (rebinding) gets nothing;
//! - a request a page of another site sent (`Sec-Fetch-Site` other than
//!   `same-origin` or `none`, or an `Origin` not the listener's own) is
//!   refused on every route but `GET /` (the page, which holds no data),
//!   and `POST /api/peek` needs a header that a form cannot send
//!   (`X-Profilerd-Request`, or a JSON content type); tools that send
//!   neither header (curl, `go tool pprof`, scrapers) are not affected;
//! - every answer carries a Content-Security-Policy (the page runs only its
//!   own `/ui/` files) and the headers that keep it out of frames, content
//!   sniffing and other sites' pages;
//! - a route that panics answers 500 with one log line, and the connection
//!   goes on.
//!
//! Owns those checks and headers; it must not decide who the caller is
//! (see the listener) nor what it may see (see `access`).

use std::{
    cell::{Cell, RefCell},
    future::Future,
    net::SocketAddr,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{Arc, Once},
    task::{Context, Poll},
};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse as _, Response},
};
use tracing::error;

use super::{
    hosts::{self, AllowedHost},
    routes::HttpError,
};

/// The header the web view sends with `POST /api/peek` (any value): a
/// page of another site cannot send it without the daemon's leave (CORS).
pub const REQUEST_HEADER: &str = "x-profilerd-request";

/// The page loads its own scripts and styles from `/ui/` and asks only its
/// own origin; d3-flame-graph 5.0.0 also adds one `<style>` element, whose
/// text is the hash's (the same rules as `/ui/d3-flamegraph.css`). The
/// favicon is an empty `data:` URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'sha256-PjPkXjWPssRCMzB6p5SnF25xrwIH7ThbVHWlE+SG1DE='; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// The headers every answer carries.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    // Another site's page cannot even embed an answer as an image or script.
    ("cross-origin-resource-policy", "same-origin"),
];

/// What the guard knows of a connection: where it came in, and whether
/// over TLS; and the names `http_allowed_hosts` adds.
#[derive(Clone, Debug)]
pub struct Guard {
    pub local: SocketAddr,
    pub tls: bool,
    pub allowed: Arc<[AllowedHost]>,
}

/// The middleware: checks the request, answers it, adds the headers.
pub async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let mut response = match guard.refusal(&request) {
        Some(refused) => refused.into_response(),
        None => answer_catching_panics(request, next).await,
    };
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

impl Guard {
    /// Why `request` is refused, if it is.
    fn refusal(&self, request: &Request) -> Option<HttpError> {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .or_else(|| {
                request
                    .uri()
                    .authority()
                    .map(|authority| authority.as_str())
            });
        let Some(host) =
            host.filter(|host| hosts::admits(host, self.local, self.tls, &self.allowed))
        else {
            return Some(self.misdirected(host));
        };
        let scheme = if self.tls { "https" } else { "http" };
        cross_site_refusal(
            request.method(),
            request.uri().path(),
            request.headers(),
            &format!("{scheme}://{host}"),
        )
        .map(|reason| HttpError(StatusCode::FORBIDDEN, reason))
    }

    fn misdirected(&self, host: Option<&str>) -> HttpError {
        let named = match host {
            Some(host) => format!("Host {}", crate::quote(host)),
            None => "no Host".to_owned(),
        };
        HttpError(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "misdirected request: this listener answers requests for {} (or a name of \
                 http_allowed_hosts), not {named}, so that a web page that points its own \
                 name at it (DNS rebinding) reads nothing; to reach it by that name, add the \
                 name (or name:port) to http_allowed_hosts",
                hosts::own_hosts(self.local).join(", ")
            ),
        )
    }
}

/// Why a request that a page of another site may have sent is refused:
/// every route but `GET /` refuses another site's requests, and
/// `POST /api/peek` needs [`REQUEST_HEADER`] or a JSON content type.
/// `own_origin` is the listener's origin as the request names it.
fn cross_site_refusal(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    own_origin: &str,
) -> Option<String> {
    let the_page = path == "/" && (method == Method::GET || method == Method::HEAD);
    if the_page {
        return None;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    let elsewhere = "open the web view at the listener's own address, or ask with curl, go tool \
                     pprof or profilerctl";
    if let Some(site) = header("sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return Some(format!(
            "forbidden: the browser says a page of another site sent this request to {} \
             (Sec-Fetch-Site: {}); only the listener's own pages may; {elsewhere}",
            crate::quote(path),
            crate::quote(&site)
        ));
    }
    if let Some(origin) = header("origin")
        && !origin.eq_ignore_ascii_case(own_origin)
    {
        return Some(format!(
            "forbidden: a page of {} sent this request to {}; only the listener's own pages \
             ({own_origin}) may; {elsewhere}",
            crate::quote(&origin),
            crate::quote(path)
        ));
    }
    let json = header("content-type")
        .is_some_and(|kind| kind.to_ascii_lowercase().starts_with("application/json"));
    if method == Method::POST && path == "/api/peek" && !json && header(REQUEST_HEADER).is_none() {
        return Some(
            "forbidden: POST /api/peek needs the header X-Profilerd-Request: 1 (or a JSON \
             content type), which a form on another site's page cannot send; e.g. curl -X POST \
             -H 'X-Profilerd-Request: 1' 'http://ADDRESS/api/peek?pid=PID'"
                .to_owned(),
        );
    }
    None
}

thread_local! {
    /// Whether this thread is polling a route (see [`Caught`]).
    static IN_ROUTE: Cell<bool> = const { Cell::new(false) };
    /// Where and why the route this thread polled panicked.
    static PANICKED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Answers `request`; a route that panics answers 500, and its panic is
/// logged in one line (instead of the panic hook's lines).
async fn answer_catching_panics(request: Request, next: Next) -> Response {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_ROUTE.get() {
                let payload = info.payload();
                let message = payload
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic");
                let at = info
                    .location()
                    .map(|at| format!("{}:{}", at.file(), at.line()))
                    .unwrap_or_default();
                PANICKED.set(Some(format!("{at}: {}", message.replace('\n', " "))));
            } else {
                previous(info);
            }
        }));
    });
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    match Caught(Box::pin(next.run(request))).await {
        Ok(response) => response,
        Err(()) => {
            let why = PANICKED.take().unwrap_or_default();
            error!(
                %method,
                path = %crate::quote(&path),
                "an HTTP request failed: its route panicked (a bug; please report it): {why}"
            );
            HttpError(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error: the daemon failed to answer this request (a bug, logged); \
                 the daemon goes on serving"
                    .to_owned(),
            )
            .into_response()
        }
    }
}

/// A future whose panics are caught: `Err(())` once it panicked.
struct Caught<F>(Pin<Box<F>>);

impl<F: Future> Future for Caught<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.get_mut().0.as_mut();
        IN_ROUTE.set(true);
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx)));
        IN_ROUTE.set(false);
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::{Router, body::Body, routing::get};
    use tower::{Layer as _, Service as _};

    const OWN: &str = "http://127.0.0.1:6060";

    fn refused(method: Method, path: &str, headers: &[(&str, &str)]) -> Option<String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        cross_site_refusal(&method, path, &map, OWN)
    }

    #[test]
    fn another_sites_pages_may_only_open_the_page() {
        let cross = [("sec-fetch-site", "cross-site")];
        let same_site = [("sec-fetch-site", "same-site")];
        for path in [
            "/profile_start",
            "/profile_stop",
            "/profile",
            "/debug/pprof/profile",
            "/api/query",
            "/peeks",
            "/ui/app.js",
        ] {
            let said = refused(Method::GET, path, &cross).expect(path);
            assert!(said.contains("Sec-Fetch-Site: \"cross-site\""), "{said}");
            assert!(refused(Method::GET, path, &same_site).is_some(), "{path}");
            assert!(
                refused(Method::GET, path, &[("origin", "http://evil.example")]).is_some(),
                "{path}"
            );
            assert!(refused(Method::GET, path, &[("origin", "null")]).is_some());
            // curl, go tool pprof: neither header.
            assert_eq!(refused(Method::GET, path, &[]), None, "{path}");
            assert_eq!(
                refused(
                    Method::GET,
                    path,
                    &[("sec-fetch-site", "same-origin"), ("origin", OWN)]
                ),
                None
            );
            assert_eq!(
                refused(Method::GET, path, &[("sec-fetch-site", "none")]),
                None
            );
        }
        // A link from a wiki opens the page.
        assert_eq!(refused(Method::GET, "/", &cross), None);
        assert!(refused(Method::POST, "/", &cross).is_some());
    }

    #[test]
    fn a_peek_needs_a_header_a_form_cannot_send() {
        let said = refused(Method::POST, "/api/peek", &[]).unwrap();
        assert!(said.contains("X-Profilerd-Request: 1"), "{said}");
        let form = [("content-type", "application/x-www-form-urlencoded")];
        assert!(refused(Method::POST, "/api/peek", &form).is_some());
        assert_eq!(
            refused(Method::POST, "/api/peek", &[("x-profilerd-request", "1")]),
            None
        );
        assert_eq!(
            refused(
                Method::POST,
                "/api/peek",
                &[("content-type", "application/json")]
            ),
            None
        );
        let page = [
            ("x-profilerd-request", "1"),
            ("origin", OWN),
            ("sec-fetch-site", "same-origin"),
        ];
        assert_eq!(refused(Method::POST, "/api/peek", &page), None);
        let foreign = [
            ("content-type", "application/json"),
            ("origin", "http://127.0.0.1:8000"),
        ];
        assert!(refused(Method::POST, "/api/peek", &foreign).is_some());
    }

    fn router() -> Router {
        Router::new()
            .route("/", get(|| async { "the page" }))
            .route(
                "/boom",
                get(|| async {
                    let far: u64 = std::hint::black_box(u64::MAX);
                    if far > 1 {
                        panic!("a route's bug");
                    }
                    "never"
                }),
            )
    }

    async fn get_with(path: &str, host: &str) -> (StatusCode, HeaderMap, String) {
        let request = Request::builder()
            .uri(path)
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        let guard = Guard {
            local: "127.0.0.1:6060".parse().unwrap(),
            tls: false,
            allowed: Arc::from(vec![AllowedHost::parse("profiler.example").unwrap()]),
        };
        let mut app = axum::middleware::from_fn_with_state(guard, super::guard).layer(router());
        let response = app.call(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    #[tokio::test]
    async fn every_answer_carries_the_headers_and_a_foreign_host_is_refused() {
        let (status, headers, body) = get_with("/", "localhost:6060").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "the page"));
        for (name, value) in SECURITY_HEADERS {
            assert_eq!(headers[name], value, "{name}");
        }
        let (status, _, _) = get_with("/", "profiler.example").await;
        assert_eq!(status, StatusCode::OK);

        let (status, headers, body) = get_with("/", "attacker.example:6060").await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
        assert!(
            body.contains("not Host \"attacker.example:6060\"")
                && body.contains("http_allowed_hosts")
                && body.contains("127.0.0.1:6060, localhost:6060"),
            "{body}"
        );
        assert_eq!(headers["x-frame-options"], "DENY");
        let (_, _, body) = get_with("/", &"a".repeat(5000)).await;
        assert!(body.len() < 600, "{body}");
    }

    #[tokio::test]
    async fn a_route_that_panics_answers_500_and_the_next_request_is_served() {
        let (status, headers, body) = get_with("/boom", "localhost:6060").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body.contains("internal error"), "{body}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let (status, _, _) = get_with("/", "localhost:6060").await;
        assert_eq!(status, StatusCode::OK);
    }
}
