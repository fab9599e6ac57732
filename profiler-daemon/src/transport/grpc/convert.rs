//! Between the gRPC messages and the service's domain types: the proto's
//! enums, times and optional fields checked and turned into the service's
//! requests, and its answers turned into replies. The rules a request must
//! follow are the service's (`selection`); here only what the proto's
//! encoding can get wrong is refused.

use std::time::{Duration, SystemTime};

use tonic::Status;

use crate::{
    kernel::{allocs::Sampling, targets::TargetSet},
    peek::{PeekReport, PeekSummary, TriggerSource},
    profile::{Format, GroupBy, LossCause, ProfileMode, ReportOptions, SortedBy, unix_nanos},
    proto::v1,
    service::{
        CallersResult, DiffResult, DiffSpec, PastWindow, ServiceError, TopUpdate,
        answers::{Report, Summary},
        selection::SelectorSpec,
        sessions::Session,
    },
};

impl From<ServiceError> for Status {
    fn from(err: ServiceError) -> Self {
        let message = err.to_string();
        match err {
            ServiceError::InvalidArgument(_) => Status::invalid_argument(message),
            ServiceError::NotFound(_) => Status::not_found(message),
            ServiceError::PermissionDenied(_) => Status::permission_denied(message),
            ServiceError::ResourceExhausted(_) => Status::resource_exhausted(message),
            ServiceError::FailedPrecondition(_) => Status::failed_precondition(message),
            ServiceError::Unavailable(_) | ServiceError::Stopping => Status::unavailable(message),
            ServiceError::Internal(_) => Status::internal(message),
        }
    }
}

/// A report's layout; unset options are the defaults.
pub fn report_options(options: Option<v1::ReportOptions>) -> Result<ReportOptions, ServiceError> {
    let options = options.unwrap_or_default();
    let defaults = ReportOptions::default();
    Ok(ReportOptions {
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
        interpreter: options.interpreter.unwrap_or(defaults.interpreter),
        python_lines: options.python_lines.unwrap_or(defaults.python_lines),
        combine: options.combine.unwrap_or(defaults.combine),
        maxlines: options.maxlines.unwrap_or(defaults.maxlines),
        maxsections: options.maxsections.unwrap_or(defaults.maxsections),
        functions: options.functions,
    })
}

fn format(value: i32) -> Result<Format, ServiceError> {
    Ok(match enum_value::<v1::Format>(value, "format")? {
        v1::Format::Unspecified | v1::Format::Tree => Format::Tree,
        v1::Format::Flat => Format::Flat,
        v1::Format::Folded => Format::Folded,
        v1::Format::Pprof => Format::Pprof,
        v1::Format::Flamegraph => Format::Flamegraph,
        v1::Format::Speedscope => Format::Speedscope,
        v1::Format::Pstats => Format::Pstats,
        v1::Format::Gecko => Format::Gecko,
    })
}

fn format_to_proto(format: Format) -> v1::Format {
    match format {
        Format::Tree => v1::Format::Tree,
        Format::Flat => v1::Format::Flat,
        Format::Folded | Format::DrawnFolded => v1::Format::Folded,
        Format::Pprof => v1::Format::Pprof,
        Format::Flamegraph => v1::Format::Flamegraph,
        Format::Speedscope => v1::Format::Speedscope,
        Format::Pstats => v1::Format::Pstats,
        Format::Gecko => v1::Format::Gecko,
    }
}

/// An enum field's value, or an error naming the field and the valid values.
fn enum_value<E>(value: i32, field: &str) -> Result<E, ServiceError>
where
    E: TryFrom<i32> + EnumNames,
{
    E::try_from(value).map_err(|_| {
        ServiceError::invalid(format!(
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
    const NAMES: &'static [&'static str] = &["cpu", "offcpu", "wall"];
}

pub fn profile_mode(mode: i32) -> Result<ProfileMode, ServiceError> {
    Ok(match enum_value::<v1::Mode>(mode, "mode")? {
        v1::Mode::Unspecified | v1::Mode::Cpu => ProfileMode::Cpu,
        v1::Mode::Offcpu => ProfileMode::OffCpu,
        v1::Mode::Wall => ProfileMode::Wall,
    })
}

pub fn mode_to_wire(mode: ProfileMode) -> v1::Mode {
    match mode {
        ProfileMode::Cpu => v1::Mode::Cpu,
        ProfileMode::OffCpu => v1::Mode::Offcpu,
        ProfileMode::Wall => v1::Mode::Wall,
        // Allocation profiles are not windows of the store.
        ProfileMode::Allocated | ProfileMode::Held => v1::Mode::Unspecified,
    }
}

pub fn selector(selector: Option<v1::Selector>) -> SelectorSpec {
    let selector = selector.unwrap_or_default();
    SelectorSpec {
        pids: selector.pids,
        tids: selector.tids,
        comms: selector.comms,
        comm_regex: selector.comm_regex,
        uids: selector.uids,
        cgroups: selector.cgroups,
    }
}

fn selector_to_proto(selector: SelectorSpec) -> v1::Selector {
    v1::Selector {
        pids: selector.pids,
        tids: selector.tids,
        comms: selector.comms,
        uids: selector.uids,
        cgroups: selector.cgroups,
        comm_regex: selector.comm_regex,
    }
}

/// A time given in nanoseconds since the Unix epoch.
fn time(unix_nanos: i64, what: &str) -> Result<SystemTime, ServiceError> {
    u64::try_from(unix_nanos)
        .ok()
        .filter(|&nanos| nanos > 0)
        .map(|nanos| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
        .ok_or_else(|| {
            ServiceError::invalid(format!(
                "{what} must be a time after 1970 (in nanoseconds since the Unix epoch), not \
                 {unix_nanos}"
            ))
        })
}

/// A past window from its bounds in Unix nanoseconds (end 0: now).
pub fn past_window(start_unix_nanos: i64, end_unix_nanos: i64) -> Result<PastWindow, ServiceError> {
    Ok(PastWindow {
        start: time(start_unix_nanos, "the window's start (start_unix_nanos)")?,
        end: match end_unix_nanos {
            0 => None,
            nanos => Some(time(nanos, "the window's end (end_unix_nanos)")?),
        },
    })
}

pub(super) fn loss_counts(lost: impl IntoIterator<Item = (LossCause, u64)>) -> Vec<v1::LossCount> {
    lost.into_iter()
        .map(|(cause, count)| v1::LossCount {
            cause: cause.name().to_owned(),
            count,
        })
        .collect()
}

pub fn summary(summary: Summary) -> v1::ProfileSummary {
    let memory = summary.memory.unwrap_or_default();
    v1::ProfileSummary {
        start_unix_nanos: summary.start.map_or(0, unix_nanos),
        end_unix_nanos: summary.end.map_or(0, unix_nanos),
        frequency_hz: summary.frequency_hz,
        samples: summary.samples,
        cpu_nanos: summary.cpu_nanos,
        off_cpu_nanos: summary.off_cpu_nanos,
        processes: summary.processes,
        threads: summary.threads,
        lost: loss_counts(summary.lost),
        own_lost: summary
            .own_lost
            .into_iter()
            .map(|(cause, count)| v1::LossCount {
                cause: cause.to_owned(),
                count,
            })
            .collect(),
        warnings: summary.warnings,
        cut_short: summary.cut_short,
        allocated_bytes: memory.allocated_bytes,
        allocated_objects: memory.allocated_objects,
        held_bytes: memory.held_bytes,
        held_objects: memory.held_objects,
    }
}

/// How allocations are sampled, as asked (unset: the default).
pub fn alloc_sampling(sampling: Option<v1::AllocSampling>) -> Sampling {
    match sampling.and_then(|sampling| sampling.how) {
        Some(v1::alloc_sampling::How::SampleBytes(bytes)) => Sampling::Bytes(bytes),
        Some(v1::alloc_sampling::How::SampleRate(rate)) => Sampling::Rate(rate),
        None => Sampling::DEFAULT,
    }
}

pub fn profile_reply(report: Report) -> v1::ProfileReply {
    v1::ProfileReply {
        report: report.bytes,
        format: format_to_proto(report.format) as i32,
        summary: Some(summary(report.summary)),
    }
}

pub fn callers_reply(callers: CallersResult) -> v1::CallersReply {
    v1::CallersReply {
        text: callers.text,
        total: callers.total,
        callers: callers
            .callers
            .into_iter()
            .map(|caller| v1::Caller {
                function: caller.function.to_string(),
                file: caller.file.map(|file| file.to_string()).unwrap_or_default(),
                line: caller.line,
                count: caller.count,
            })
            .collect(),
        summary: Some(summary(callers.summary)),
    }
}

pub fn diff_spec(request: v1::DiffRequest) -> Result<DiffSpec, ServiceError> {
    let window = |window: Option<v1::Window>, name: &str| {
        let window = window.ok_or_else(|| {
            ServiceError::invalid(format!("{name} must give the window (start_unix_nanos)"))
        })?;
        past_window(window.start_unix_nanos, window.end_unix_nanos)
    };
    Ok(DiffSpec {
        base: window(request.base, "base")?,
        target: window(request.target, "target")?,
        selector: selector(request.selector),
        target_selector: request.target_selector.map(|target| selector(Some(target))),
        limit: (request.limit > 0).then_some(request.limit as usize),
        drawing: match request.options {
            None => None,
            options => Some(report_options(options)?),
        },
        normalize: request.normalize,
        functions: request.functions,
    })
}

pub fn diff_reply(diff: DiffResult) -> v1::DiffReply {
    v1::DiffReply {
        text: diff.text,
        changes: diff
            .changes
            .into_iter()
            .map(|change| v1::FunctionChange {
                function: change.function.to_string(),
                base_self_percent: change.base_self,
                target_self_percent: change.target_self,
                base_total_percent: change.base_total,
                target_total_percent: change.target_total,
            })
            .collect(),
        base: Some(summary(diff.base)),
        target: Some(summary(diff.target)),
        report: diff.drawing,
    }
}

pub fn top_update(update: TopUpdate) -> v1::TopUpdate {
    v1::TopUpdate {
        summary: Some(summary(update.summary)),
        functions: update
            .functions
            .into_iter()
            .map(|function| v1::TopFunction {
                function: function.function.to_string(),
                module: function.module.to_string(),
                self_samples: function.self_samples,
                total_samples: function.total_samples,
                self_percent: function.self_percent,
                total_percent: function.total_percent,
            })
            .collect(),
    }
}

/// An open session as ListSessions describes it.
pub fn session_info(id: String, session: &Session) -> v1::SessionInfo {
    use crate::service::access::CallerKey;
    let (owner_uid, remote) = match session.owner {
        CallerKey::User(uid) => (uid, false),
        CallerKey::Remote => (0, true),
    };
    v1::SessionInfo {
        session_id: id,
        owner_uid,
        remote,
        start_unix_nanos: unix_nanos(session.start),
        selector: Some(selector_to_proto(SelectorSpec::from(&session.selector))),
        mode: mode_to_wire(session.mode) as i32,
    }
}

/// The targets a SetTargets request asks for.
pub fn target_set(request: v1::SetTargetsRequest) -> Result<TargetSet, ServiceError> {
    let set = TargetSet {
        pids: request.pids,
        cgroups: request.cgroups,
    };
    match (request.everything, set.everything()) {
        (true, true) | (false, false) => Ok(set),
        (true, false) => Err(ServiceError::invalid(
            "everything = true samples every process: leave pids and cgroups empty",
        )),
        (false, true) => Err(ServiceError::invalid(
            "name the pids or cgroups to sample, or set everything = true to sample every process",
        )),
    }
}

pub fn targets(set: &TargetSet) -> v1::Targets {
    v1::Targets {
        everything: set.everything(),
        pids: set.pids.clone(),
        cgroups: set.cgroups.clone(),
    }
}

pub fn peek_report(report: &PeekReport) -> v1::PeekReport {
    let trigger = match &report.source {
        TriggerSource::Signal {
            signal,
            sender_pid,
            sender_command,
            intercepted,
        } => v1::PeekTrigger {
            source: v1::peek_trigger::Source::Signal as i32,
            signal: *signal,
            sender_pid: *sender_pid,
            sender_command: sender_command.clone(),
            intercepted: *intercepted,
        },
        TriggerSource::Request => v1::PeekTrigger {
            source: v1::peek_trigger::Source::Request as i32,
            ..v1::PeekTrigger::default()
        },
        TriggerSource::Unknown => v1::PeekTrigger::default(),
    };
    v1::PeekReport {
        id: report.id.clone(),
        pid: report.pid,
        command: report.command.clone(),
        command_line: report.command_line.clone(),
        triggered_unix_nanos: unix_nanos(report.triggered),
        trigger: Some(trigger),
        duration_ms: report.duration.as_millis() as u64,
        frequency_hz: report.frequency_hz,
        folded_triggers: report.folded_triggers,
        threads: report
            .threads
            .iter()
            .map(|thread| v1::PeekThread {
                tid: thread.tid,
                name: thread.name.clone(),
                state: thread.state.clone(),
                at_trigger: thread.at_trigger.clone(),
                wait_channel: thread.wait_channel.clone().unwrap_or_default(),
                python_at_trigger: thread.python_at_trigger.clone(),
                snapshots: thread.snapshots,
                utilization_percent: thread.utilization_percent,
            })
            .collect(),
        warnings: report.warnings.clone(),
        text: report.text.clone(),
    }
}

pub fn peek_summary(summary: PeekSummary) -> v1::PeekSummary {
    v1::PeekSummary {
        id: summary.id,
        pid: summary.pid,
        title: summary.title,
        triggered_unix_nanos: unix_nanos(summary.triggered),
        bytes: summary.bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_are_julias() {
        let options = report_options(None).unwrap();
        assert_eq!(options, ReportOptions::default());
        assert!(options.kernel && options.combine && options.interpreter && options.python_lines);
        assert_eq!(options.maxlines, crate::profile::DEFAULT_MAXLINES);
        assert_eq!(options.maxsections, crate::profile::DEFAULT_MAXSECTIONS);
    }

    #[test]
    fn options_convert() {
        let options = report_options(Some(v1::ReportOptions {
            format: v1::Format::Pprof as i32,
            maxdepth: 5,
            mincount: 2,
            noisefloor: 2.0,
            sortedby: v1::SortedBy::Count as i32,
            groupby: v1::GroupBy::Thread as i32,
            kernel: Some(false),
            combine: Some(false),
            maxlines: Some(0),
            maxsections: Some(0),
            interpreter: Some(false),
            python_lines: Some(false),
            functions: true,
        }))
        .unwrap();
        assert!(options.functions);
        assert_eq!(options.format, Format::Pprof);
        assert_eq!(options.maxdepth, Some(5));
        assert_eq!(options.maxlines, 0, "0: no limit");
        assert_eq!(options.maxsections, 0, "0: no limit");
        assert_eq!(options.groupby, GroupBy::Thread);
        assert!(!options.kernel && !options.combine && !options.interpreter);
        assert!(!options.python_lines);
    }

    #[test]
    fn unknown_enum_values_name_the_field_and_every_value() {
        let err = report_options(Some(v1::ReportOptions {
            format: 42,
            ..Default::default()
        }))
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("format") && message.contains("speedscope"),
            "{message}"
        );
        assert!(profile_mode(9).is_err());
    }

    #[test]
    fn windows_need_times_after_1970() {
        assert!(past_window(-1, 0).is_err());
        let window = past_window(1_000_000_000, 0).unwrap();
        assert_eq!(unix_nanos(window.start), 1_000_000_000);
        assert_eq!(window.end, None);
    }

    #[test]
    fn errors_map_to_status_codes() {
        for (err, code) in [
            (ServiceError::invalid("x"), tonic::Code::InvalidArgument),
            (ServiceError::NotFound("x".into()), tonic::Code::NotFound),
            (
                ServiceError::PermissionDenied("x".into()),
                tonic::Code::PermissionDenied,
            ),
            (
                ServiceError::ResourceExhausted("x".into()),
                tonic::Code::ResourceExhausted,
            ),
            (ServiceError::Stopping, tonic::Code::Unavailable),
            (ServiceError::Internal("x".into()), tonic::Code::Internal),
        ] {
            assert_eq!(Status::from(err).code(), code);
        }
    }
}
