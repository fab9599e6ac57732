//! The web view: `GET /` serves one page (`web/index.html`, its scripts
//! `web/names.js`, `web/timeline.js`, `web/tables.js`, `web/peeks.js` and
//! `web/app.js`,
//! `web/app.css`) and the flame graph viewer it draws with (d3-flame-graph
//! on d3, fetched at pinned versions by `cargo xtask` and embedded by the
//! build script), all under `/ui/`; the page asks for data through the
//! `/api/` routes here, and for peeks through `/peeks` (told of new ones by
//! `/api/peeks/events`), with the listener's caller like every other route.
//!
//! Owns the page's files and its JSON/report routes; it must not profile,
//! store or decide access itself (the service does).

use std::{
    convert::Infallible,
    time::{Duration, SystemTime},
};

use axum::{
    Extension, Router,
    extract::{Path, Query, State},
    http::{StatusCode, header},
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

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/web_viewer.rs"));
}

const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const APP_CSS: &str = include_str!("web/app.css");
const TIMELINE_JS: &str = include_str!("web/timeline.js");
const TABLES_JS: &str = include_str!("web/tables.js");
const PEEKS_JS: &str = include_str!("web/peeks.js");
const NAMES_JS: &str = include_str!("web/names.js");

/// The page, its files and the routes it asks.
pub(super) fn routes() -> Router<Routes> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(ui_file))
        .route("/api/query", get(query))
        .route("/api/timeline", get(timeline))
        .route("/api/processes", get(processes))
        .route("/api/functions", get(functions))
        .route("/api/status", get(status))
        .route("/api/peek", post(peek))
        .route("/api/peeks/events", get(peek_events))
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
    let (content_type, bytes): (&str, &'static [u8]) = match file.as_str() {
        "app.js" => ("text/javascript; charset=utf-8", APP_JS.as_bytes()),
        "app.css" => ("text/css; charset=utf-8", APP_CSS.as_bytes()),
        "timeline.js" => ("text/javascript; charset=utf-8", TIMELINE_JS.as_bytes()),
        "tables.js" => ("text/javascript; charset=utf-8", TABLES_JS.as_bytes()),
        "peeks.js" => ("text/javascript; charset=utf-8", PEEKS_JS.as_bytes()),
        "names.js" => ("text/javascript; charset=utf-8", NAMES_JS.as_bytes()),
        _ => embedded::VIEWER_FILES
            .iter()
            .find(|(name, _, _)| *name == file)
            .map(|(_, content_type, bytes)| (*content_type, *bytes))
            .ok_or_else(|| {
                HttpError(
                    StatusCode::NOT_FOUND,
                    format!("the web view has no file {}; open / instead", quote(&file)),
                )
            })?,
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    )
        .into_response())
}

/// The names that choose a window (see [`window`]).
const WINDOW_NAMES: &[&str] = &["since", "until", "from", "to"];

/// The window a request names: `since=S[&until=S]`, from S seconds ago to
/// `until` seconds ago (now by default), or `from=MS&to=MS`, Unix
/// milliseconds (the timeline's).
fn window(params: &Params) -> Result<PastWindow, HttpError> {
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
/// "recordings", "unavailable", "limitation"}}`: `recorded` is whether the
/// history is taking off-CPU time now (the `offcpu` setting above 0, or a
/// profile, session, Top or peek recording it), so that the page can say
/// why an off-CPU or wall window is empty.
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
    })))
}

fn json(value: &serde_json::Value) -> Response {
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
        for (file, content_type) in [
            ("app.js", "text/javascript"),
            ("timeline.js", "text/javascript"),
            ("tables.js", "text/javascript"),
            ("peeks.js", "text/javascript"),
            ("names.js", "text/javascript"),
            ("app.css", "text/css"),
        ] {
            let response = runtime
                .block_on(ui_file(Path(file.to_owned())))
                .ok()
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let served = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
            assert!(served.starts_with(content_type), "{file}: {served}");
        }
        for (name, _, bytes) in embedded::VIEWER_FILES {
            assert!(!bytes.is_empty(), "{name}");
            let response = runtime
                .block_on(ui_file(Path((*name).to_owned())))
                .ok()
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
        }
        let Err(HttpError(status, _)) = runtime.block_on(ui_file(Path("../Cargo.toml".to_owned())))
        else {
            panic!("a file outside the page was served");
        };
        assert_eq!(status, StatusCode::NOT_FOUND);
        // Every file the page loads is served.
        for file in [
            "d3.min.js",
            "d3-flamegraph.min.js",
            "d3-flamegraph.css",
            "names.js",
            "timeline.js",
            "tables.js",
            "peeks.js",
            "app.js",
            "app.css",
        ] {
            assert!(INDEX_HTML.contains(&format!("/ui/{file}")), "{file}");
        }
    }
}
