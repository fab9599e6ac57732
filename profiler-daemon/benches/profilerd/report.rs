//! The tables: printed as they are measured, and collected into
//! `results.json` and `BENCHMARKS.md`.

use std::fmt::Write as _;

use serde::Serialize;

/// One table: a question, its rows, and what its numbers mean.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Notes under the table: how it was measured, targets met or missed.
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Self {
        Self {
            title: title.into(),
            headers: headers.iter().map(|header| (*header).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The table in GitHub markdown, columns padded so it reads in a terminal.
    pub fn markdown(&self) -> String {
        let columns = self.headers.len();
        let width = |column: usize| {
            std::iter::once(&self.headers[column])
                .chain(self.rows.iter().filter_map(|row| row.get(column)))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..columns).map(width).collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..columns)
                .map(|column| {
                    let cell = cells.get(column).map_or("", String::as_str);
                    format!("{cell:<width$}", width = widths[column])
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut text = format!("### {}\n\n", self.title);
        text.push_str(&line(&self.headers));
        let rule: Vec<String> = widths.iter().map(|&width| "-".repeat(width)).collect();
        text.push_str(&line(&rule));
        for row in &self.rows {
            text.push_str(&line(row));
        }
        if !self.notes.is_empty() {
            text.push('\n');
            for note in &self.notes {
                let _ = writeln!(text, "- {note}");
            }
        }
        text
    }
}

/// "met" or "MISSED" for a target, plainly.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
