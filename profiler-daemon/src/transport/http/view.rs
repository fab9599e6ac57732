//! The web view's data: the `/api/` routes its page (see `page`) asks
//! for the flame graph, the timeline, the processes and functions tables,
//! the daemon's status and peeks (the kept ones are at `/peeks`, and new
//! ones are told by `/api/peeks/events`), with the listener's caller like
//! every other route; a function's source heatmap is `source`'s.
//!
//! Owns these JSON/report routes and how they name a window; it must not
//! profile, store or decide access itself (the service does).

use std::{
    convert::Infallible,
    time::{Duration, SystemTime},
};

use axum::{
    Extension, Router,
    extract::{Query, State},
    http::header,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};

use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};

use super::{
    params::{Params, options},
    routes::{Admission, Answer, HttpError, Routes, admitted, report_response},
};
use crate::{
    peek::PeekReport,
    profile::{Format, GroupBy},
    quote,
    report::FunctionRanking,
    service::{MAX_FUNCTIONS, PastWindow, ServiceError, unix_millis},
};

/// The routes the page asks for its data.
pub(super) fn routes() -> Router<Routes> {
    Router::new()
        .route("/api/query", get(query))
        .route("/api/timeline", get(timeline))
        .route("/api/processes", get(processes))
        .route("/api/functions", get(functions))
        .route("/api/status", get(status))
        .route("/api/peek", post(peek))
        .route("/api/peeks/events", get(peek_events))
}

/// The names that choose a window (see [`window`]).
pub(super) const WINDOW_NAMES: &[&str] = &["since", "until", "from", "to"];

/// The window a request names: `since=S[&until=S]`, from S seconds ago to
/// `until` seconds ago (now by default), or `from=MS&to=MS`, Unix
/// milliseconds (the timeline's).
pub(super) fn window(params: &Params) -> Result<PastWindow, HttpError> {
    let from = params.unix_millis("from")?;
    let to = params.unix_millis("to")?;
    let since = params.seconds("since")?;
    let until = params.seconds("until")?;
    match (from, to, since, until) {
        (Some(start), Some(end), None, None) => Ok(PastWindow {
            start,
            end: Some(end),
        }),
        (None, None, Some(since), until) => {
            if until.is_some_and(|until| until >= since) {
                return Err(ServiceError::invalid(
                    "until must be fewer seconds ago than since (the window ends after it starts)",
                )
                .into());
            }
            let now = SystemTime::now();
            let ago =
                |seconds: Duration| now.checked_sub(seconds).unwrap_or(SystemTime::UNIX_EPOCH);
            Ok(PastWindow {
                start: ago(since),
                end: until.map(ago),
            })
        }
        _ => Err(ServiceError::invalid(
            "name the window with since=SECONDS (ago; until=SECONDS ends it earlier than now), \
             or with from=MS&to=MS (Unix milliseconds), not both",
        )
        .into()),
    }
}

/// `GET /api/query?WINDOW&format=F[&groupby=G][&drawn=true][&maxsections=N][&interpreter=false][&python_lines=false]`:
/// a report of a window the daemon holds (see [`window`]), in any format
/// (folded by default), of the selected processes; what `profilerctl
/// query` asks over gRPC. `drawn=true` (folded only) gives the lines a
/// flame graph draws: the samples through a frame under 0.01% of all are
/// its caller's, so that a window of hundreds of thousands of stacks is a
/// few thousand lines; grouped by process or thread, the `maxsections`
/// (default 20, 0: all) of most samples, the others' stacks merged under
/// one frame.
/// `maxsections` applies to tree and flat reports too, as over gRPC.
async fn query(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let names = [
        WINDOW_NAMES,
        &[
            "format",
            "groupby",
            "drawn",
            "maxsections",
            "interpreter",
            "python_lines",
        ],
    ]
    .concat();
    let (asker, params) = admitted(&routes, &admission, query, "/api/query", &names)?;
    let window = window(&params)?;
    let mut options = options(match (format(&params)?, params.flag("drawn")?) {
        (Format::Folded, Some(true)) => Format::DrawnFolded,
        (format, None | Some(false)) => format,
        (_, Some(true)) => {
            return Err(ServiceError::invalid(
                "drawn=true is for format=folded: the lines a flame graph draws",
            )
            .into());
        }
    });
    options.groupby = groupby(&params)?;
    if let Some(maxsections) =
        params.whole_number("maxsections", "a number of sections (0: every one)")?
    {
        options.maxsections = maxsections;
    }
    if let Some(interpreter) = params.flag("interpreter")? {
        options.interpreter = interpreter;
    }
    if let Some(python_lines) = params.flag("python_lines")? {
        options.python_lines = python_lines;
    }
    let report = routes
        .service
        .query(asker, window, params.selector()?, params.mode()?, options)
        .await?;
    Ok(report_response(report))
}

/// `GET /api/timeline[?SELECTOR][&mode=M]`: the held history span by span,
/// the selected processes' samples in the mode (every process's CPU
/// samples by default), as JSON `{"now_ms", "spans": [{"start_ms",
/// "end_ms", "samples"}]}`.
async fn timeline(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(&routes, &admission, query, "/api/timeline", &[])?;
    let spans: Vec<serde_json::Value> = routes
        .service
        .timeline(asker, params.selector()?, params.mode()?)
        .await?
        .into_iter()
        .map(|span| {
            serde_json::json!({
                "start_ms": unix_millis(span.start),
                "end_ms": unix_millis(span.end),
                "samples": span.samples,
            })
        })
        .collect();
    Ok(json(&serde_json::json!({
        "now_ms": unix_millis(SystemTime::now()),
        "spans": spans,
    })))
}

/// `GET /api/processes?WINDOW[&mode=M]`: the processes sampled in the
/// window (of the selected ones), most samples (of the mode; CPU by
/// default) first, as JSON `[{"pid", "command", "uid", "cgroup",
/// "threads", "samples"}]`.
async fn processes(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(&routes, &admission, query, "/api/processes", WINDOW_NAMES)?;
    let processes: Vec<serde_json::Value> = routes
        .service
        .processes(asker, window(&params)?, params.selector()?, params.mode()?)
        .await?
        .into_iter()
        .map(|process| {
            serde_json::json!({
                "pid": process.pid,
                "command": process.command,
                "uid": process.uid,
                "cgroup": process.cgroup,
                "threads": process.threads,
                "samples": process.samples,
            })
        })
        .collect();
    Ok(json(&serde_json::Value::Array(processes)))
}

/// The functions `/api/functions` gives unless `limit` says otherwise.
const DEFAULT_FUNCTIONS: usize = 25;

/// `GET /api/functions?WINDOW[&by=self|total][&limit=N]`: the window's
/// functions of the selected processes with the most self (or total)
/// samples, as JSON `{"samples", "functions": [{"function", "module",
/// "self", "total"}]}`.
async fn functions(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let names = [WINDOW_NAMES, &["by", "limit"]].concat();
    let (asker, params) = admitted(&routes, &admission, query, "/api/functions", &names)?;
    let ranking = match params.text("by")?.as_deref() {
        None | Some("self") => FunctionRanking::SelfSamples,
        Some("total") => FunctionRanking::TotalSamples,
        Some(other) => {
            return Err(ServiceError::invalid(format!(
                "by={} must be self or total",
                quote(other)
            ))
            .into());
        }
    };
    let limit = params
        .whole_number(
            "limit",
            &format!("a number of functions (1 to {MAX_FUNCTIONS})"),
        )?
        .unwrap_or(DEFAULT_FUNCTIONS);
    let ranked = routes
        .service
        .functions(
            asker,
            window(&params)?,
            params.selector()?,
            params.mode()?,
            (ranking, limit),
        )
        .await?;
    let functions: Vec<serde_json::Value> = ranked
        .functions
        .iter()
        .map(|function| {
            serde_json::json!({
                "function": &*function.function,
                "module": &*function.module,
                "self": function.self_samples,
                "total": function.total_samples,
            })
        })
        .collect();
    Ok(json(&serde_json::json!({
        "samples": ranked.samples,
        "functions": functions,
    })))
}

/// `GET /api/status`: what the page says of the daemon's sampling, as
/// JSON `{"frequency_hz", "offcpu": {"recorded", "sample_probability",
/// "recordings", "unavailable", "limitation"}, "source": {"dirs",
/// "max_bytes", "max_reads", "read_timeout_ms"}}`: `recorded` is whether the history is taking off-CPU
/// time now (the `offcpu` setting above 0, or a profile, session, Top or
/// peek recording it), so that the page can say why an off-CPU or wall
/// window is empty; `source`, what the source heatmap may read
/// (`http_source_dirs`, the largest file, the files read at once and how
/// long one read may take).
async fn status(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, _) = admitted(&routes, &admission, query, "/api/status", &[])?;
    let status = routes.service.status(asker);
    let offcpu = &status.offcpu;
    Ok(json(&serde_json::json!({
        "frequency_hz": status.frequency_hz,
        "offcpu": {
            "recorded": offcpu.unavailable.is_none()
                && (offcpu.sample_probability > 0.0 || offcpu.recordings > 0),
            "sample_probability": offcpu.sample_probability,
            "recordings": offcpu.recordings,
            "unavailable": offcpu.unavailable,
            "limitation": offcpu.limitation,
        },
        "source": {
            "dirs": routes.sources.dirs(),
            "max_bytes": crate::source_files::MAX_SOURCE_BYTES,
            "max_reads": crate::source_files::MAX_READS,
            "read_timeout_ms": crate::source_files::READ_TIMEOUT.as_millis() as u64,
        },
    })))
}

pub(super) fn json(value: &serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// `POST /api/peek?pid=N`: peeks at a process (as `kill -USR1` does) and
/// answers with the report's id once it is made.
async fn peek(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, params) = admitted(&routes, &admission, query, "/api/peek", &[])?;
    let pids = params.selector()?.pids;
    let [pid] = pids[..] else {
        return Err(
            ServiceError::invalid("/api/peek takes one pid=N, the process to peek at").into(),
        );
    };
    let report = routes.service.peek(asker, pid).await?;
    Ok(json(&peek_made(&report)))
}

/// A peek report as `/api/peek` and `/api/peeks/events` name it: `{"id",
/// "pid"}` (the report itself is at `/peeks/ID`).
fn peek_made(report: &PeekReport) -> serde_json::Value {
    serde_json::json!({ "id": report.id, "pid": report.pid })
}

/// `GET /api/peeks/events`: a server-sent event `peek` with `{"id",
/// "pid"}` for every peek report the caller may see as it is made (the
/// WatchPeeks RPC's stream), until the client leaves or the daemon stops.
async fn peek_events(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let (asker, _) = admitted(&routes, &admission, query, "/api/peeks/events", &[])?;
    let reports = routes.service.watch_peeks(asker)?;
    // The stream ends at its first error: the daemon is stopping.
    let events = ReceiverStream::new(reports)
        .map_while(Result::ok)
        .map(|report| {
            let data = peek_made(&report).to_string();
            Ok::<_, Infallible>(Event::default().event("peek").data(data))
        });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn format(params: &Params) -> Result<Format, HttpError> {
    let Some(name) = params.text("format")? else {
        return Ok(Format::Folded);
    };
    Format::ALL
        .into_iter()
        .find(|format| format.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|format| format.name()).collect();
            ServiceError::invalid(format!(
                "format={} is not a format; give one of {}",
                quote(&name),
                names.join(", ")
            ))
            .into()
        })
}

fn groupby(params: &Params) -> Result<GroupBy, HttpError> {
    Ok(match params.text("groupby")?.as_deref() {
        None | Some("auto") => GroupBy::Auto,
        Some("none") => GroupBy::None,
        Some("process") => GroupBy::Process,
        Some("thread") => GroupBy::Thread,
        Some(other) => {
            return Err(ServiceError::invalid(format!(
                "groupby={} is not a grouping; give auto, none, process or thread",
                quote(other)
            ))
            .into());
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn refusal(query: &[(&str, &str)]) -> String {
        match window(&Params::of(query)) {
            Ok(window) => panic!("{query:?} was taken as {window:?}"),
            Err(HttpError(status, message)) => {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
                message
            }
        }
    }

    #[test]
    fn windows_are_named_by_seconds_ago_or_by_unix_milliseconds() {
        let before = SystemTime::now();
        let last_minute = window(&Params::of(&[("since", "60")])).unwrap();
        assert_eq!(last_minute.end, None);
        let ago = before.duration_since(last_minute.start).unwrap();
        assert!(ago <= Duration::from_secs(60), "{ago:?}");
        assert!(ago > Duration::from_secs(59), "{ago:?}");

        let earlier = window(&Params::of(&[("since", "90"), ("until", "30")])).unwrap();
        let length = earlier.end.unwrap().duration_since(earlier.start).unwrap();
        assert_eq!(length, Duration::from_secs(60));

        let fixed = window(&Params::of(&[
            ("from", "1764230400000"),
            ("to", "1764230460500"),
        ]))
        .unwrap();
        assert_eq!(
            fixed.start,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_230_400_000)
        );
        assert_eq!(
            fixed.end,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_230_460_500))
        );
    }

    #[test]
    fn a_window_named_badly_is_refused_saying_how_to_name_it() {
        assert!(refusal(&[]).contains("since=SECONDS"));
        assert!(refusal(&[("since", "60"), ("from", "1")]).contains("not both"));
        assert!(refusal(&[("from", "1")]).contains("from=MS&to=MS"));
        assert!(refusal(&[("since", "30"), ("until", "60")]).contains("fewer seconds ago"));
        assert!(refusal(&[("from", "soon"), ("to", "2")]).contains("Unix milliseconds"));
        assert!(refusal(&[("since", "-5")]).contains("more than 0"));
    }

    #[test]
    fn formats_and_groupings_are_named_as_the_api_names_them() {
        assert_eq!(format(&Params::of(&[])).ok(), Some(Format::Folded));
        for each in Format::ALL {
            assert_eq!(
                format(&Params::of(&[("format", each.name())])).ok(),
                Some(each)
            );
        }
        let Err(HttpError(_, message)) = format(&Params::of(&[("format", "svg")])) else {
            panic!("format=svg was taken");
        };
        assert!(message.contains("tree, flat, folded, pprof, flamegraph, speedscope"));
        assert_eq!(groupby(&Params::of(&[])).ok(), Some(GroupBy::Auto));
        assert_eq!(
            groupby(&Params::of(&[("groupby", "process")])).ok(),
            Some(GroupBy::Process)
        );
        assert!(groupby(&Params::of(&[("groupby", "cgroup")])).is_err());
    }
}
