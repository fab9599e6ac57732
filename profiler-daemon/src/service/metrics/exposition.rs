//! The two text formats the metrics are served in, and which one a scraper
//! asked for: OpenMetrics 1.0.0 (what prometheus-client writes) only when
//! the `Accept` header asks for `application/openmetrics-text`, otherwise
//! Prometheus' text format 0.0.4, rewritten from the OpenMetrics text.
//!
//! The rewrite knows the formats' differences: 0.0.4 has no `# EOF`, no
//! `# UNIT` lines, no exemplars, no `_created` samples and no info or
//! stateset types; a counter's `# HELP`/`# TYPE` lines name its samples'
//! full name (`x_total`) where OpenMetrics names the family (`x`); help
//! escapes only backslashes and line feeds; timestamps are milliseconds.
//!
//! Owns the formats and the negotiation; it must not choose or gather the
//! metrics.

/// A text format of the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.0, ending in `# EOF`.
    OpenMetrics,
    /// Prometheus' text format, version 0.0.4.
    Text004,
}

impl Exposition {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format for a request with these `Accept` header values:
    /// OpenMetrics when it asks for `application/openmetrics-text` at
    /// least as much (by its q value) as for plain text, else 0.0.4 (also
    /// without the header, or with one that cannot be read).
    pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Self {
        let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
        for range in accept.into_iter().flat_map(|value| value.split(',')) {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let mut quality = Some(1.0);
            for parameter in parts {
                if let Some((name, value)) = parameter.split_once('=')
                    && name.trim().eq_ignore_ascii_case("q")
                {
                    quality = value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|q| (0.0..=1.0).contains(q));
                }
            }
            let Some(quality) = quality else {
                continue;
            };
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
                "text/plain" | "text/*" | "*/*" => text = text.max(quality),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Exposition::OpenMetrics
        } else {
            Exposition::Text004
        }
    }

    /// The metrics in this format, from their OpenMetrics text.
    pub fn write(self, openmetrics: String) -> String {
        match self {
            Exposition::OpenMetrics => openmetrics,
            Exposition::Text004 => text_004(&openmetrics),
        }
    }
}

/// The family being rewritten: its OpenMetrics name and type.
struct Family<'a> {
    name: &'a str,
    kind: &'a str,
}

/// Prometheus' text format 0.0.4 of an OpenMetrics text.
fn text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's HELP comes before its TYPE, which decides its name.
    let mut help: Option<(&str, &str)> = None;
    let mut family: Option<Family> = None;
    for line in openmetrics.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let (keyword, rest) = comment.split_once(' ').unwrap_or((comment, ""));
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            match keyword {
                "HELP" => help = Some((name, text)),
                "TYPE" => {
                    let (suffix, kind) = match text {
                        "counter" => ("_total", "counter"),
                        "info" => ("_info", "gauge"),
                        "stateset" => ("", "gauge"),
                        "gauge" | "histogram" | "summary" => ("", text),
                        _ => ("", "untyped"),
                    };
                    if let Some((helped, help_text)) = help.take()
                        && helped == name
                    {
                        out.push_str(&format!("# HELP {name}{suffix} {}\n", help_004(help_text)));
                    }
                    out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
                    family = Some(Family { name, kind: text });
                }
                // UNIT and EOF have no counterpart.
                _ => {}
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let (series, rest) = split_series(line);
        let metric = series.split('{').next().unwrap_or_default();
        if let Some(family) = &family
            && matches!(family.kind, "counter" | "histogram" | "summary")
            && metric.strip_prefix(family.name) == Some("_created")
        {
            continue;
        }
        // Exemplars come after " # ".
        let rest = rest.split(" # ").next().unwrap_or_default();
        let mut fields = rest.split_whitespace();
        let value = fields.next().unwrap_or_default();
        out.push_str(series);
        out.push(' ');
        out.push_str(value);
        if let Some(seconds) = fields.next().and_then(|text| text.parse::<f64>().ok()) {
            out.push_str(&format!(" {}", (seconds * 1000.0).round() as i64));
        }
        out.push('\n');
    }
    out
}

/// A sample line's series (name and labels) and the rest (value,
/// timestamp, exemplar), split where the labels end: label values may hold
/// spaces, `}` and `#` (escaped quotes too).
fn split_series(line: &str) -> (&str, &str) {
    let Some(open) = line.find(['{', ' ']) else {
        return (line, "");
    };
    if line.as_bytes()[open] == b' ' {
        return (&line[..open], &line[open..]);
    }
    let (mut quoted, mut escaped) = (false, false);
    for (at, byte) in line.bytes().enumerate().skip(open) {
        match byte {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b'}' if !quoted => return (&line[..=at], &line[at + 1..]),
            _ => {}
        }
    }
    (line, "")
}

/// Help text escaped as 0.0.4 escapes it: OpenMetrics' `\"` is a plain
/// quote there (only `\\` and `\n` are escapes).
fn help_004(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push_str("\\\\"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_asked_for() {
        let negotiate = |accept: &[&str]| Exposition::negotiate(accept.iter().copied());
        // Prometheus 2 and 3, by default.
        assert_eq!(
            negotiate(&[
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ]),
            Exposition::OpenMetrics
        );
        assert_eq!(
            negotiate(&[
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                 text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,*/*;q=0.1"
            ]),
            Exposition::OpenMetrics
        );
        // Prometheus told to scrape 0.0.4, curl, no header, nonsense.
        for accept in [
            &["text/plain;version=0.0.4"][..],
            &["*/*"],
            &[],
            &["application/json"],
            &["application/openmetrics-text;q=0"],
            &["application/openmetrics-text;q=high"],
            &["text/plain;q=0.9, application/openmetrics-text;q=0.5"],
        ] {
            assert_eq!(negotiate(accept), Exposition::Text004, "{accept:?}");
        }
        // Several header values count as one list.
        assert_eq!(
            negotiate(&["text/plain;q=0.2", "Application/OpenMetrics-Text"]),
            Exposition::OpenMetrics
        );
    }

    #[test]
    fn text_004_names_counters_with_total_and_drops_what_it_lacks() {
        let openmetrics = "# HELP a_seconds Time \\\"spent\\\" \\\\ here.\n\
                           # TYPE a_seconds counter\n\
                           # UNIT a_seconds seconds\n\
                           a_seconds_total{path=\"x} # y\"} 1.5 # {trace=\"1\"} 1.0\n\
                           a_seconds_created 1700000000.0\n\
                           # HELP b A gauge.\n\
                           # TYPE b gauge\n\
                           b 3 1700000000.5\n\
                           # HELP build Build.\n\
                           # TYPE build info\n\
                           build_info{version=\"1\"} 1\n\
                           # HELP c Odd.\n\
                           # TYPE c unknown\n\
                           c 1\n\
                           # EOF\n";
        assert_eq!(
            text_004(openmetrics),
            "# HELP a_seconds_total Time \"spent\" \\\\ here.\n\
             # TYPE a_seconds_total counter\n\
             a_seconds_total{path=\"x} # y\"} 1.5\n\
             # HELP b A gauge.\n\
             # TYPE b gauge\n\
             b 3 1700000000500\n\
             # HELP build_info Build.\n\
             # TYPE build_info gauge\n\
             build_info{version=\"1\"} 1\n\
             # HELP c Odd.\n\
             # TYPE c untyped\n\
             c 1\n"
        );
    }
}
