//! The query parameters of the HTTP routes, read into what the service
//! takes, with an error for each bad one that says what to fix.
//!
//! Owns the parameter names and their meaning; it must not answer requests.

use std::time::{Duration, SystemTime};

use crate::{
    profile::{Format, ProfileMode, ReportOptions},
    quote,
    service::{ServiceError, selection::SelectorSpec},
};

/// The query's `name=value` pairs, in order (names may repeat).
#[derive(Clone, Debug, Default)]
pub struct Params(Vec<(String, String)>);

/// The latest time a parameter may name: 9999-12-31T23:59:59.999Z, the
/// last a date is written for.
pub const MAX_UNIX_MILLIS: u64 = 253_402_300_799_999;

/// Names every route takes to select processes and the mode.
const SELECTOR_NAMES: &[&str] = &["pid", "tid", "comm", "comm_regex", "cgroup", "mode"];

impl Params {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self(pairs)
    }

    /// The parameters of `pairs` (for tests).
    #[cfg(test)]
    pub fn of(pairs: &[(&str, &str)]) -> Self {
        Self(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        )
    }

    /// Refuses names the route does not know (a typo would otherwise be
    /// ignored and profile something else than meant).
    pub fn only(&self, route: &str, names: &[&str]) -> Result<(), ServiceError> {
        for (name, _) in &self.0 {
            if !names.contains(&name.as_str()) && !SELECTOR_NAMES.contains(&name.as_str()) {
                // `delay` is let through only to be refused with its reason.
                let mut known: Vec<&str> = (names.iter().chain(SELECTOR_NAMES).copied())
                    .filter(|name| *name != "delay")
                    .collect();
                known.sort_unstable();
                return Err(ServiceError::invalid(format!(
                    "{route} does not take the parameter {}; it takes {}",
                    quote(name),
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The one value of `name`, if given (given twice is an error).
    fn value<'a>(&'a self, name: &'a str) -> Result<Option<&'a str>, ServiceError> {
        let mut values = self.values(name);
        let first = values.next();
        if values.next().is_some() {
            return Err(ServiceError::invalid(format!(
                "the parameter {name} is given more than once; give it once"
            )));
        }
        Ok(first)
    }

    /// A duration in seconds (fractions allowed), e.g. `seconds=30`, or
    /// with its unit as the CLI takes it, e.g. `duration=2s`, `500ms`.
    pub fn seconds(&self, name: &str) -> Result<Option<Duration>, ServiceError> {
        let Some(text) = self.value(name)? else {
            return Ok(None);
        };
        let seconds: f64 = match text.trim().parse() {
            Ok(seconds) => seconds,
            Err(_) => humantime::parse_duration(text.trim())
                .map_err(|_| {
                    ServiceError::invalid(format!(
                        "{name}={} is not a number of seconds nor a duration; give e.g. \
                         {name}=30 or {name}=2s",
                        quote(text)
                    ))
                })?
                .as_secs_f64(),
        };
        if !seconds.is_finite() || seconds <= 0.0 {
            return Err(ServiceError::invalid(format!(
                "{name}={} must be more than 0 seconds",
                quote(text)
            )));
        }
        Duration::try_from_secs_f64(seconds)
            .map(Some)
            .map_err(|_| ServiceError::invalid(format!("{name}={} is too long", quote(text))))
    }

    /// A time in Unix milliseconds, e.g. `from=1764230400000`, up to the
    /// end of the year 9999 ([`MAX_UNIX_MILLIS`]).
    pub fn unix_millis(&self, name: &str) -> Result<Option<SystemTime>, ServiceError> {
        let Some(text) = self.value(name)? else {
            return Ok(None);
        };
        let millis: u64 = text
            .trim()
            .parse()
            .ok()
            .filter(|millis| *millis <= MAX_UNIX_MILLIS)
            .ok_or_else(|| {
                ServiceError::invalid(format!(
                    "{name}={} is not a time in Unix milliseconds from 0 to {MAX_UNIX_MILLIS} \
                     (9999-12-31); give e.g. {name}=1764230400000",
                    quote(text)
                ))
            })?;
        Ok(Some(SystemTime::UNIX_EPOCH + Duration::from_millis(millis)))
    }

    /// A boolean: `true`/`false` (and `1`/`0`).
    pub fn flag(&self, name: &str) -> Result<Option<bool>, ServiceError> {
        let Some(text) = self.value(name)? else {
            return Ok(None);
        };
        match text {
            "true" | "1" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(ServiceError::invalid(format!(
                "{name}={} must be true or false",
                quote(text)
            ))),
        }
    }

    /// A whole number, if given; `what` says what it counts (and its
    /// bounds) for the error.
    pub fn whole_number<T: std::str::FromStr>(
        &self,
        name: &str,
        what: &str,
    ) -> Result<Option<T>, ServiceError> {
        let Some(text) = self.value(name)? else {
            return Ok(None);
        };
        text.trim()
            .parse()
            .map(Some)
            .map_err(|_| ServiceError::invalid(format!("{name}={} is not {what}", quote(text))))
    }

    /// Text, if given.
    pub fn text(&self, name: &str) -> Result<Option<String>, ServiceError> {
        Ok(self.value(name)?.map(str::to_owned))
    }

    /// The processes selected: `pid` (repeated or comma-separated), `tid`
    /// (threads, likewise), `comm` (likewise), `comm_regex`, `cgroup`
    /// (repeated).
    pub fn selector(&self) -> Result<SelectorSpec, ServiceError> {
        let list = |name: &str| -> Vec<String> {
            self.values(name)
                .flat_map(|value| value.split(','))
                .map(str::trim)
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let ids = |name: &str, what: &str| {
            list(name)
                .into_iter()
                .map(|id| {
                    id.parse::<u32>().ok().filter(|id| *id != 0).ok_or_else(|| {
                        ServiceError::invalid(format!("{name}={} is not a {what}", quote(&id)))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let selector = SelectorSpec {
            pids: ids("pid", "process id")?,
            tids: ids("tid", "thread id")?,
            comms: list("comm"),
            comm_regex: self.value("comm_regex")?.unwrap_or_default().to_owned(),
            uids: Vec::new(),
            cgroups: self.values("cgroup").map(str::to_owned).collect(),
        };
        selector.check_bounds()?;
        Ok(selector)
    }

    /// `mode=cpu|offcpu|wall` (cpu when not given).
    pub fn mode(&self) -> Result<ProfileMode, ServiceError> {
        match self.value("mode")? {
            None | Some("cpu") => Ok(ProfileMode::Cpu),
            Some("offcpu") => Ok(ProfileMode::OffCpu),
            Some("wall") => Ok(ProfileMode::Wall),
            Some(other) => Err(ServiceError::invalid(format!(
                "mode={} is not a mode; give cpu, offcpu or wall",
                quote(other)
            ))),
        }
    }
}

/// Report options for `format` with the defaults otherwise.
pub fn options(format: Format) -> ReportOptions {
    ReportOptions {
        format,
        ..ReportOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_take_lists_and_repeats() {
        let selector = Params::of(&[("pid", "12,13"), ("pid", "14"), ("comm", "nginx")])
            .selector()
            .unwrap();
        assert_eq!(selector.pids, [12, 13, 14]);
        assert_eq!(selector.comms, ["nginx"]);
        let threads = Params::of(&[("pid", "12"), ("tid", "15,16")])
            .selector()
            .unwrap();
        assert_eq!((threads.pids, threads.tids), (vec![12], vec![15, 16]));
        let Err(refused) = Params::of(&[("tid", "main")]).selector() else {
            panic!("tid=main was taken");
        };
        assert!(refused.to_string().contains("not a thread id"), "{refused}");
    }

    #[test]
    fn bad_parameters_say_what_to_fix() {
        let message = |result: Result<(), ServiceError>| result.unwrap_err().to_string();
        assert!(
            message(
                Params::of(&[("seconds", "ten")])
                    .seconds("seconds")
                    .map(drop)
            )
            .contains("give e.g. seconds=30")
        );
        assert!(
            message(
                Params::of(&[("seconds", "-1")])
                    .seconds("seconds")
                    .map(drop)
            )
            .contains("more than 0")
        );
        assert!(
            message(Params::of(&[("pid", "x")]).selector().map(drop)).contains("not a process id")
        );
        assert!(message(Params::of(&[("mode", "gil")]).mode().map(drop)).contains("cpu, offcpu"));
        assert!(
            message(Params::of(&[("pprof", "yes")]).flag("pprof").map(drop))
                .contains("true or false")
        );
        assert!(
            message(Params::of(&[("secs", "1")]).only("/debug/pprof/profile", &["seconds"]))
                .contains("does not take the parameter \"secs\"")
        );
        assert!(
            message(
                Params::of(&[("seconds", "1"), ("seconds", "2")])
                    .seconds("seconds")
                    .map(drop)
            )
            .contains("more than once")
        );
        // `delay` is let through to be refused with its reason, not listed.
        let listed = message(
            Params::of(&[("secs", "1")]).only("/profile", &["duration", "pprof", "n", "delay"]),
        );
        assert!(
            listed.contains("it takes cgroup, comm, comm_regex, duration, mode, n, pid, pprof"),
            "{listed}"
        );
        assert!(!listed.contains("delay"), "{listed}");
    }

    /// Durations as the CLI takes them, and plain seconds.
    #[test]
    fn durations_take_seconds_or_a_unit() {
        let duration = |text: &str| Params::of(&[("duration", text)]).seconds("duration");
        assert_eq!(duration("2").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(duration("0.5").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(duration("2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(duration("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(duration("1m").unwrap(), Some(Duration::from_secs(60)));
        assert!(
            duration("0s")
                .unwrap_err()
                .to_string()
                .contains("more than 0")
        );
        assert!(
            (duration("2 parsecs").unwrap_err().to_string())
                .contains("give e.g. duration=30 or duration=2s")
        );
    }

    #[test]
    fn errors_quote_a_short_prefix_of_what_was_sent() {
        let message = |result: Result<(), ServiceError>| result.unwrap_err().to_string();
        let long = "x".repeat(100_000);
        for said in [
            message(Params::of(&[(&long, "1")]).only("/profile", &["duration"])),
            message(
                Params::of(&[("duration", &long)])
                    .seconds("duration")
                    .map(drop),
            ),
            message(Params::of(&[("pid", &long)]).selector().map(drop)),
            message(Params::of(&[("mode", &long)]).mode().map(drop)),
            message(Params::of(&[("pprof", &long)]).flag("pprof").map(drop)),
            message(Params::of(&[("from", &long)]).unix_millis("from").map(drop)),
        ] {
            assert!(said.len() < 400, "{} bytes: {}", said.len(), &said[..400]);
            assert!(said.contains("… (100000 bytes)"), "{said}");
        }
    }

    #[test]
    fn times_past_the_year_9999_are_refused_saying_the_range() {
        for far in ["18446744073709551615", "253402300800000", "999000000000000"] {
            let said = Params::of(&[("from", far)])
                .unix_millis("from")
                .unwrap_err()
                .to_string();
            assert!(said.contains("from 0 to 253402300799999"), "{said}");
        }
        let last = Params::of(&[("to", "253402300799999")])
            .unix_millis("to")
            .unwrap()
            .unwrap();
        assert_eq!(
            crate::service::selection::date(last),
            "9999-12-31T23:59:59Z"
        );
    }
}
