//! Looking at the system through registration: `shoal list`, `shoal process list`, `shoal topic list`,
//! `shoal topic info TOPIC`. Every process announces itself every second (eCAL's default), so each command listens
//! for `--wait-ms` before it prints; eCAL processes and shoal processes are listed alike.

use std::io::Write;

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use shoal::monitor::{ProcessEntry, Snapshot, TopicDirection, TopicEntry, TopicProblem, TopicSummary, printable};

use crate::common::{Table, bytes, hz, json_line, observe, start_node};
use crate::descriptors;
use crate::exit;

/// Options of every listing.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// How long to listen to registration before printing, in ms (everyone registers at least once a second).
    #[arg(long, default_value_t = 1500)]
    pub(crate) wait_ms: u64,
    /// One JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `shoal topic info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// The topic name.
    topic: String,
    #[command(flatten)]
    list: ListArgs,
}

fn direction(t: &TopicEntry) -> &'static str {
    match t.direction {
        TopicDirection::Publisher => "pub",
        TopicDirection::Subscriber => "sub",
    }
}

fn kind(p: &ProcessEntry) -> &'static str {
    if p.is_shoal { "shoal" } else { "ecal" }
}

fn rate_of(t: &TopicEntry) -> f64 {
    f64::from(t.data_frequency_mhz.max(0)) / 1000.0
}

fn process_counts(snap: &Snapshot, p: &ProcessEntry) -> (usize, usize) {
    let mine = snap.topics.iter().filter(|t| t.pid == p.pid && t.host_name == p.host_name);
    mine.fold((0, 0), |(pubs, subs), t| match t.direction {
        TopicDirection::Publisher => (pubs + 1, subs),
        TopicDirection::Subscriber => (pubs, subs + 1),
    })
}

fn process_json(snap: &Snapshot, p: &ProcessEntry) -> Value {
    let (pubs, subs) = process_counts(snap, p);
    json!({"kind": "process", "host": p.host_name, "pid": p.pid, "process": p.process_name, "unit": p.unit_name,
           "runtime": kind(p), "version": p.runtime_version, "publishers": pubs, "subscribers": subs,
           "state": p.state.to_string(), "state_severity": p.state.severity.to_wire(),
           "state_severity_level": p.state.level.to_wire(), "state_info": p.state.info,
           "registration_age_ms": p.registration_age.as_millis() as u64,
           "udp_kernel_drops": p.shoal.map(|s| s.udp_kernel_drops),
           "registration_kernel_drops": p.shoal.map(|s| s.registration_kernel_drops),
           "command_line": p.command_line,
           "memory_rss_bytes": p.shoal.and_then(|s| s.memory_rss_bytes),
           "cpu_load": p.shoal.and_then(|s| s.cpu_load())})
}

fn process_table(snap: &Snapshot) -> Table {
    let mut t = Table::new(&[
        "HOST",
        ">PID",
        "RUNTIME",
        "UNIT",
        ">PUBS",
        ">SUBS",
        "STATE",
        ">SEEN",
        ">CPU",
        ">MEM",
        ">KERNEL_DROPS",
        "VERSION",
        "PROCESS",
    ]);
    let mut ps: Vec<&ProcessEntry> = snap.processes.iter().collect();
    ps.sort_by(|a, b| (&a.host_name, a.pid).cmp(&(&b.host_name, b.pid)));
    for p in ps {
        let (pubs, subs) = process_counts(snap, p);
        t.row(vec![
            p.host_name.clone(),
            p.pid.to_string(),
            kind(p).into(),
            p.unit_name.clone(),
            pubs.to_string(),
            subs.to_string(),
            p.state.to_string(),
            format!("{:.1}s", p.registration_age.as_secs_f64()),
            // CPU and memory as shoal processes announce them (eCAL 6 announces neither).
            p.shoal.and_then(|s| s.cpu_load()).map_or_else(|| "-".to_owned(), |l| format!("{:.1}%", l * 100.0)),
            p.shoal
                .and_then(|s| s.memory_rss_bytes)
                .map_or_else(|| "-".to_owned(), |b| format!("{:.1}M", b as f64 / (1u64 << 20) as f64)),
            // Datagrams the kernel dropped on its UDP data and registration sockets (shoal processes announce it).
            // Summed saturating: a peer may announce anything.
            p.shoal.map_or_else(
                || "-".to_owned(),
                |s| s.udp_kernel_drops.saturating_add(s.registration_kernel_drops).to_string(),
            ),
            p.runtime_version.clone(),
            p.process_name.clone(),
        ]);
    }
    t
}

fn topic_table(topics: &[TopicSummary]) -> Table {
    let mut t =
        Table::new(&["TOPIC", "TYPE", "ENCODING", ">PUBS", ">SUBS", "LAYERS", ">RATE_HZ", ">DROPS", "PROBLEMS"]);
    for r in topics {
        let (ty, enc) = r.type_label();
        let problems: Vec<&str> = r.problems.iter().map(|p| p.label()).collect();
        t.row(vec![
            r.name.clone(),
            ty,
            enc,
            r.publishers.to_string(),
            r.subscribers.to_string(),
            if r.layers.is_empty() { "-".into() } else { r.layers.join(",") },
            hz(r.rate_hz),
            r.drops.to_string(),
            if problems.is_empty() { "-".into() } else { problems.join(", ") },
        ]);
    }
    t
}

fn topic_row_json(r: &TopicSummary) -> Value {
    let types: Vec<Value> = r.types.iter().map(|t| json!({"type_name": t.name, "encoding": t.encoding})).collect();
    let problems: Vec<&str> = r.problems.iter().map(|p| p.name()).collect();
    json!({"kind": "topic", "topic": r.name, "types": types,
           "type_mismatch": r.has(TopicProblem::TypeMismatch), "publishers": r.publishers,
           "subscribers": r.subscribers, "layers": r.layers, "rate_hz": r.rate_hz, "size_bytes": r.size_bytes,
           "bandwidth_bps": r.bandwidth_bps, "drops": r.drops, "problems": problems,
           "last_seen_ms": r.last_seen.as_millis() as u64})
}

/// `shoal list`: processes, then topics.
pub(crate) fn list_all(a: &ListArgs) -> Result<()> {
    let node = start_node("shoal_list")?;
    let snap = observe(&node, a.wait_ms);
    let mut out = std::io::stdout().lock();
    if a.json {
        for p in &snap.processes {
            json_line(&mut out, &process_json(&snap, p))?;
        }
        for r in snap.topic_summaries() {
            json_line(&mut out, &topic_row_json(&r))?;
        }
        return Ok(());
    }
    writeln!(out, "PROCESSES ({})", snap.processes.len())?;
    process_table(&snap).write(&mut out)?;
    let summaries = snap.topic_summaries();
    writeln!(out, "\nTOPICS ({})", summaries.len())?;
    topic_table(&summaries).write(&mut out)?;
    if snap.processes.is_empty() {
        writeln!(
            out,
            "\n(no other process registered within {} ms: nothing is running, or it uses another registration \
             port or network mode; `shoal config show` prints this side's)",
            a.wait_ms
        )?;
    }
    Ok(())
}

/// `shoal process list`.
pub(crate) fn process_list(a: &ListArgs) -> Result<()> {
    let node = start_node("shoal_process")?;
    let snap = observe(&node, a.wait_ms);
    let mut out = std::io::stdout().lock();
    if a.json {
        for p in &snap.processes {
            json_line(&mut out, &process_json(&snap, p))?;
        }
    } else {
        process_table(&snap).write(&mut out)?;
    }
    Ok(())
}

fn endpoint_json(t: &TopicEntry) -> Value {
    json!({"topic": t.topic_name, "direction": direction(t), "host": t.host_name, "pid": t.pid,
           "process": t.process_name, "unit": t.unit_name, "type_name": t.type_info.name,
           "encoding": t.type_info.encoding, "descriptor_len": t.type_info.descriptor.len(), "layers": t.layers,
           "ring_page_kb": t.ring_page_kb,
           "entity_id": t.entity_id.to_string(), "data_clock": t.data_clock, "frequency_hz": rate_of(t),
           "drops": t.message_drops, "size": t.topic_size, "type_mismatch": t.type_mismatch,
           "history_kept": t.shoal.as_ref().map(|s| s.history_kept),
           "history_resent": t.shoal.as_ref().map(|s| s.history_resent),
           "history_missed": t.shoal.as_ref().map(|s| s.history_missed)})
}

/// `shoal topic list`: one row per publisher and subscriber.
pub(crate) fn topic_list(a: &ListArgs) -> Result<()> {
    let node = start_node("shoal_topic")?;
    let snap = observe(&node, a.wait_ms);
    let mut out = std::io::stdout().lock();
    let mut entries: Vec<&TopicEntry> = snap.topics.iter().collect();
    entries.sort_by(|a, b| {
        (&a.topic_name, direction(a), &a.host_name, a.pid).cmp(&(&b.topic_name, direction(b), &b.host_name, b.pid))
    });
    if a.json {
        for t in entries {
            json_line(&mut out, &endpoint_json(t))?;
        }
        return Ok(());
    }
    let mut table =
        Table::new(&["DIR", "TOPIC", "HOST", ">PID", "UNIT", "TYPE", "ENCODING", "LAYERS", ">RATE_HZ", ">DROPS"]);
    for t in entries {
        table.row(vec![
            direction(t).into(),
            t.topic_name.clone(),
            t.host_name.clone(),
            t.pid.to_string(),
            t.unit_name.clone(),
            if t.type_info.name.is_empty() { "-".into() } else { t.type_info.name.clone() },
            if t.type_info.encoding.is_empty() { "-".into() } else { t.type_info.encoding.clone() },
            if t.layers.is_empty() { "-".into() } else { t.layers.join(",") },
            hz(rate_of(t)),
            t.message_drops.to_string(),
        ]);
    }
    table.write(&mut out)?;
    Ok(())
}

fn latency_text(t: &TopicEntry) -> Option<String> {
    let l = &t.latency;
    (l.count > 0).then(|| {
        format!(
            "mean {:.1} µs, min {:.1}, max {:.1}, std dev {:.1} ({} measured)",
            l.mean_us,
            l.min_us,
            l.max_us,
            l.variance_us2.max(0.0).sqrt(),
            l.count
        )
    })
}

fn connections_json(t: &TopicEntry) -> Vec<Value> {
    let Some(s) = &t.shoal else { return Vec::new() };
    s.connections
        .iter()
        .map(|c| {
            let p = |q: f64| c.latency.percentile(q).map(|ns| ns as f64 / 1000.0);
            json!({"publisher_id": c.publisher_id.to_string(), "via": c.via.name(), "same_host": c.same_host,
                   "messages": c.messages, "bytes": c.bytes, "drops": c.drops, "rate_hz": c.rate_hz(),
                   "bandwidth_bps": c.bandwidth_bps(), "last_size": c.last_size,
                   "latency_p50_us": p(0.5), "latency_p99_us": p(0.99)})
        })
        .collect()
}

/// `shoal topic info TOPIC`.
pub(crate) fn topic_info(a: &InfoArgs) -> Result<()> {
    let node = start_node("shoal_topic")?;
    let snap = observe(&node, a.list.wait_ms);
    let mut ends: Vec<&TopicEntry> = snap.topics.iter().filter(|t| t.topic_name == a.topic).collect();
    if ends.is_empty() {
        let mut names: Vec<&str> = snap.topics.iter().map(|t| t.topic_name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        // Errors are escaped where they are printed (main), once.
        let close: Vec<&str> = names.iter().copied().filter(|n| n.contains(a.topic.as_str())).take(10).collect();
        let hint = if close.is_empty() { String::new() } else { format!(" (similar: {})", close.join(", ")) };
        return Err(exit::not_found(format!(
            "no publisher or subscriber of `{}` registered within {} ms{hint}; `shoal topic list` shows the topics \
             there are",
            a.topic, a.list.wait_ms
        )));
    }
    ends.sort_by(|x, y| (direction(x), &x.host_name, x.pid).cmp(&(direction(y), &y.host_name, y.pid)));
    let mut out = std::io::stdout().lock();
    if a.list.json {
        for t in ends {
            let mut v = endpoint_json(t);
            v["descriptor"] = descriptors::summary(&t.type_info).json;
            v["latency_us"] = json!({"count": t.latency.count, "mean": t.latency.mean_us, "min": t.latency.min_us,
                                     "max": t.latency.max_us});
            v["connections"] = Value::Array(connections_json(t));
            v["connections_local"] = json!(t.connections_local);
            v["connections_external"] = json!(t.connections_external);
            v["registration_age_ms"] = json!(t.registration_age.as_millis() as u64);
            if let Some(s) = &t.shoal {
                v["bytes"] = json!(s.bytes);
                v["bandwidth_bps"] = json!(s.bandwidth_bps);
            }
            json_line(&mut out, &v)?;
        }
        return Ok(());
    }
    let pubs = ends.iter().filter(|t| t.direction == TopicDirection::Publisher).count();
    writeln!(out, "topic {}: {pubs} publisher(s), {} subscriber(s)", printable(&a.topic), ends.len() - pubs)?;
    if let Some(sum) = snap.topic_summary(&a.topic) {
        let problems: Vec<&str> = sum.problems.iter().map(|p| p.label()).collect();
        writeln!(
            out,
            "  {} Hz, {}/s, {} dropped{}",
            hz(sum.rate_hz),
            bytes(sum.bandwidth_bps),
            sum.drops,
            if problems.is_empty() { String::new() } else { format!("; {}", problems.join(", ")) }
        )?;
    }
    for t in ends {
        let who = match t.direction {
            TopicDirection::Publisher => "publisher",
            TopicDirection::Subscriber => "subscriber",
        };
        writeln!(
            out,
            "\n{who} {} on {} pid {} (unit {}, {})",
            t.entity_id,
            printable(&t.host_name),
            t.pid,
            printable(&t.unit_name),
            printable(&t.process_name)
        )?;
        let ty = if t.type_info.name.is_empty() { "-".into() } else { printable(&t.type_info.name) };
        let enc = if t.type_info.encoding.is_empty() { "-".into() } else { printable(&t.type_info.encoding) };
        writeln!(
            out,
            "  type        {ty} ({enc}){}",
            if t.type_mismatch { "  MISMATCH with a subscriber" } else { "" }
        )?;
        writeln!(out, "  descriptor  {}", printable(&descriptors::summary(&t.type_info).text))?;
        let mut layers = if t.layers.is_empty() { "-".into() } else { t.layers.join(", ") };
        if let Some(kb) = t.ring_page_kb {
            layers.push_str(&format!(" (ring on {})", shoal::monitor::pages_label(kb)));
        }
        writeln!(out, "  layers      {}", printable(&layers))?;
        let verb = if t.direction == TopicDirection::Publisher { "sent" } else { "received" };
        let mut stats = format!(
            "{} {verb}, {} Hz, last {}, {} dropped",
            t.data_clock,
            hz(rate_of(t)),
            bytes(f64::from(t.topic_size.max(0))),
            t.message_drops
        );
        if let Some(s) = &t.shoal {
            stats.push_str(&format!(", {} total, {}/s", bytes(s.bytes as f64), bytes(s.bandwidth_bps)));
        }
        writeln!(out, "  statistics  {stats}")?;
        if let Some(s) = t.shoal.as_ref().filter(|s| s.history_kept > 0 || s.history_resent > 0) {
            writeln!(
                out,
                "  history     {} kept ({}), {} sent again to late joiners ({})",
                s.history_kept,
                bytes(s.history_kept_bytes as f64),
                s.history_resent,
                bytes(s.history_resent_bytes as f64)
            )?;
        }
        if let Some(s) = t.shoal.as_ref().filter(|s| s.history_missed > 0 || s.history_late > 0) {
            writeln!(
                out,
                "  history     missed: {} publishers' history did not come in time ({} kept messages came too late)",
                s.history_missed, s.history_late
            )?;
        }
        writeln!(
            out,
            "  connected   {} on this host, {} on others; registered {:.1} s ago",
            t.connections_local,
            t.connections_external,
            t.registration_age.as_secs_f64()
        )?;
        if let Some(l) = latency_text(t) {
            writeln!(out, "  latency     {l}")?;
        }
        for c in t.shoal.iter().flat_map(|s| &s.connections) {
            let p = |q: f64| c.latency.percentile(q).map_or("-".to_owned(), |ns| format!("{:.1}", ns as f64 / 1000.0));
            let latency = if c.same_host {
                format!("latency p50 {} µs, p99 {} µs", p(0.5), p(0.99))
            } else {
                "latency: clock not shared".to_owned()
            };
            writeln!(
                out,
                "  from {} via {}: {} msgs, {} Hz, {}/s, {} dropped, {latency}",
                c.publisher_id,
                c.via.name(),
                c.messages,
                hz(c.rate_hz()),
                bytes(c.bandwidth_bps()),
                c.drops
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shoal::monitor::{ProcessEntry, ShoalProcessStats, Snapshot};

    use super::process_table;

    #[test]
    fn kernel_drops_announced_near_u64_max_are_summed_saturating() {
        let p = ProcessEntry {
            host_name: "h".into(),
            pid: 1,
            process_name: "/bin/p".into(),
            unit_name: "u".into(),
            command_line: "/bin/p".into(),
            runtime_version: "shoal".into(),
            is_shoal: true,
            is_self: false,
            registration_age: Duration::ZERO,
            state: shoal::ProcessState::new(shoal::Severity::Healthy, shoal::SeverityLevel::Level1, ""),
            shoal: Some(ShoalProcessStats {
                udp_kernel_drops: u64::MAX - 1,
                registration_kernel_drops: 5,
                ..ShoalProcessStats::default()
            }),
        };
        let snap = Snapshot { processes: vec![p], ..Snapshot::default() };
        let mut out = Vec::new();
        process_table(&snap).write(&mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains(&u64::MAX.to_string()), "{text}");
    }
}
