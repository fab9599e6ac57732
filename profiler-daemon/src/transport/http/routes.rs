//! The HTTP routes: Go's `net/http/pprof` CPU and heap profiles and its
//! index page (what `go tool pprof`, Parca's scraper and Grafana Alloy's
//! `pyroscope.scrape` read), the
//! routes of ProfileEndpoints.jl (`/profile`, `/profile_start`,
//! `/profile_stop`) and the kept peeks. Each answers through the service,
//! as the gRPC API does, with the listener's caller.
//!
//! Owns the routes, their parameters' defaults and the HTTP status of each
//! error; it must not profile, store or decide access itself.

use std::{sync::Arc, time::Duration};

use axum::{
    Extension, Router,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::params::{Params, options};
use crate::{
    kernel::allocs::Sampling,
    profile::Format,
    service::{
        AllocsSpec, ProfileSpec, Service, ServiceError,
        access::{Asker, CallerKey},
        answers::Report,
        selection::date,
        unix_millis,
    },
    source_files::SourceFiles,
};

/// Who the listener let in, or why it refused the connection's requests.
#[derive(Clone, Debug)]
pub struct Admission(pub Result<Asker, String>);

#[derive(Clone)]
pub(super) struct Routes {
    pub(super) service: Arc<Service>,
    /// The source files the web view's heatmap may show.
    pub(super) sources: SourceFiles,
    /// Sessions opened by `/profile_start`, oldest first, with who opened
    /// each, for `/profile_stop` without an id (the caller's own last).
    started: Arc<std::sync::Mutex<Vec<(CallerKey, String)>>>,
}

/// The most sessions `/profile_stop` without an id chooses among.
const STARTED_KEPT: usize = 1024;

/// Go's default for `/debug/pprof/profile`.
const GO_DEFAULT_SECONDS: u64 = 30;
/// ProfileEndpoints' default for `/profile`.
const ENDPOINTS_DEFAULT_SECONDS: u64 = 10;

/// Every route, for the listener.
pub fn router(service: Arc<Service>, sources: SourceFiles) -> Router {
    Router::new()
        .route("/debug/pprof/", get(go_index))
        .route("/debug/pprof", get(go_index))
        .route("/debug/pprof/profile", get(go_profile))
        .route("/debug/pprof/heap", get(go_heap))
        .route("/debug/pprof/allocs", get(go_allocs))
        .route("/profile", get(profile))
        .route("/profile_start", get(profile_start))
        .route("/profile_stop", get(profile_stop))
        .route("/peeks", get(list_peeks))
        .route("/peeks/{id}", get(get_peek))
        .merge(super::page::routes())
        .merge(super::view::routes())
        .merge(super::source::routes())
        .fallback(unknown_route)
        .with_state(Routes {
            service,
            sources,
            started: Arc::default(),
        })
}

/// An error as the client sees it: the status and a line that says what
/// happened and what to do.
#[derive(Debug)]
pub struct HttpError(pub(super) StatusCode, pub(super) String);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", self.1),
        )
            .into_response()
    }
}

impl From<ServiceError> for HttpError {
    fn from(err: ServiceError) -> Self {
        let status = match &err {
            ServiceError::InvalidArgument(_) | ServiceError::FailedPrecondition(_) => {
                StatusCode::BAD_REQUEST
            }
            ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
            ServiceError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            ServiceError::ResourceExhausted(_) => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::Unavailable(_) | ServiceError::Stopping => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self(status, err.to_string())
    }
}

/// The caller, or 403 with the listener's reason (503 once stopping).
fn asker(routes: &Routes, admission: &Admission) -> Result<Asker, HttpError> {
    if routes.service.stopping().is_stopping() {
        return Err(ServiceError::Stopping.into());
    }
    admission
        .0
        .clone()
        .map_err(|reason| HttpError(StatusCode::FORBIDDEN, reason))
}

pub(super) type Answer = Result<Response, HttpError>;

/// The caller and the query of a request to `route`, which takes `names`
/// (besides the selector's).
pub(super) fn admitted(
    routes: &Routes,
    admission: &Admission,
    query: Vec<(String, String)>,
    route: &str,
    names: &[&str],
) -> Result<(Asker, Params), HttpError> {
    let asker = asker(routes, admission)?;
    let params = Params::new(query);
    params.only(route, names)?;
    Ok((asker, params))
}

/// `GET /debug/pprof/profile?seconds=N`: a gzipped pprof CPU profile of the
/// next N seconds (30 by default), as Go's `net/http/pprof` serves it.
async fn go_profile(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(
        &routes,
        &admission,
        query,
        "/debug/pprof/profile",
        &["seconds"],
    )?;
    let duration = params
        .seconds("seconds")?
        .unwrap_or(Duration::from_secs(GO_DEFAULT_SECONDS));
    let report = run_profile(&routes, asker, &params, duration, Format::Pprof).await?;
    Ok(attachment(report, "profile"))
}

/// `GET /debug/pprof/heap?seconds=N&pid=P`: a gzipped pprof allocation
/// profile of one process over the next N seconds, with Go's heap profile
/// values: `alloc_objects`/`alloc_space` count what was allocated in the
/// window, `inuse_objects`/`inuse_space` what of that was still held at its
/// end (allocations made before the window are not seen, so unlike Go's
/// heap profile in-use counts start at zero), `inuse_space` the default as
/// in Go's. Go's heap profile without `seconds` is a snapshot since its
/// program started, which profilerd cannot take: `seconds` is required.
async fn go_heap(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    allocation_profile(&routes, &admission, query, "heap", true).await
}

/// `GET /debug/pprof/allocs?seconds=N&pid=P`: the same profile as
/// `/debug/pprof/heap`, `alloc_space` the default as in Go's (Grafana
/// Alloy's default path for memory profiles).
async fn go_allocs(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    allocation_profile(&routes, &admission, query, "allocs", false).await
}

/// The allocation profile of `/debug/pprof/NAME` (`inuse`: `inuse_space`
/// is its default sample type, else `alloc_space`), through the service's
/// Allocs as the gRPC API asks for it.
async fn allocation_profile(
    routes: &Routes,
    admission: &Admission,
    query: Vec<(String, String)>,
    name: &'static str,
    inuse: bool,
) -> Answer {
    let route = format!("/debug/pprof/{name}");
    let (asker, params) = admitted(
        routes,
        admission,
        query,
        &route,
        &["seconds", "sample_bytes", "sample_rate"],
    )?;
    if let Some(off) = routes.service.allocations_off() {
        return Err(HttpError(StatusCode::NOT_IMPLEMENTED, off.to_string()));
    }
    if params.text("mode")?.is_some() {
        return Err(ServiceError::invalid(format!(
            "{route} does not take mode (it is for /debug/pprof/profile); an allocation \
             profile counts allocations; leave mode out"
        ))
        .into());
    }
    let duration = params.seconds("seconds")?.ok_or_else(|| {
        ServiceError::invalid(format!(
            "{route} needs seconds=N: profilerd profiles the allocations made in the next N \
             seconds (it has no snapshot of the heap since the process started); give e.g. \
             seconds=30"
        ))
    })?;
    let sampling = heap_sampling(&params)?;
    let pid = routes.service.one_process(asker, params.selector()?)?;
    let spec = AllocsSpec {
        pid,
        duration,
        sampling,
        options: options(Format::Pprof),
        inuse,
        cut_token: None,
    };
    let report = routes.service.allocs(asker, spec).await?;
    Ok(attachment(report, name))
}

/// `sample_bytes=B` (one sample per B bytes allocated, on average) or
/// `sample_rate=P` (each allocation with probability P); the default is
/// one sample per 512 KiB, as Go's.
fn heap_sampling(params: &Params) -> Result<Sampling, HttpError> {
    let bytes = params.whole_number::<u64>("sample_bytes", "a number of bytes (1 or more)")?;
    let rate = match params.text("sample_rate")? {
        None => None,
        Some(text) => Some(text.trim().parse::<f64>().map_err(|_| {
            ServiceError::invalid(format!(
                "sample_rate={} is not a probability; give e.g. sample_rate=0.01",
                crate::quote(&text)
            ))
        })?),
    };
    Ok(match (bytes, rate) {
        (Some(_), Some(_)) => {
            return Err(ServiceError::invalid(
                "give sample_bytes or sample_rate, not both (they are two ways to sample)",
            )
            .into());
        }
        (Some(bytes), None) => Sampling::Bytes(bytes),
        (None, Some(rate)) => Sampling::Rate(rate),
        (None, None) => Sampling::DEFAULT,
    })
}

/// The profiles under `/debug/pprof/`: name, query, description.
const GO_PROFILES: [(&str, &str, &str); 3] = [
    (
        "allocs",
        "allocs?seconds=30&amp;pid=P",
        "The heap profile below, by the bytes allocated (alloc_space) by default.",
    ),
    (
        "heap",
        "heap?seconds=30&amp;pid=P",
        "The allocations of one process (pid=P, or a comm, comm_regex or cgroup that selects \
         only it) over the next N seconds (seconds=N, required): allocated objects and bytes, \
         and those of them still in use at the end (inuse_space, the default). Allocations \
         made before the N seconds are not counted. Also sample_bytes=B or sample_rate=P.",
    ),
    (
        "profile",
        "profile?seconds=30",
        "CPU profile of the next N seconds (seconds=N, 30 by default) of the whole machine, or \
         of the processes selected by pid, comm, comm_regex or cgroup; mode=offcpu or wall for \
         time off CPU.",
    ),
];

/// `GET /debug/pprof/`: the profiles served here, as Go's `net/http/pprof`
/// index lists its own.
async fn go_index(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
) -> Answer {
    asker(&routes, &admission)?;
    let mut page = String::from(
        "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/\n\
         <p>Profiles served by profilerd (read them with go tool pprof URL):</p>\n<ul>\n",
    );
    for (name, link, _) in GO_PROFILES {
        page.push_str(&format!("<li><a href=\"{link}\">{name}</a></li>\n"));
    }
    page.push_str("</ul>\n<p>Profile Descriptions:</p>\n<ul>\n");
    for (name, _, description) in GO_PROFILES {
        page.push_str(&format!(
            "<li><div class=profile-name>{name}: </div> {description}</li>\n"
        ));
    }
    page.push_str("</ul>\n</body>\n</html>\n");
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response())
}

/// `GET /profile?duration=S&pprof=true|false`: ProfileEndpoints' profile
/// of the next S seconds (10 by default), as pprof or as the tree report.
async fn profile(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(
        &routes,
        &admission,
        query,
        "/profile",
        &["duration", "pprof", "n", "delay"],
    )?;
    refuse_delay(&params)?;
    let duration = params
        .seconds("duration")?
        .unwrap_or(Duration::from_secs(ENDPOINTS_DEFAULT_SECONDS));
    let format = report_format(&params)?;
    let report = run_profile(&routes, asker, &params, duration, format).await?;
    Ok(report_response(report))
}

/// `GET /profile_start`: opens a session over the selected processes.
async fn profile_start(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(
        &routes,
        &admission,
        query,
        "/profile_start",
        &["n", "delay"],
    )?;
    refuse_delay(&params)?;
    let started = routes
        .service
        .start_session(asker, params.selector()?, params.mode()?, false)
        .await?;
    let mut opened = crate::lock(&routes.started);
    // Sessions stopped elsewhere (gRPC, --force) are never taken out here:
    // only the newest are kept.
    if opened.len() >= STARTED_KEPT {
        opened.remove(0);
    }
    opened.push((asker.key, started.id.clone()));
    drop(opened);
    Ok(text(format!(
        "Started profiling session {} at {}; GET /profile_stop?id={} ends it and returns its \
         report.\n",
        started.id,
        date(started.start),
        started.id
    )))
}

/// `GET /profile_stop[?id=ID]&pprof=true|false`: closes a session (the one
/// `/profile_start` opened last when no id is given) and returns its report.
async fn profile_stop(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(
        &routes,
        &admission,
        query,
        "/profile_stop",
        &["id", "pprof"],
    )?;
    let format = report_format(&params)?;
    let id = match params.text("id")? {
        Some(id) => id,
        None => crate::lock(&routes.started)
            .iter()
            .rev()
            .find(|(owner, _)| *owner == asker.key)
            .map(|(_, id)| id.clone())
            .ok_or_else(|| {
                HttpError(
                    StatusCode::NOT_FOUND,
                    "no session you started with /profile_start is open; start one with \
                 /profile_start, or name one with ?id="
                        .to_owned(),
                )
            })?,
    };
    let report = routes
        .service
        .stop_session(asker, &id, false, options(format))
        .await;
    // Closed (or gone): not the one to stop next.
    if !matches!(report, Err(ServiceError::PermissionDenied(_))) {
        crate::lock(&routes.started).retain(|(_, started)| *started != id);
    }
    Ok(report_response(report?))
}

/// `GET /peeks`: the kept peek reports the caller may see, as JSON.
async fn list_peeks(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
) -> Answer {
    let asker = asker(&routes, &admission)?;
    let peeks: Vec<serde_json::Value> = routes
        .service
        .list_peeks(asker)
        .into_iter()
        .map(|peek| {
            serde_json::json!({
                "id": peek.id,
                "pid": peek.pid,
                "title": peek.title,
                "triggered": date(peek.triggered),
                "triggered_unix_ms": unix_millis(peek.triggered),
                "bytes": peek.bytes,
            })
        })
        .collect();
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::Value::Array(peeks).to_string(),
    )
        .into_response())
}

/// `GET /peeks/ID`: one kept peek report, as text.
async fn get_peek(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Path(id): Path<String>,
) -> Answer {
    let asker = asker(&routes, &admission)?;
    let report = routes.service.get_peek(asker, &id)?;
    Ok(text(report.text.clone()))
}

async fn unknown_route() -> HttpError {
    HttpError(
        StatusCode::NOT_FOUND,
        "no such route; profilerd serves the web view at /, /debug/pprof/ (its index), \
         /debug/pprof/profile?seconds=N, /debug/pprof/heap?seconds=N&pid=P, \
         /debug/pprof/allocs?seconds=N&pid=P, /profile?duration=S&pprof=true|false, /profile_start, /profile_stop, /peeks, \
         /peeks/ID, /api/query?since=S, /api/source?since=S&function=F and /api/peek?pid=N \
         (POST)"
            .to_owned(),
    )
}

async fn run_profile(
    routes: &Routes,
    asker: Asker,
    params: &Params,
    duration: Duration,
    format: Format,
) -> Result<Report, HttpError> {
    let spec = ProfileSpec {
        duration,
        selector: params.selector()?,
        mode: params.mode()?,
        options: options(format),
        cut_token: None,
        frequency_hz: None,
    };
    Ok(routes.service.profile(asker, spec).await?)
}

/// `pprof=true` (the default) or `false` (the tree report).
fn report_format(params: &Params) -> Result<Format, HttpError> {
    Ok(match params.flag("pprof")?.unwrap_or(true) {
        true => Format::Pprof,
        false => Format::Tree,
    })
}

/// ProfileEndpoints' `delay` sets one process's sampling interval;
/// profilerd samples the whole machine at one frequency.
fn refuse_delay(params: &Params) -> Result<(), HttpError> {
    if params.text("delay")?.is_some() {
        return Err(ServiceError::invalid(
            "delay is not taken: profilerd samples every process at the machine-wide \
             frequency_hz (profilerctl status shows it); leave delay out",
        )
        .into());
    }
    Ok(())
}

/// A binary report, to save as `filename`.
fn attachment(report: Report, filename: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        report.bytes,
    )
        .into_response()
}

pub(super) fn report_response(report: Report) -> Response {
    match report.format {
        Format::Pprof => attachment(report, "profile"),
        Format::Pstats => attachment(report, "profile.pstats"),
        Format::Flamegraph => {
            ([(header::CONTENT_TYPE, "image/svg+xml")], report.bytes).into_response()
        }
        Format::Speedscope | Format::Gecko => {
            ([(header::CONTENT_TYPE, "application/json")], report.bytes).into_response()
        }
        _ => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            report.bytes,
        )
            .into_response(),
    }
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::body::Body;
    use tower::Service as _;

    use crate::service::{access::testing::ROOT, tests::fixture};

    /// The status and body of `GET path`, asked by root.
    async fn get(service: Service, path: &str) -> (StatusCode, String) {
        let sources = SourceFiles::new(Vec::new(), None);
        let mut app = router(Arc::new(service), sources).layer(Extension(Admission(Ok(ROOT))));
        let request = axum::http::Request::get(path).body(Body::empty()).unwrap();
        let response = app.call(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A daemon without allocation profiling answers the heap route with
    /// 501 and the reason, before looking at the process asked for.
    #[tokio::test]
    async fn the_heap_route_says_allocation_profiling_is_off() {
        let fixture = fixture();
        let (_pipeline, _state) = (fixture._pipeline, fixture._state);
        let (status, body) = get(
            fixture.service,
            &format!("/debug/pprof/heap?seconds=1&pid={}", std::process::id()),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{body}");
        assert!(body.contains("allocation profiling is off"), "{body}");
    }
}
