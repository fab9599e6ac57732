//! The HTTP routes: Go's `net/http/pprof` profile (what `go tool pprof`,
//! Parca's scraper and Grafana Alloy's `pyroscope.scrape` read), the
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
    profile::Format,
    service::{
        ProfileSpec, Service, ServiceError,
        access::{Asker, CallerKey},
        answers::Report,
        selection::date,
        unix_millis,
    },
};

/// Who the listener let in, or why it refused the connection's requests.
#[derive(Clone, Debug)]
pub struct Admission(pub Result<Asker, String>);

#[derive(Clone)]
pub(super) struct Routes {
    pub(super) service: Arc<Service>,
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
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/debug/pprof/profile", get(go_profile))
        .route("/profile", get(profile))
        .route("/profile_start", get(profile_start))
        .route("/profile_stop", get(profile_stop))
        .route("/peeks", get(list_peeks))
        .route("/peeks/{id}", get(get_peek))
        .merge(super::view::routes())
        .fallback(unknown_route)
        .with_state(Routes {
            service,
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
        "no such route; profilerd serves the web view at /, /debug/pprof/profile?seconds=N, \
         /profile?duration=S&pprof=true|false, /profile_start, /profile_stop, /peeks, \
         /peeks/ID, /api/query?since=S and /api/peek?pid=N (POST)"
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
        Format::Speedscope => {
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
