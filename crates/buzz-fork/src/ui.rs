//! All user-facing printing. Reports (tables, paths, lists) go to stdout;
//! progress and diagnostics go to stderr, next to the streamed cargo output.

use std::fmt::Write as _;
use std::io::Write as _;

/// A plain-text table with a header row, columns padded to their widest cell.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    #[must_use]
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders with ` | ` separators.
    #[must_use]
    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                if i > 0 {
                    s.push_str(" | ");
                }
                if i + 1 == cols {
                    s.push_str(cell);
                } else {
                    let pad = width - cell.chars().count();
                    s.push_str(cell);
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.trim_end().to_owned()
        };
        let mut out = String::new();
        let _ = writeln!(out, "{}", line(&self.headers));
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let _ = writeln!(out, "{}", rule.join("-|-"));
        for r in &self.rows {
            let _ = writeln!(out, "{}", line(r));
        }
        out
    }
}

/// Prints report text to stdout.
pub fn report(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Prints a progress step to stderr.
pub fn step(what: &str) {
    to_stderr(&format!("==> {what}"));
}

/// Prints a note to stderr.
pub fn note(what: &str) {
    to_stderr(what);
}

/// Prints a warning to stderr.
pub fn warn(what: &str) {
    to_stderr(&format!("warning: {what}"));
}

/// Writes a line to stderr; a closed stderr is not worth a panic.
fn to_stderr(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Prints a fatal error to stderr as exactly one line. Every message already
/// carries its cause (e.g. the I/O error), so the source chain is not
/// repeated; a multi-line text from a tool is folded into that one line.
pub fn error(err: &crate::error::Error) {
    to_stderr(&error_line(err));
}

/// The one line [`error`] prints.
#[must_use]
pub fn error_line(err: &crate::error::Error) -> String {
    let text = err.to_string();
    let folded: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    format!("error: {}", folded.join("; "))
}

/// Renders a titled bullet list (`None` when empty).
#[must_use]
pub fn bullets(title: &str, items: &[String]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let mut out = format!("{title}\n");
    for i in items {
        let _ = writeln!(out, "  - {i}");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns() {
        let mut t = Table::new(&["id", "apply", "notes"]);
        t.row(vec!["a-long-id".into(), "ok".into(), String::new()]);
        t.row(vec!["b".into(), "offset".into(), "see below".into()]);
        insta::assert_snapshot!(t.render(), @r"
        id        | apply  | notes
        ----------|--------|----------
        a-long-id | ok     |
        b         | offset | see below
        ");
    }
}
