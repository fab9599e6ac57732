//! The rules a request must follow whatever protocol it came by: a
//! selector's bounds and its regular expression compiled within them, a
//! report's knobs, a profile's duration, ids, function names. Each refusal
//! says what to fix and quotes at most a short prefix of what was sent.
//!
//! Owns those rules; it must not read the store or the kernel (only procfs,
//! to say whether a named process runs).

use std::time::{Duration, SystemTime};

use profiler_common::TASK_COMM_LEN;

use super::error::ServiceError;
use crate::{
    profile::ReportOptions,
    quote,
    store::{CommPattern, Selector},
};

/// Deepest `maxdepth` accepted: a user stack of 512 frames and a kernel
/// stack of 127, each frame with
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
/// Longest session id, peek id or cut token a request may send.
const MAX_ID_BYTES: usize = 128;

/// A selector as a request gives it, before it is checked and its regular
/// expression compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectorSpec {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub comms: Vec<String>,
    /// Empty: none.
    pub comm_regex: String,
    pub uids: Vec<u32>,
    pub cgroups: Vec<String>,
}

impl SelectorSpec {
    /// The process and thread ids it names.
    pub fn tasks(&self) -> Vec<u32> {
        self.pids.iter().chain(&self.tids).copied().collect()
    }

    /// Refuses a selector beyond the bounds: too many ids or names, or text
    /// too long to be a name, a path or a sensible pattern.
    pub fn check_bounds(&self) -> Result<(), ServiceError> {
        for (what, count, limit) in [
            ("process ids", self.pids.len(), MAX_SELECTOR_IDS),
            ("thread ids", self.tids.len(), MAX_SELECTOR_IDS),
            ("user ids", self.uids.len(), MAX_SELECTOR_IDS),
            ("command names", self.comms.len(), MAX_SELECTOR_NAMES),
            ("cgroups", self.cgroups.len(), MAX_SELECTOR_NAMES),
        ] {
            if count > limit {
                return Err(ServiceError::invalid(format!(
                    "the selector names {count} {what}; at most {limit} are accepted"
                )));
            }
        }
        if let Some(comm) = self.comms.iter().find(|comm| comm.len() >= TASK_COMM_LEN) {
            return Err(ServiceError::invalid(format!(
                "the command name {} is {} bytes long, but the kernel keeps at most {} (a longer \
                 name matches nothing); use the first {} bytes, or a regular expression",
                quote(comm),
                comm.len(),
                TASK_COMM_LEN - 1,
                TASK_COMM_LEN - 1
            )));
        }
        if let Some(cgroup) = self.cgroups.iter().find(|c| c.len() > MAX_PATH_BYTES) {
            return Err(ServiceError::invalid(format!(
                "the cgroup path {} is longer than any path can be ({MAX_PATH_BYTES} bytes)",
                quote(cgroup)
            )));
        }
        if self.comm_regex.len() > MAX_REGEX_BYTES {
            return Err(ServiceError::invalid(format!(
                "the regular expression {} is {} bytes long; at most {MAX_REGEX_BYTES} are \
                 accepted",
                quote(&self.comm_regex),
                self.comm_regex.len()
            )));
        }
        Ok(())
    }

    /// The selector of a window to come, after checking that every pid and
    /// tid it names runs (0 selects the idle tasks).
    pub fn live(self) -> Result<Selector, ServiceError> {
        let selector = self.past()?;
        for (kind, ids) in [("process", &selector.pids), ("thread", &selector.tids)] {
            for &id in ids {
                if id != 0 && !std::path::Path::new(&format!("/proc/{id}")).exists() {
                    return Err(ServiceError::NotFound(format!(
                        "no {kind} with id {id} is running (0 selects the idle tasks)"
                    )));
                }
            }
        }
        Ok(selector)
    }

    /// The selector of a past window: the processes it names may be gone.
    pub fn past(self) -> Result<Selector, ServiceError> {
        self.check_bounds()?;
        if self.comms.iter().any(String::is_empty) {
            return Err(ServiceError::invalid(
                "an empty command name matches nothing; leave comms out to select every process",
            ));
        }
        if let Some(cgroup) = self.cgroups.iter().find(|c| !c.starts_with('/')) {
            return Err(ServiceError::invalid(format!(
                "{} is not a cgroup path; write it as /proc/PID/cgroup shows it, e.g. \
                 \"/system.slice/nginx.service\"",
                quote(cgroup)
            )));
        }
        let comm_pattern = match self.comm_regex.as_str() {
            "" => None,
            text => Some(CommPattern(
                regex::RegexBuilder::new(text)
                    .size_limit(MAX_REGEX_PROGRAM_BYTES)
                    .dfa_size_limit(MAX_REGEX_DFA_BYTES)
                    .build()
                    .map_err(|err| {
                        ServiceError::invalid(format!(
                            "the regular expression {} is not valid: {}",
                            quote(text),
                            regex_error(&err)
                        ))
                    })?,
            )),
        };
        Ok(Selector {
            pids: self.pids,
            tids: self.tids,
            comms: self.comms,
            comm_pattern,
            uids: self.uids,
            cgroups: self.cgroups,
        })
    }
}

impl From<&Selector> for SelectorSpec {
    fn from(selector: &Selector) -> Self {
        Self {
            pids: selector.pids.clone(),
            tids: selector.tids.clone(),
            comms: selector.comms.clone(),
            comm_regex: selector
                .comm_pattern
                .as_ref()
                .map(|pattern| pattern.0.as_str().to_owned())
                .unwrap_or_default(),
            uids: selector.uids.clone(),
            cgroups: selector.cgroups.clone(),
        }
    }
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

/// Refuses report options beyond what any report can use.
pub fn check_report_options(options: &ReportOptions) -> Result<(), ServiceError> {
    if !options.noisefloor.is_finite() || options.noisefloor < 0.0 {
        return Err(ServiceError::invalid(format!(
            "the noise floor must be a number of 0 or more (2.0 is a good start), not {}",
            options.noisefloor
        )));
    }
    if let Some(maxdepth) = options.maxdepth
        && maxdepth > MAX_DEPTH
    {
        return Err(ServiceError::invalid(format!(
            "maxdepth {maxdepth} is deeper than any stack can be (at most {MAX_DEPTH}); leave \
             it out for no limit"
        )));
    }
    Ok(())
}

/// How long a Profile runs: at least a millisecond, at most the maximum.
pub fn profile_duration(duration: Duration, max: Duration) -> Result<Duration, ServiceError> {
    if duration < Duration::from_millis(1) {
        return Err(ServiceError::invalid(
            "a profile must last at least 1 ms (it is how long to profile)",
        ));
    }
    if duration > max {
        return Err(ServiceError::invalid(format!(
            "a profile of {} is longer than the longest the daemon allows, {} \
             (max_profile_duration in its configuration); profile for less",
            humantime::format_duration(duration),
            humantime::format_duration(max)
        )));
    }
    Ok(duration)
}

/// The one process a session that follows children starts from.
pub fn family_root(selector: &Selector) -> Result<u32, ServiceError> {
    match selector.pids[..] {
        [pid] if pid != 0 && selector.tids.is_empty() => Ok(pid),
        _ => Err(ServiceError::invalid(
            "a session that follows children selects exactly one process (one pid, no tids), \
             whose children it follows",
        )),
    }
}

/// Refuses an id or token that no id of the daemon can be; `what` names
/// it, e.g. "the session id".
pub fn check_id(id: &str, what: &str) -> Result<(), ServiceError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(ServiceError::invalid(format!(
            "{what} {} cannot be one: ids are 1 to {MAX_ID_BYTES} bytes",
            quote(id)
        )));
    }
    Ok(())
}

/// The function a Callers request looks for.
pub fn function_name(function: String) -> Result<String, ServiceError> {
    if function.is_empty() {
        return Err(ServiceError::invalid(
            "name a function, e.g. \"malloc\" or \"app::handle\"",
        ));
    }
    if function.len() > MAX_FUNCTION_BYTES {
        return Err(ServiceError::invalid(format!(
            "the function name {} is {} bytes long; at most {MAX_FUNCTION_BYTES} are accepted",
            quote(&function),
            function.len()
        )));
    }
    Ok(function)
}

/// A time as a date a person reads, e.g. `2026-11-21T17:30:00Z`; a time
/// past the year 9999, which has no such date, as seconds since 1970.
pub fn date(time: SystemTime) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    // humantime's Display fails (and `to_string` panics) past 9999.
    if write!(text, "{}", humantime::format_rfc3339_seconds(time)).is_err() {
        let seconds = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        return format!("{seconds} s after 1970 (past the year 9999)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_past_the_year_9999_is_written_without_panicking() {
        let far = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(u64::MAX);
        assert!(date(far).contains("past the year 9999"), "{}", date(far));
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_764_230_400);
        assert_eq!(date(at), "2025-11-27T08:00:00Z");
    }

    #[test]
    fn selectors_are_bounded_and_their_errors_short() {
        let refused = |selector: SelectorSpec| match selector.past() {
            Err(ServiceError::InvalidArgument(message)) => message,
            other => panic!("refused, not {other:?}"),
        };
        let message = refused(SelectorSpec {
            comm_regex: "(".repeat(5000),
            ..Default::default()
        });
        assert!(
            message.contains("at most 1024") && message.len() < 300,
            "{message}"
        );
        let message = refused(SelectorSpec {
            comm_regex: r"\w{1000}\w{1000}".to_owned(),
            ..Default::default()
        });
        assert!(message.contains("simplify it"), "{message}");
        let message = refused(SelectorSpec {
            comm_regex: "a(b".to_owned(),
            ..Default::default()
        });
        assert_eq!(
            message,
            "the regular expression \"a(b\" is not valid: unclosed group"
        );
        let message = refused(SelectorSpec {
            pids: vec![1; 2000],
            ..Default::default()
        });
        assert!(
            message.contains("2000 process ids; at most 1024"),
            "{message}"
        );
        let message = refused(SelectorSpec {
            comms: vec!["a_name_longer_than_fifteen".to_owned()],
            ..Default::default()
        });
        assert!(message.contains("at most 15"), "{message}");
        let message = refused(SelectorSpec {
            cgroups: vec!["system.slice".to_owned()],
            ..Default::default()
        });
        assert!(message.contains("is not a cgroup path"), "{message}");
    }

    #[test]
    fn live_selectors_need_running_processes() {
        let me = std::process::id();
        let ok = SelectorSpec {
            pids: vec![me, 0],
            tids: vec![me],
            comms: vec!["x".into()],
            comm_regex: "^x".into(),
            ..Default::default()
        }
        .live()
        .unwrap();
        assert_eq!(ok.pids, [me, 0]);
        let spec = SelectorSpec::from(&ok);
        assert_eq!(spec.comm_regex, "^x");
        let err = SelectorSpec {
            pids: vec![u32::MAX - 1],
            ..Default::default()
        }
        .live()
        .unwrap_err();
        assert!(matches!(err, ServiceError::NotFound(_)), "{err}");
    }

    #[test]
    fn durations_ids_and_options_are_bounded() {
        let max = Duration::from_secs(3600);
        assert!(profile_duration(Duration::ZERO, max).is_err());
        assert_eq!(
            profile_duration(Duration::from_millis(1500), max).unwrap(),
            Duration::from_millis(1500)
        );
        let message = profile_duration(Duration::MAX, max)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("longest the daemon allows, 1h"),
            "{message}"
        );
        let message = check_id(&"x".repeat(1 << 20), "the session id")
            .unwrap_err()
            .to_string();
        assert!(message.len() < 200, "{message}");
        assert!(function_name(String::new()).is_err());
        for options in [
            ReportOptions {
                noisefloor: f64::NAN,
                ..Default::default()
            },
            ReportOptions {
                noisefloor: -1.0,
                ..Default::default()
            },
            ReportOptions {
                maxdepth: Some(1_000_000),
                ..Default::default()
            },
        ] {
            assert!(check_report_options(&options).is_err(), "{options:?}");
        }
        check_report_options(&ReportOptions::default()).unwrap();
    }
}
