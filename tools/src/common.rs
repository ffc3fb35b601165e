//! What the `shoal` subcommands share: starting the node, watching registration, tables and JSON lines. Every table
//! cell goes through [`printable`] (names come from the network) and is padded by its width on a terminal.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use shoal::monitor::{Snapshot, printable};
use shoal::{InitError, Node};
use unicode_width::UnicodeWidthStr;

use crate::exit;

/// Starts this process's shoal node; an invalid `ecal.ini` exits with [`exit::CONFIG`].
pub(crate) fn start_node(unit: &str) -> Result<Node> {
    match Node::init(unit) {
        Ok(node) => Ok(node),
        Err(InitError::Config(e)) => Err(exit::coded(
            exit::CONFIG,
            format!("{e} (`shoal config check FILE` lists every error; unset ECAL_INI or fix the file)"),
        )),
        Err(e) => Err(anyhow::Error::new(e).context("starting the shoal node (is /dev/shm writable?)")),
    }
}

/// What registration knows after listening for `wait_ms` (every process registers at least once a second), without
/// this process's own entities.
pub(crate) fn observe(node: &Node, wait_ms: u64) -> Snapshot {
    std::thread::sleep(Duration::from_millis(wait_ms));
    let mut snap = node.snapshot();
    snap.processes.retain(|p| !p.is_self);
    let me = std::process::id();
    snap.topics.retain(|t| !(t.pid == me && t.host_name == node.host_name()));
    snap.services.retain(|s| !s.is_self);
    snap
}

/// Writes `v` as one JSON line.
pub(crate) fn json_line(out: &mut impl Write, v: &serde_json::Value) -> Result<()> {
    writeln!(out, "{v}").context("writing to stdout")
}

/// A text table: a header row, then rows; columns padded to their widest cell (in terminal columns: a wide character
/// takes two), numeric columns right-aligned. Cells are escaped with [`printable`] when they are added.
#[derive(Debug)]
pub(crate) struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a column whose name starts with `>` is right-aligned (the `>` is not shown).
    pub(crate) fn new(columns: &[&'static str]) -> Table {
        Table {
            header: columns.iter().map(|c| c.trim_start_matches('>')).collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| printable(&c).into_owned()).collect());
    }

    pub(crate) fn write(&self, out: &mut impl Write) -> Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.width()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(c.width());
                }
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut s = String::new();
            for (i, c) in cells.enumerate() {
                let w = widths.get(i).copied().unwrap_or(0);
                let pad = w.saturating_sub(c.width());
                if i > 0 {
                    s.push_str("  ");
                }
                if self.right.get(i).copied().unwrap_or(false) {
                    s.extend(std::iter::repeat_n(' ', pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if i + 1 < widths.len() {
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            s.trim_end().to_owned()
        };
        writeln!(out, "{}", line(&mut self.header.iter().copied()))?;
        for r in &self.rows {
            writeln!(out, "{}", line(&mut r.iter().map(String::as_str)))?;
        }
        Ok(())
    }
}

/// `n` bytes with a binary unit (`512 B`, `1.5 KiB`, `3.0 MiB`).
pub(crate) fn bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024.0 {
        return format!("{n:.0} B");
    }
    let mut v = n / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// A rate in Hz, `-` when nothing is known.
pub(crate) fn hz(v: f64) -> String {
    if v <= 0.0 {
        "-".into()
    } else if v < 1000.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// A flag SIGINT and SIGTERM set (`shoal record` and `shoal play` stop at it); a second signal, while the command
/// finishes (the file, the last messages), ends the process at once.
pub(crate) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))
            .context("cannot install the signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install the signal handler")?;
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["NAME", ">N"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["long".into(), "100".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "NAME    N\na       1\nlong  100\n");
        assert_eq!(bytes(100.0), "100 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(3.0 * 1048576.0), "3.0 MiB");
    }

    #[test]
    fn cells_from_the_network_are_escaped_and_padded_by_their_width() {
        let mut t = Table::new(&["TOPIC", ">N"]);
        t.row(vec!["evil\x1b[2J\x1b]0;title\x07".into(), "1".into()]);
        t.row(vec!["file\u{202e}txt.exe".into(), "2".into()]);
        t.row(vec!["two\nlines".into(), "3".into()]);
        t.row(vec!["画像".into(), "4".into()]);
        t.row(vec!["zero\u{200b}width".into(), "5".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert!(!text.contains('\u{202e}') && !text.contains('\u{200b}'), "{text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "one line per row: {text}");
        assert_eq!(lines[1], r"evil\x1b[2J\x1b]0;title\x07  1");
        assert!(lines[2].starts_with(r"file\u{202e}txt.exe  "), "{text}");
        assert!(lines[3].starts_with(r"two\x0alines  "), "{text}");
        assert!(lines[4].starts_with("画像  "), "{text}");
        assert!(lines[5].starts_with(r"zero\u{200b}width  "), "{text}");
        // Every row as wide as the others on a terminal (two columns per CJK character): the numbers line up.
        let ends: Vec<usize> = lines.iter().map(|l| l.width()).collect();
        assert!(ends.iter().all(|&w| w == ends[0]), "{ends:?}\n{text}");
    }
}
