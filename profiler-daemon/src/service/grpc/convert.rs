//! Conversions between the gRPC messages and the daemon's own types, with
//! the validation that turns a bad request into a message saying what to
//! fix. Nothing here touches the store or the kernel.

use std::{
    collections::HashSet,
    time::{Duration, SystemTime},
};

use profiler_common::{SampleKind, TASK_COMM_LEN};

use super::{ApiError, MAX_ID_BYTES};
use crate::{
    kernel::targets::TargetSet,
    profile::{Format, GroupBy, LossCause, Profile, ReportOptions, SortedBy},
    proto::v1,
    quote,
    service::sessions::Session,
    store::{CommPattern, Selector},
};

/// Deepest `maxdepth` accepted: two stacks of 127 frames, each frame with
/// its inlined functions, stay far below it.
const MAX_DEPTH: u32 = 4096;

/// Bounds on a selector, so that no request can make the daemon hold much
/// memory: ids per list, names, cgroup paths and their length, and the
/// regular expression's text, compiled program and lazy DFA.
const MAX_SELECTOR_IDS: usize = 1024;
const MAX_SELECTOR_NAMES: usize = 64;
const MAX_PATH_BYTES: usize = 4096;
const MAX_REGEX_BYTES: usize = 1024;
const MAX_REGEX_PROGRAM_BYTES: usize = 1 << 20;
const MAX_REGEX_DFA_BYTES: usize = 1 << 20;
/// Longest function name a Callers request may look for.
const MAX_FUNCTION_BYTES: usize = 4096;

impl TryFrom<Option<v1::ReportOptions>> for ReportOptions {
    type Error = ApiError;

    fn try_from(options: Option<v1::ReportOptions>) -> Result<Self, ApiError> {
        let options = options.unwrap_or_default();
        let defaults = ReportOptions::default();
        if !options.noisefloor.is_finite() || options.noisefloor < 0.0 {
            return Err(ApiError::invalid(format!(
                "noisefloor must be a number >= 0 (2.0 is a good start), not {}",
                options.noisefloor
            )));
        }
        if options.maxdepth > MAX_DEPTH {
            return Err(ApiError::invalid(format!(
                "maxdepth {} is deeper than any stack can be (at most {MAX_DEPTH}); use 0 for \
                 no limit",
                options.maxdepth
            )));
        }
        Ok(Self {
            format: format(options.format)?,
            maxdepth: (options.maxdepth > 0).then_some(options.maxdepth),
            mincount: options.mincount,
            noisefloor: options.noisefloor,
            sortedby: match enum_value::<v1::SortedBy>(options.sortedby, "sortedby")? {
                v1::SortedBy::Unspecified | v1::SortedBy::Filefuncline => SortedBy::FileFuncLine,
                v1::SortedBy::Count => SortedBy::Count,
                v1::SortedBy::Overhead => SortedBy::Overhead,
            },
            groupby: match enum_value::<v1::GroupBy>(options.groupby, "groupby")? {
                v1::GroupBy::Unspecified => GroupBy::Auto,
                v1::GroupBy::None => GroupBy::None,
                v1::GroupBy::Thread => GroupBy::Thread,
                v1::GroupBy::Process => GroupBy::Process,
            },
            kernel: options.kernel.unwrap_or(defaults.kernel),
            combine: options.combine.unwrap_or(defaults.combine),
        })
    }
}

fn format(value: i32) -> Result<Format, ApiError> {
    Ok(match enum_value::<v1::Format>(value, "format")? {
        v1::Format::Unspecified | v1::Format::Tree => Format::Tree,
        v1::Format::Flat => Format::Flat,
        v1::Format::Folded => Format::Folded,
        v1::Format::Pprof => Format::Pprof,
        v1::Format::Flamegraph => Format::Flamegraph,
        v1::Format::Speedscope => Format::Speedscope,
    })
}

/// The format's name, as the CLI and the API's enum spell it.
pub(super) fn format_name(format: Format) -> &'static str {
    match format {
        Format::Tree => "tree",
        Format::Flat => "flat",
        Format::Folded => "folded",
        Format::Pprof => "pprof",
        Format::Flamegraph => "flamegraph",
        Format::Speedscope => "speedscope",
    }
}

pub(super) fn format_to_proto(format: Format) -> v1::Format {
    match format {
        Format::Tree => v1::Format::Tree,
        Format::Flat => v1::Format::Flat,
        Format::Folded => v1::Format::Folded,
        Format::Pprof => v1::Format::Pprof,
        Format::Flamegraph => v1::Format::Flamegraph,
        Format::Speedscope => v1::Format::Speedscope,
    }
}

/// An enum field's value, or an error naming the field and the valid values.
fn enum_value<E>(value: i32, field: &str) -> Result<E, ApiError>
where
    E: TryFrom<i32> + EnumNames,
{
    E::try_from(value).map_err(|_| {
        ApiError::invalid(format!(
            "unknown {field} value {value}; valid values: {}",
            E::NAMES.join(", ")
        ))
    })
}

/// The valid names of a protobuf enum, for error messages.
trait EnumNames {
    const NAMES: &'static [&'static str];
}

impl EnumNames for v1::Format {
    const NAMES: &'static [&'static str] = &[
        "tree",
        "flat",
        "folded",
        "pprof",
        "flamegraph",
        "speedscope",
    ];
}
impl EnumNames for v1::SortedBy {
    const NAMES: &'static [&'static str] = &["filefuncline", "count", "overhead"];
}
impl EnumNames for v1::GroupBy {
    const NAMES: &'static [&'static str] = &["none", "thread", "process"];
}
impl EnumNames for v1::Mode {
    const NAMES: &'static [&'static str] = &["cpu"];
}

pub(super) fn sample_kind(mode: i32) -> Result<SampleKind, ApiError> {
    match enum_value::<v1::Mode>(mode, "mode")? {
        v1::Mode::Unspecified | v1::Mode::Cpu => Ok(SampleKind::CpuClock),
    }
}

/// The selector of a window to come, after checking that every pid and tid
/// it names exists (0 selects the idle tasks).
pub(super) fn selector(selector: Option<v1::Selector>) -> Result<Selector, ApiError> {
    let selector = selector_of_past(selector)?;
    for (kind, ids) in [("process", &selector.pids), ("thread", &selector.tids)] {
        for &id in ids {
            if id != 0 && !std::path::Path::new(&format!("/proc/{id}")).exists() {
                return Err(ApiError::NotFound(format!(
                    "no {kind} with id {id} is running (0 selects the idle tasks)"
                )));
            }
        }
    }
    Ok(selector)
}

/// Refuses a selector beyond the bounds: too many ids or names, or text
/// too long to be a name, a path or a sensible pattern.
pub(super) fn check_selector_bounds(selector: &v1::Selector) -> Result<(), ApiError> {
    for (what, count, limit) in [
        ("process ids", selector.pids.len(), MAX_SELECTOR_IDS),
        ("thread ids", selector.tids.len(), MAX_SELECTOR_IDS),
        ("user ids", selector.uids.len(), MAX_SELECTOR_IDS),
        ("command names", selector.comms.len(), MAX_SELECTOR_NAMES),
        ("cgroups", selector.cgroups.len(), MAX_SELECTOR_NAMES),
    ] {
        if count > limit {
            return Err(ApiError::invalid(format!(
                "the selector names {count} {what}; at most {limit} are accepted"
            )));
        }
    }
    if let Some(comm) = selector
        .comms
        .iter()
        .find(|comm| comm.len() >= TASK_COMM_LEN)
    {
        return Err(ApiError::invalid(format!(
            "the command name {} is {} bytes long, but the kernel keeps at most {} (a longer \
             name matches nothing); use the first {} bytes, or a regular expression",
            quote(comm),
            comm.len(),
            TASK_COMM_LEN - 1,
            TASK_COMM_LEN - 1
        )));
    }
    if let Some(cgroup) = selector.cgroups.iter().find(|c| c.len() > MAX_PATH_BYTES) {
        return Err(ApiError::invalid(format!(
            "the cgroup path {} is longer than any path can be ({MAX_PATH_BYTES} bytes)",
            quote(cgroup)
        )));
    }
    if selector.comm_regex.len() > MAX_REGEX_BYTES {
        return Err(ApiError::invalid(format!(
            "the regular expression {} is {} bytes long; at most {MAX_REGEX_BYTES} are accepted",
            quote(&selector.comm_regex),
            selector.comm_regex.len()
        )));
    }
    Ok(())
}

/// The selector of a past window: the processes it names may be gone.
pub(super) fn selector_of_past(selector: Option<v1::Selector>) -> Result<Selector, ApiError> {
    let selector = selector.unwrap_or_default();
    check_selector_bounds(&selector)?;
    if selector.comms.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "an empty command name matches nothing; leave comms out to select every process",
        ));
    }
    if let Some(cgroup) = selector.cgroups.iter().find(|c| !c.starts_with('/')) {
        return Err(ApiError::invalid(format!(
            "{} is not a cgroup path; write it as /proc/PID/cgroup shows it, e.g. \
             \"/system.slice/nginx.service\"",
            quote(cgroup)
        )));
    }
    let comm_pattern = match selector.comm_regex.as_str() {
        "" => None,
        text => Some(CommPattern(
            regex::RegexBuilder::new(text)
                .size_limit(MAX_REGEX_PROGRAM_BYTES)
                .dfa_size_limit(MAX_REGEX_DFA_BYTES)
                .build()
                .map_err(|err| {
                    ApiError::invalid(format!(
                        "the regular expression {} is not valid: {}",
                        quote(text),
                        regex_error(&err)
                    ))
                })?,
        )),
    };
    Ok(Selector {
        pids: selector.pids,
        tids: selector.tids,
        comms: selector.comms,
        comm_pattern,
        uids: selector.uids,
        cgroups: selector.cgroups,
    })
}

/// A regex error on one line: what is wrong, without the pattern drawn
/// over several lines with a caret under the fault.
fn regex_error(err: &regex::Error) -> String {
    match err {
        regex::Error::CompiledTooBig(limit) => format!(
            "it compiles to more than {limit} bytes; simplify it (fewer repetitions or \
             alternatives)"
        ),
        err => {
            let text = err.to_string();
            text.lines()
                .rev()
                .find_map(|line| line.trim().strip_prefix("error: "))
                .unwrap_or(text.lines().last().unwrap_or_default())
                .trim()
                .to_owned()
        }
    }
}

/// How long a Profile runs: at least a millisecond, at most the maximum.
pub(super) fn profile_duration(duration_ms: u64, max: Duration) -> Result<Duration, ApiError> {
    let duration = Duration::from_millis(duration_ms);
    if duration.is_zero() {
        return Err(ApiError::invalid(
            "a profile must last at least 1 ms (duration_ms is how long to profile)",
        ));
    }
    if duration > max {
        return Err(ApiError::invalid(format!(
            "a profile of {} is longer than the longest the daemon allows, {} \
             (max_profile_duration in its configuration); profile for less",
            humantime::format_duration(duration),
            humantime::format_duration(max)
        )));
    }
    Ok(duration)
}

/// The one process a session that follows children starts from.
pub(super) fn family_root(selector: &Selector) -> Result<u32, ApiError> {
    match selector.pids[..] {
        [pid] if pid != 0 && selector.tids.is_empty() => Ok(pid),
        _ => Err(ApiError::invalid(
            "a session that follows children selects exactly one process (one pid, no tids), \
             whose children it follows",
        )),
    }
}

/// Refuses an id or token that no id of the daemon can be; `what` names
/// it, e.g. "the session id".
pub(super) fn check_id(id: &str, what: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(ApiError::invalid(format!(
            "{what} {} cannot be one: ids are 1 to {MAX_ID_BYTES} bytes",
            quote(id)
        )));
    }
    Ok(())
}

/// The function a Callers request looks for.
pub(super) fn function_name(function: String) -> Result<String, ApiError> {
    if function.is_empty() {
        return Err(ApiError::invalid(
            "name a function, e.g. \"malloc\" or \"app::handle\"",
        ));
    }
    if function.len() > MAX_FUNCTION_BYTES {
        return Err(ApiError::invalid(format!(
            "the function name {} is {} bytes long; at most {MAX_FUNCTION_BYTES} are accepted",
            quote(&function),
            function.len()
        )));
    }
    Ok(function)
}

/// A time as a date a person reads, e.g. `2026-11-21T17:30:00Z`.
pub(super) fn date(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

/// A time given in nanoseconds since the Unix epoch.
pub(super) fn time(unix_nanos: i64, what: &str) -> Result<SystemTime, ApiError> {
    u64::try_from(unix_nanos)
        .ok()
        .filter(|&nanos| nanos > 0)
        .map(|nanos| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{what} must be a time after 1970 (in nanoseconds since the Unix epoch), not \
                 {unix_nanos}"
            ))
        })
}

/// An open session as ListSessions describes it.
pub(super) fn session_info(id: String, session: &Session) -> v1::SessionInfo {
    let (owner_uid, remote) = match session.owner {
        super::CallerKey::User(uid) => (uid, false),
        super::CallerKey::Remote => (0, true),
    };
    let selector = &session.selector;
    v1::SessionInfo {
        session_id: id,
        owner_uid,
        remote,
        start_unix_nanos: unix_nanos(session.start),
        selector: Some(v1::Selector {
            pids: selector.pids.clone(),
            tids: selector.tids.clone(),
            comms: selector.comms.clone(),
            uids: selector.uids.clone(),
            cgroups: selector.cgroups.clone(),
            comm_regex: selector
                .comm_pattern
                .as_ref()
                .map(|pattern| pattern.0.as_str().to_owned())
                .unwrap_or_default(),
        }),
        mode: v1::Mode::Cpu as i32,
    }
}

pub(super) fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| since.as_nanos() as i64)
        .unwrap_or(0)
}

pub(super) fn loss_counts(lost: impl IntoIterator<Item = (LossCause, u64)>) -> Vec<v1::LossCount> {
    lost.into_iter()
        .map(|(cause, count)| v1::LossCount {
            cause: cause.name().to_owned(),
            count,
        })
        .collect()
}

pub(super) fn summary(profile: &Profile) -> v1::ProfileSummary {
    let processes: HashSet<u32> = profile.threads.iter().map(|thread| thread.pid).collect();
    v1::ProfileSummary {
        start_unix_nanos: unix_nanos(profile.start),
        end_unix_nanos: unix_nanos(profile.end),
        frequency_hz: profile.frequency_hz,
        samples: profile.total_samples(),
        cpu_nanos: profile.samples.iter().map(|sample| sample.weight_ns).sum(),
        processes: processes.len() as u32,
        threads: profile.threads.len() as u32,
        lost: loss_counts(profile.lost.iter().copied()),
        warnings: profile.warnings.clone(),
        cut_short: false,
    }
}

/// The targets a SetTargets request asks for.
pub(super) fn target_set(request: v1::SetTargetsRequest) -> Result<TargetSet, ApiError> {
    let set = TargetSet {
        pids: request.pids,
        cgroups: request.cgroups,
    };
    match (request.everything, set.everything()) {
        (true, true) | (false, false) => Ok(set),
        (true, false) => Err(ApiError::invalid(
            "everything = true samples every process: leave pids and cgroups empty",
        )),
        (false, true) => Err(ApiError::invalid(
            "name the pids or cgroups to sample, or set everything = true to sample every process",
        )),
    }
}

pub(super) fn targets(set: &TargetSet) -> v1::Targets {
    v1::Targets {
        everything: set.everything(),
        pids: set.pids.clone(),
        cgroups: set.cgroups.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_are_julias() {
        let options = ReportOptions::try_from(None).unwrap();
        assert_eq!(options, ReportOptions::default());
        assert!(options.kernel && options.combine);
    }

    #[test]
    fn options_convert() {
        let options = ReportOptions::try_from(Some(v1::ReportOptions {
            format: v1::Format::Pprof as i32,
            maxdepth: 5,
            mincount: 2,
            noisefloor: 2.0,
            sortedby: v1::SortedBy::Count as i32,
            groupby: v1::GroupBy::Thread as i32,
            kernel: Some(false),
            combine: Some(false),
        }))
        .unwrap();
        assert_eq!(options.format, Format::Pprof);
        assert_eq!(options.maxdepth, Some(5));
        assert_eq!(options.groupby, GroupBy::Thread);
        assert!(!options.kernel && !options.combine);
    }

    #[test]
    fn unknown_enum_values_name_the_field() {
        let err = ReportOptions::try_from(Some(v1::ReportOptions {
            format: 42,
            ..Default::default()
        }))
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("format") && message.contains("pprof"),
            "{message}"
        );
        assert!(sample_kind(9).is_err());
    }

    #[test]
    fn bad_noisefloor_is_rejected() {
        for noisefloor in [-1.0, f64::NAN] {
            let options = v1::ReportOptions {
                noisefloor,
                ..Default::default()
            };
            assert!(ReportOptions::try_from(Some(options)).is_err());
        }
    }

    #[test]
    fn selectors_are_bounded_and_their_errors_short() {
        let refused = |selector: v1::Selector| match selector_of_past(Some(selector)) {
            Err(ApiError::InvalidArgument(message)) => message,
            other => panic!("refused, not {other:?}"),
        };
        let message = refused(v1::Selector {
            comm_regex: "(".repeat(5000),
            ..Default::default()
        });
        assert!(
            message.contains("at most 1024") && message.len() < 300,
            "{message}"
        );
        let message = refused(v1::Selector {
            comm_regex: r"\w{1000}\w{1000}".to_owned(),
            ..Default::default()
        });
        assert!(message.contains("simplify it"), "{message}");
        let message = refused(v1::Selector {
            comm_regex: "a(b".to_owned(),
            ..Default::default()
        });
        assert_eq!(
            message,
            "the regular expression \"a(b\" is not valid: unclosed group"
        );
        let message = refused(v1::Selector {
            pids: vec![1; 2000],
            ..Default::default()
        });
        assert!(
            message.contains("2000 process ids; at most 1024"),
            "{message}"
        );
        let message = refused(v1::Selector {
            comms: vec!["a_name_longer_than_fifteen".to_owned()],
            ..Default::default()
        });
        assert!(message.contains("at most 15"), "{message}");
    }

    #[test]
    fn profile_durations_are_bounded() {
        let max = Duration::from_secs(3600);
        assert!(profile_duration(0, max).is_err());
        assert_eq!(
            profile_duration(1500, max).unwrap(),
            Duration::from_millis(1500)
        );
        let message = profile_duration(u64::MAX, max).unwrap_err().to_string();
        assert!(
            message.contains("longest the daemon allows, 1h"),
            "{message}"
        );
        assert!(
            check_id(&"x".repeat(1 << 20), "the session id")
                .unwrap_err()
                .to_string()
                .len()
                < 200
        );
    }

    #[test]
    fn selectors_check_that_ids_exist() {
        let me = std::process::id();
        let ok = selector(Some(v1::Selector {
            pids: vec![me, 0],
            tids: vec![me],
            comms: vec!["x".into()],
            comm_regex: "^x".into(),
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(ok.pids, [me, 0]);
        for bad in [
            v1::Selector {
                comm_regex: "(".into(),
                ..Default::default()
            },
            v1::Selector {
                cgroups: vec!["system.slice".into()],
                ..Default::default()
            },
        ] {
            let err = selector(Some(bad)).unwrap_err();
            assert!(matches!(err, ApiError::InvalidArgument(_)), "{err}");
        }
        let err = selector(Some(v1::Selector {
            pids: vec![u32::MAX - 1],
            ..Default::default()
        }))
        .unwrap_err();
        assert!(matches!(err, ApiError::NotFound(_)), "{err}");
    }
}
