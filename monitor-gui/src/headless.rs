//! `shoal-monitor --headless`: every refresh, what the window would show (once, for a saved snapshot: `--open`), as one JSON object a line (`--json`) or
//! as a short text table. Names in the text go through [`shoal::monitor::printable`], as in the window; the JSON
//! carries them as they were announced (its encoder escapes control characters).

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shoal::monitor::printable as shown;

use crate::history::{Event, events_since};
use crate::model::{Interner, ServiceEndpointRow, View, build_view, fmt_bandwidth, fmt_rate, fmt_us};
use crate::saved::SavedSnapshot;
use crate::source::SnapshotSource;

/// The JSON object of one view: `time_s`, `hosts`, `processes`, `topics` (each with its `connections`), `services`
/// (each with its `endpoints`, servers and clients, each with its `methods`; a figure not known is `null`),
/// `own_service_counts` (this process's servers and clients) and the `events` found since the view before.
pub fn view_json(view: &View, events: &[Event]) -> Value {
    let topics: Vec<Value> = view
        .topics
        .iter()
        .map(|t| {
            let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
            let conns: Vec<Value> = view
                .connections_of(&t.name)
                .map(|c| {
                    let mut cv = serde_json::to_value(c).unwrap_or(Value::Null);
                    if !c.same_host {
                        cv["latency"] = json!("clock not shared");
                    }
                    cv
                })
                .collect();
            v["connections"] = Value::Array(conns);
            v
        })
        .collect();
    let services: Vec<Value> = view
        .services
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            let eps: Vec<&ServiceEndpointRow> = view.endpoints_of(&s.name).collect();
            v["endpoints"] = serde_json::to_value(eps).unwrap_or(Value::Null);
            v
        })
        .collect();
    json!({
        "time_s": view.time_s,
        "hosts": view.hosts,
        "processes": view.processes,
        "topics": topics,
        "services": services,
        "own_service_counts": view.own_service_counts,
        "events": events,
    })
}

/// A few lines of text for one view (without `--json`).
pub fn view_text(view: &View) -> String {
    let mut s = format!(
        "{} processes, {} topics, {} services, {} with problems\n",
        view.processes.len(),
        view.topics.len(),
        view.services.len(),
        view.problem_count()
    );
    for t in &view.topics {
        let lat = t.latency.map_or("-".into(), |l| format!("P50 {} P99 {}", fmt_us(l.p50_us), fmt_us(l.p99_us)));
        s.push_str(&format!(
            "  {:<32} {:>2} pub {:>2} sub {:>10} {:>12} drops {:<6} {}  {}\n",
            shown(&t.name),
            t.publishers,
            t.subscribers,
            fmt_rate(t.rate_hz),
            fmt_bandwidth(t.bandwidth_bps),
            t.drops,
            lat,
            t.problems.text()
        ));
    }
    for sv in &view.services {
        s.push_str(&format!(
            "  service {:<24} {:>2} server {:>2} client {:>2} methods {:>8} calls {:>10}  {}\n",
            shown(&sv.name),
            sv.servers,
            sv.clients,
            sv.methods,
            sv.calls,
            sv.call_rate_hz.map_or_else(|| "—".to_owned(), fmt_rate),
            sv.problems.text()
        ));
    }
    s
}

/// Prints the view of a saved snapshot once ([`crate::saved`], `--open FILE --headless`): as [`view_json`] with
/// every event the file holds (`--json`), or as [`view_text`] and the events.
pub fn print_saved(saved: &SavedSnapshot, as_json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let (_, view) = saved.views();
    if as_json {
        writeln!(out, "{}", view_json(&view, &saved.events))?;
    } else {
        write!(out, "{}", view_text(&view))?;
        for e in &saved.events {
            writeln!(out, "  event: {} {} {}", e.kind.label(), shown(&e.subject), shown(&e.detail))?;
        }
    }
    out.flush()
}

/// Prints one line per `interval` for `duration` (the first after the first interval, so that registrations have
/// arrived), then returns.
pub fn run(
    source: &mut dyn SnapshotSource,
    duration: Duration,
    interval: Duration,
    as_json: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let start = Instant::now();
    let mut interner = Interner::default();
    let mut prev: Option<View> = None;
    let mut n = 0u32;
    loop {
        n += 1;
        let due = start + interval * n;
        if due > start + duration + interval / 2 {
            return Ok(());
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let view = build_view(&source.snapshot(), prev.as_ref(), &mut interner);
        let events = events_since(prev.as_ref(), &view);
        if as_json {
            writeln!(out, "{}", view_json(&view, &events))?;
        } else {
            write!(out, "{}", view_text(&view))?;
            for e in &events {
                writeln!(out, "  event: {} {} {}", e.kind.label(), shown(&e.subject), shown(&e.detail))?;
            }
        }
        out.flush()?;
        prev = Some(view);
        if n.is_multiple_of(64) {
            interner.shrink();
        }
    }
}
