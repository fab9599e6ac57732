//! The web view's source heatmap: `GET /api/source?WINDOW&function=F`
//! (with the selectors and `mode`, as `/api/functions` takes them), one
//! function's samples line by line (Self and Total, as `profilerctl
//! annotate` counts them) in each of its source files, with the text of
//! the lines shown when the file may be read (`source_files`), else the
//! counts by line number and the reason, with what to do.
//!
//! Owns the route, which lines are shown (those with samples and
//! [`CONTEXT_LINES`] around them, as annotate shows them) and its JSON; it
//! must not count samples (the service's report does) nor decide which
//! files are read (`source_files` does).

use std::collections::BTreeMap;

use axum::{
    Extension, Router,
    extract::{Query, State},
    http::StatusCode,
    routing::get,
};
use serde_json::{Value, json};

use super::{
    routes::{Admission, Answer, HttpError, Routes, admitted},
    view::{WINDOW_NAMES, json as json_response, window},
};
use crate::{
    quote,
    report::{FileLines, FunctionLines},
    source_files::SourceFiles,
};

/// Lines shown around each line with samples.
pub const CONTEXT_LINES: u32 = 2;

/// A line's text is cut after this many characters (a minified line can
/// be a whole file).
const LINE_CHARS: usize = 400;

/// The files of most samples whose text is read; the others are listed by
/// line number.
const FILES_READ: usize = 8;

/// The heatmap's route.
pub(super) fn routes() -> Router<Routes> {
    Router::new().route("/api/source", get(source))
}

/// `GET /api/source?WINDOW&function=F[&SELECTOR][&mode=M]`: `{"function",
/// "module", "samples", "self", "window_samples", "hottest": {"file",
/// "line", "self", "total"}, "files": [{"path", "self", "text_shown", "withheld", "lines_past_end", "rows": [{"line", "self",
/// "total", "text"}]}], "addresses": [{"address", "self"}]}`: the rows of a
/// file are its lines with samples and those around them when its text is
/// shown (a gap in their numbers is lines left out), its lines with
/// samples alone otherwise (`text` null, `withheld` the reason).
async fn source(
    State(routes): State<Routes>,
    Extension(admission): Extension<Admission>,
    Query(query): Query<Vec<(String, String)>>,
) -> Answer {
    let names = [WINDOW_NAMES, &["function"]].concat();
    let (asker, params) = admitted(&routes, &admission, query, "/api/source", &names)?;
    let function = params.text("function")?.unwrap_or_default();
    let (lines, window_samples) = routes
        .service
        .function_lines(
            asker,
            window(&params)?,
            params.selector()?,
            params.mode()?,
            function.clone(),
        )
        .await?;
    if lines.samples == 0 {
        return Err(HttpError(
            StatusCode::NOT_FOUND,
            format!(
                "no sample of that window is in a function named {} (nor one whose name ends \
                 in ::{0}, nor a C library alias of it); the functions table lists the \
                 window's functions",
                quote(&function)
            ),
        ));
    }
    let texts = read_texts(&routes.sources, &lines.files).await;
    let files: Vec<Value> = (lines.files.iter().zip(texts))
        .map(|(file, text)| file_rows(file, text.map_err(|reason| withheld(&reason, &function))))
        .collect();
    Ok(json_response(&json!({
        "function": function,
        "module": lines.module.as_deref(),
        "samples": lines.samples,
        "self": lines.self_samples,
        "window_samples": window_samples,
        "hottest": hottest(&lines),
        "files": files,
        "addresses": (lines.addresses.iter())
            .map(|(address, count)| json!({ "address": format!("{address:#x}"), "self": count }))
            .collect::<Vec<Value>>(),
    })))
}

/// The text of each file (the [`FILES_READ`] of most samples), read at
/// once, or why it is not shown.
async fn read_texts(sources: &SourceFiles, files: &[FileLines]) -> Vec<Result<String, String>> {
    let mut reads = tokio::task::JoinSet::new();
    for (index, file) in files.iter().enumerate().take(FILES_READ) {
        let (sources, path) = (sources.clone(), file.file.clone());
        reads.spawn(async move { (index, sources.read(&path).await) });
    }
    let mut texts: Vec<Result<String, String>> = (0..files.len())
        .map(|_| {
            Err(format!(
                "only the {FILES_READ} files with most of the function's samples are read"
            ))
        })
        .collect();
    while let Some(read) = reads.join_next().await {
        match read {
            Ok((index, text)) => texts[index] = text,
            Err(err) => tracing::warn!("a source file's read ended without an answer: {err}"),
        }
    }
    texts
}

/// Why a file's text is not shown, said as the page shows it.
fn withheld(reason: &str, function: &str) -> String {
    format!(
        "source text is not shown: {reason}; or run `profilerctl annotate {}` with the same \
         processes and window, which reads the file as your own user",
        shell_word(function)
    )
}

/// `word` as a shell reads it back: as it is when it is plain, else quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_:.-/+@".contains(c);
    match !word.is_empty() && word.chars().all(plain) {
        true => word.to_owned(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

/// The line with most Self samples (then Total), of any file.
fn hottest(lines: &FunctionLines) -> Value {
    let hottest = (lines.files.iter())
        .flat_map(|file| file.lines.iter().map(move |line| (file, line)))
        .max_by_key(|(_, line)| (line.self_samples, line.total_samples));
    match hottest {
        Some((file, line)) => json!({
            "file": &*file.file,
            "line": line.line,
            "self": line.self_samples,
            "total": line.total_samples,
        }),
        None => Value::Null,
    }
}

/// A file of the heatmap: its rows (see [`source`]) from its `text`, or
/// the reason it is withheld.
fn file_rows(file: &FileLines, text: Result<String, String>) -> Value {
    let counted: BTreeMap<u32, (u64, u64)> = (file.lines.iter())
        .map(|line| (line.line, (line.self_samples, line.total_samples)))
        .collect();
    let row = |line: u32, text: Option<&str>| {
        let (own, total) = counted.get(&line).copied().unwrap_or_default();
        json!({ "line": line, "self": own, "total": total, "text": text.map(cut) })
    };
    let (rows, withheld, past_end): (Vec<Value>, _, Vec<u32>) = match &text {
        Ok(text) => {
            let source: Vec<&str> = text.lines().collect();
            let end = u32::try_from(source.len()).unwrap_or(u32::MAX);
            let rows = shown_lines(&counted.keys().copied().collect::<Vec<_>>(), end)
                .into_iter()
                .map(|line| row(line, source.get(line as usize - 1).copied()))
                .collect();
            let past = counted.keys().copied().filter(|&line| line > end).collect();
            (rows, None, past)
        }
        Err(reason) => {
            let rows = counted.keys().map(|&line| row(line, None)).collect();
            (rows, Some(reason.as_str()), Vec::new())
        }
    };
    json!({
        "path": &*file.file,
        "self": counted.values().map(|(own, _)| own).sum::<u64>(),
        "text_shown": text.is_ok(),
        "withheld": withheld,
        "lines_past_end": past_end,
        "rows": rows,
    })
}

/// `text` cut after [`LINE_CHARS`] characters.
fn cut(text: &str) -> String {
    match text.char_indices().nth(LINE_CHARS) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

/// The lines shown of a file of `end` lines: those `counted` (in order)
/// and [`CONTEXT_LINES`] around each, within the file.
fn shown_lines(counted: &[u32], end: u32) -> Vec<u32> {
    let mut shown: Vec<u32> = Vec::new();
    for &line in counted.iter().filter(|&&line| line >= 1 && line <= end) {
        let first = line.saturating_sub(CONTEXT_LINES).max(1);
        let last = line.saturating_add(CONTEXT_LINES).min(end);
        let from = shown
            .last()
            .map_or(first, |&last_shown| first.max(last_shown + 1));
        shown.extend(from..=last);
    }
    shown
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::report::LineCount;

    fn file(lines: &[(u32, u64, u64)]) -> FileLines {
        FileLines {
            file: Arc::from("/src/a.c"),
            lines: (lines.iter())
                .map(|&(line, self_samples, total_samples)| LineCount {
                    line,
                    self_samples,
                    total_samples,
                })
                .collect(),
        }
    }

    #[test]
    fn lines_with_samples_are_shown_with_two_around_each() {
        assert_eq!(
            shown_lines(&[5, 18], 20),
            [3, 4, 5, 6, 7, 16, 17, 18, 19, 20]
        );
        assert_eq!(shown_lines(&[1, 4], 10), [1, 2, 3, 4, 5, 6]);
        assert_eq!(shown_lines(&[2, 40], 3), [1, 2, 3]);
        assert!(shown_lines(&[], 3).is_empty());
    }

    #[test]
    fn a_file_s_rows_have_its_text_or_the_reason_it_is_withheld() {
        let text: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        let counted = file(&[(5, 3, 4), (18, 0, 1), (30, 1, 1)]);
        let shown = file_rows(&counted, Ok(text));
        assert_eq!(shown["text_shown"], true);
        assert_eq!(shown["self"], 4);
        assert_eq!(shown["lines_past_end"], json!([30]));
        let rows = shown["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 10);
        assert_eq!(
            rows[0],
            json!({"line": 3, "self": 0, "total": 0, "text": "line 3"})
        );
        assert_eq!(
            rows[2],
            json!({"line": 5, "self": 3, "total": 4, "text": "line 5"})
        );

        let withheld = file_rows(&counted, Err("not under http_source_dirs".to_owned()));
        assert_eq!(withheld["text_shown"], false);
        assert_eq!(withheld["withheld"], "not under http_source_dirs");
        let rows = withheld["rows"].as_array().unwrap();
        let lines: Vec<&Value> = rows.iter().map(|row| &row["line"]).collect();
        assert_eq!(lines, [5, 18, 30]);
        assert!(rows.iter().all(|row| row["text"].is_null()));
    }

    #[test]
    fn reasons_say_how_to_see_the_source_anyway() {
        let reason = withheld("it is outside http_source_dirs", "hot_leaf");
        assert!(
            reason.starts_with("source text is not shown: it is outside")
                && reason.contains("`profilerctl annotate hot_leaf`"),
            "{reason}"
        );
        assert_eq!(shell_word("ns::f"), "ns::f");
        assert_eq!(shell_word("f(int) const"), "'f(int) const'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(cut(&"x".repeat(500)).chars().count(), LINE_CHARS + 1);
    }
}
