//! `shoal play`: publishes the messages of an MCAP file with their recorded timing and type information.
//!
//! The file is read as a stream (memory: one chunk at a time), so a file without its summary (a recording that was
//! killed) plays as far as it is readable. A chunk that does not decode or fails its CRC is skipped whole and
//! reported; a record whose length runs past the end of the file, or any other break in the record framing, ends the
//! reading there, reported. Nothing of a damaged chunk is published.
//!
//! Type information: a channel written by `shoal record` carries eCAL's (`ecal.type_name`, `ecal.encoding`, the
//! schema data or `ecal.descriptor_hex` as descriptor); any other file's `protobuf` channels are announced as eCAL
//! does protobuf topics (schema name, `proto`, the schema's `FileDescriptorSet`), other channels with their schema
//! name and message encoding.

use std::collections::HashMap;
use std::fs::File;
use std::io::{IsTerminal, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use mcap::records::Record;
use mcap::sans_io::{
    LinearReadEvent, LinearReader, LinearReaderOptions, SummaryReadEvent, SummaryReader, SummaryReaderOptions,
};
use serde_json::json;
use shoal::{Node, Publisher, TypeInfo};

use crate::record::{META_DESCRIPTOR_HEX, META_ENCODING, META_TYPE_NAME};

/// The largest record (in particular chunk, compressed or not) this reader accepts: a length field above it is
/// taken as damage rather than allocated.
pub(crate) const RECORD_LIMIT: usize = 256 << 20;

/// Arguments of `shoal play`.
#[derive(Debug, Args)]
pub(crate) struct PlayArgs {
    /// The MCAP file.
    file: PathBuf,
    /// Speed factor: 2 plays twice as fast, 0.5 at half speed.
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// Play the file again and again until interrupted.
    #[arg(long = "loop")]
    repeat: bool,
    /// Play only these topics (default: all).
    #[arg(long, num_args = 1.., value_delimiter = ',')]
    topics: Vec<String>,
    /// Start this many seconds after the file's first message.
    #[arg(long)]
    start: Option<f64>,
    /// End this many seconds after the file's first message.
    #[arg(long)]
    end: Option<f64>,
    /// Before the first message, wait until every topic has this many matching subscribers (0: do not wait).
    #[arg(long, default_value_t = 1)]
    wait_subs: usize,
    /// Do not wait for subscribers (the same as --wait-subs 0).
    #[arg(long)]
    no_wait: bool,
    /// How long to wait for them, in seconds; then play anyway (and say so).
    #[arg(long, default_value_t = 5.0)]
    wait_timeout: f64,
    /// After the subscribers matched, wait this long (ms) before the first message (an eCAL shared-memory
    /// subscriber attaches to the memfile a few ms after the match).
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
    /// Print a final JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// A part of a file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The reader had read this many bytes of the file when it found the damage (the damage is before).
    pub(crate) read_bytes: u64,
    /// What is wrong, and what was skipped.
    pub(crate) what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (found after reading {} bytes)", self.what, self.read_bytes)
    }
}

/// Reads the records of the MCAP file at `path` from start to end, the records of intact chunks included, and gives
/// each to `on_record` (which returns false to stop). Returns what could not be read; errors only when the file
/// cannot be opened or read.
pub(crate) fn read_records(path: &Path, mut on_record: impl FnMut(Record<'_>) -> bool) -> Result<Vec<Damage>> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = LinearReader::new_with_options(
        LinearReaderOptions::default().with_emit_chunks(true).with_record_length_limit(RECORD_LIMIT),
    );
    let mut read_bytes = 0u64;
    let mut damage = Vec::new();
    while let Some(event) = reader.next_event() {
        match event {
            Ok(LinearReadEvent::ReadRequest(n)) => {
                let got = file.read(reader.insert(n)).with_context(|| format!("cannot read {}", path.display()))?;
                reader.notify_read(got);
                read_bytes += got as u64;
            }
            Ok(LinearReadEvent::Record { opcode, data }) => match mcap::parse_record(opcode, data) {
                Ok(Record::Chunk { header, data }) => match chunk_records(header, &data) {
                    Ok(records) => {
                        for r in records {
                            if !on_record(r) {
                                return Ok(damage);
                            }
                        }
                    }
                    Err(what) => damage.push(Damage { read_bytes, what }),
                },
                Ok(r) => {
                    if !on_record(r) {
                        return Ok(damage);
                    }
                }
                Err(e) => damage.push(Damage {
                    read_bytes,
                    what: format!("a record (opcode {opcode:#04x}) does not parse: {e}; skipped"),
                }),
            },
            Err(e) => {
                let what = match e {
                    mcap::McapError::UnexpectedEof => {
                        "the file ends inside a record or without its footer (truncated, or the recording was killed); \
                         everything before was read"
                            .to_string()
                    }
                    e => format!("the record framing breaks ({e}); nothing after this point can be read"),
                };
                damage.push(Damage { read_bytes, what });
                break;
            }
        }
    }
    Ok(damage)
}

/// Every record of a chunk, or what is wrong with it (nothing of a damaged chunk is returned).
fn chunk_records(header: mcap::records::ChunkHeader, data: &[u8]) -> Result<Vec<Record<'_>>, String> {
    let what = |e: String| {
        format!(
            "a chunk ({} compressed bytes, {} compression, log times {}..{}) is damaged: {e}; its messages are skipped",
            header.compressed_size,
            if header.compression.is_empty() { "no" } else { &header.compression },
            header.message_start_time,
            header.message_end_time
        )
    };
    if header.uncompressed_size > RECORD_LIMIT as u64 {
        return Err(what(format!(
            "its uncompressed size {} is above the limit of {RECORD_LIMIT}",
            header.uncompressed_size
        )));
    }
    let reader = mcap::read::ChunkReader::new(header.clone(), data).map_err(|e| what(e.to_string()))?;
    reader.collect::<Result<Vec<_>, _>>().map_err(|e| what(e.to_string()))
}

/// The summary section of the file, when it has an intact one.
fn read_summary(path: &Path) -> Option<mcap::Summary> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut reader = SummaryReader::new_with_options(
        SummaryReaderOptions::default().with_file_size(len).with_record_length_limit(RECORD_LIMIT),
    );
    while let Some(event) = reader.next_event() {
        match event {
            Ok(SummaryReadEvent::ReadRequest(n)) => {
                let got = file.read(reader.insert(n)).ok()?;
                reader.notify_read(got);
            }
            Ok(SummaryReadEvent::SeekRequest(to)) => {
                let pos = file.seek(to).ok()?;
                reader.notify_seeked(pos);
            }
            Err(e) => {
                tracing::debug!("{}: no usable summary: {e}", path.display());
                return None;
            }
        }
    }
    reader.finish()
}

/// A schema as far as playback needs it.
#[derive(Debug, Clone)]
struct SchemaInfo {
    name: String,
    encoding: String,
    data: Vec<u8>,
}

/// A channel as far as playback needs it.
#[derive(Debug, Clone)]
struct ChannelInfo {
    topic: String,
    schema_id: u16,
    message_encoding: String,
    metadata: std::collections::BTreeMap<String, String>,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// The type information to announce for a channel (see the module documentation).
fn type_info_of(ch: &ChannelInfo, schema: Option<&SchemaInfo>) -> TypeInfo {
    let descriptor = || match schema {
        Some(s) => s.data.clone(),
        None => ch.metadata.get(META_DESCRIPTOR_HEX).and_then(|h| unhex(h)).unwrap_or_default(),
    };
    if let (Some(name), Some(encoding)) = (ch.metadata.get(META_TYPE_NAME), ch.metadata.get(META_ENCODING)) {
        return TypeInfo::new(name.clone(), encoding.clone(), descriptor());
    }
    match schema {
        Some(s) if s.encoding == "protobuf" => TypeInfo::new(s.name.clone(), "proto", s.data.clone()),
        Some(s) => TypeInfo::new(s.name.clone(), ch.message_encoding.clone(), s.data.clone()),
        None => TypeInfo::new(String::new(), ch.message_encoding.clone(), Vec::new()),
    }
}

/// Channels and schemas known so far (from the summary, then from the records as they come).
#[derive(Debug, Default)]
struct Catalog {
    schemas: HashMap<u16, SchemaInfo>,
    channels: HashMap<u16, ChannelInfo>,
    first_log_time: Option<u64>,
}

impl Catalog {
    fn from_summary(s: &mcap::Summary) -> Catalog {
        let mut c = Catalog::default();
        for (id, sc) in &s.schemas {
            c.schemas.insert(
                *id,
                SchemaInfo { name: sc.name.clone(), encoding: sc.encoding.clone(), data: sc.data.to_vec() },
            );
        }
        for (id, ch) in &s.channels {
            c.channels.insert(
                *id,
                ChannelInfo {
                    topic: ch.topic.clone(),
                    schema_id: ch.schema.as_ref().map_or(0, |s| s.id),
                    message_encoding: ch.message_encoding.clone(),
                    metadata: ch.metadata.clone(),
                },
            );
        }
        c.first_log_time = s.stats.as_ref().filter(|st| st.message_count > 0).map(|st| st.message_start_time);
        c
    }

    /// Takes in a schema or channel record; returns the channel id of a channel record.
    fn learn(&mut self, r: &Record<'_>) -> Option<u16> {
        match r {
            Record::Schema { header, data } => {
                self.schemas.insert(
                    header.id,
                    SchemaInfo { name: header.name.clone(), encoding: header.encoding.clone(), data: data.to_vec() },
                );
                None
            }
            Record::Channel(ch) => {
                self.channels.insert(
                    ch.id,
                    ChannelInfo {
                        topic: ch.topic.clone(),
                        schema_id: ch.schema_id,
                        message_encoding: ch.message_encoding.clone(),
                        metadata: ch.metadata.clone(),
                    },
                );
                Some(ch.id)
            }
            _ => None,
        }
    }

    fn type_info(&self, channel: u16) -> Option<(String, TypeInfo)> {
        let ch = self.channels.get(&channel)?;
        let schema = if ch.schema_id == 0 { None } else { self.schemas.get(&ch.schema_id) };
        Some((ch.topic.clone(), type_info_of(ch, schema)))
    }
}

/// One publisher of the playback and its counters.
struct Played {
    topic: String,
    publisher: Publisher,
    sent: u64,
    send_errors: u64,
}

/// The publishers, one per topic and type information.
struct Publishers<'a> {
    node: &'a Node,
    filter: &'a [String],
    list: Vec<Played>,
    by_key: HashMap<(String, TypeInfo), usize>,
    by_channel: HashMap<u16, Option<usize>>,
}

impl Publishers<'_> {
    /// The publisher of `channel` (created on first use), or None when the channel is filtered out or unknown.
    fn for_channel(&mut self, catalog: &Catalog, channel: u16) -> Result<Option<usize>> {
        if let Some(p) = self.by_channel.get(&channel) {
            return Ok(*p);
        }
        let Some((topic, ti)) = catalog.type_info(channel) else { return Ok(None) };
        let p = if !self.filter.is_empty() && !self.filter.contains(&topic) {
            None
        } else if let Some(&i) = self.by_key.get(&(topic.clone(), ti.clone())) {
            Some(i)
        } else {
            let publisher = self
                .node
                .publisher(&topic)
                .type_info(ti.clone())
                .create()
                .with_context(|| format!("cannot create the publisher of {topic}"))?;
            self.list.push(Played { topic: topic.clone(), publisher, sent: 0, send_errors: 0 });
            self.by_key.insert((topic, ti), self.list.len() - 1);
            Some(self.list.len() - 1)
        };
        self.by_channel.insert(channel, p);
        Ok(p)
    }
}

/// Sleeps until `due`, waking every 100 ms to notice `stop`; false when stopped.
fn sleep_until(due: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}

/// Runs `shoal play`.
pub(crate) fn run(a: PlayArgs) -> Result<()> {
    if !(a.rate.is_finite() && a.rate > 0.0) {
        return Err(crate::exit::usage("--rate must be a positive number (1 = recorded speed)"));
    }
    for (name, v) in [("--start", a.start), ("--end", a.end)] {
        if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
            return Err(crate::exit::usage(format!("{name} must be a number of seconds >= 0")));
        }
    }
    if let (Some(s), Some(e)) = (a.start, a.end)
        && s >= e
    {
        return Err(crate::exit::usage(format!("--start ({s} s) must be before --end ({e} s)")));
    }
    if !a.file.is_file() {
        return Err(crate::exit::not_found(format!("{} is not a file", a.file.display())));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))
            .context("cannot install the signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install the signal handler")?;
    }

    // What the file contains: from its summary, or (a file without one) from a first pass over it.
    let summary = read_summary(&a.file);
    let had_summary = summary.is_some();
    let mut catalog = match &summary {
        Some(s) => Catalog::from_summary(s),
        None => {
            eprintln!("shoal play: {} has no readable summary; reading it once to find its channels", a.file.display());
            let mut c = Catalog::default();
            read_records(&a.file, |r| {
                c.learn(&r);
                if let Record::Message { header, .. } = &r {
                    c.first_log_time = Some(c.first_log_time.map_or(header.log_time, |t| t.min(header.log_time)));
                }
                true
            })?;
            c
        }
    };
    drop(summary);

    let node = Node::init("shoal_play").context("starting the shoal node (check ecal.ini and /dev/shm)")?;
    let mut pubs = Publishers {
        node: &node,
        filter: &a.topics,
        list: Vec::new(),
        by_key: HashMap::new(),
        by_channel: HashMap::new(),
    };
    let mut ids: Vec<u16> = catalog.channels.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        pubs.for_channel(&catalog, id)?;
    }
    for t in &a.topics {
        if !pubs.list.iter().any(|p| &p.topic == t) {
            eprintln!("shoal play: topic {t} is not in {}", a.file.display());
        }
    }
    let wait_subs = if a.no_wait { 0 } else { a.wait_subs };
    if wait_subs > 0 && !pubs.list.is_empty() {
        let deadline = Instant::now() + Duration::from_secs_f64(a.wait_timeout.max(0.0));
        for p in &pubs.list {
            if p.publisher.wait_for_subscribers(wait_subs, deadline.saturating_duration_since(Instant::now())).is_err()
            {
                eprintln!(
                    "shoal play: {} has {} of {wait_subs} subscribers after {:.1} s; playing anyway",
                    p.topic,
                    p.publisher.subscriber_count(),
                    a.wait_timeout
                );
            }
        }
        if pubs.list.iter().any(|p| p.publisher.subscriber_count() > 0) {
            std::thread::sleep(Duration::from_millis(a.settle_ms));
        }
    }

    let first = catalog.first_log_time.unwrap_or(0);
    let window_start = first.saturating_add(a.start.map_or(0, |s| (s * 1e9) as u64));
    let window_end = a.end.map_or(u64::MAX, |e| first.saturating_add((e * 1e9) as u64));
    let terminal = std::io::stderr().is_terminal();
    let mut sends: Option<(Instant, Instant)> = None;
    let mut damage: Vec<Damage> = Vec::new();
    let (mut published, mut unknown_channel, mut passes) = (0u64, 0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut fatal: Option<anyhow::Error> = None;
    loop {
        passes += 1;
        let mut origin: Option<(u64, Instant)> = None;
        let found = read_records(&a.file, |r| {
            if let Some(id) = catalog.learn(&r)
                && let Err(e) = pubs.for_channel(&catalog, id)
            {
                fatal = Some(e);
                return false;
            }
            let Record::Message { header, data } = r else { return true };
            if header.log_time < window_start || header.log_time > window_end {
                return true;
            }
            let p = match pubs.for_channel(&catalog, header.channel_id) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    if !catalog.channels.contains_key(&header.channel_id) {
                        unknown_channel += 1;
                    }
                    return true;
                }
                Err(e) => {
                    fatal = Some(e);
                    return false;
                }
            };
            let (log0, wall0) = *origin.get_or_insert((header.log_time, Instant::now()));
            let offset = Duration::from_nanos(header.log_time.saturating_sub(log0)).div_f64(a.rate);
            if !sleep_until(wall0 + offset, &stop) {
                return false;
            }
            let played = &mut pubs.list[p];
            let result = played.publisher.send(&data);
            let now = Instant::now();
            sends = Some((sends.map_or(now, |(first, _)| first), now));
            match result {
                Ok(()) => {
                    played.sent += 1;
                    published += 1;
                }
                Err(e) => {
                    if played.send_errors == 0 {
                        eprintln!("shoal play: {}: cannot send: {e}", played.topic);
                    }
                    played.send_errors += 1;
                }
            }
            if terminal && last_progress.elapsed() >= Duration::from_millis(250) {
                last_progress = Instant::now();
                let at = header.log_time.saturating_sub(first) as f64 / 1e9;
                eprint!("\r\x1b[Kplaying: {published} messages  at {at:.1} s of the recording  pass {passes}");
            }
            true
        })?;
        if let Some(e) = fatal.take() {
            return Err(e);
        }
        if passes == 1 {
            damage = found;
        }
        if !a.repeat || stop.load(Ordering::Relaxed) || published == 0 {
            break;
        }
    }
    if terminal {
        eprintln!();
    }
    // Let the last messages reach readers that are not polling right now before the publishers go away.
    std::thread::sleep(Duration::from_millis(200));
    // From the first send to the last: the recorded span divided by --rate (times the passes).
    let elapsed = sends.map_or(0.0, |(first, last)| (last - first).as_secs_f64());
    let send_errors: u64 = pubs.list.iter().map(|p| p.send_errors).sum();
    eprintln!(
        "shoal play: {published} messages on {} topics, {elapsed:.2} s from the first to the last ({passes} pass{}){}",
        pubs.list.len(),
        if passes == 1 { "" } else { "es" },
        if send_errors > 0 { format!(", {send_errors} send errors") } else { String::new() }
    );
    for d in &damage {
        eprintln!("shoal play: {}: {d}", a.file.display());
    }
    if unknown_channel > 0 {
        eprintln!("shoal play: {unknown_channel} messages skipped: their channel record was in a damaged part");
    }
    if a.json {
        let topics: Vec<_> = pubs
            .list
            .iter()
            .map(|p| {
                json!({"topic": p.topic, "type_name": p.publisher.type_info().name,
                            "encoding": p.publisher.type_info().encoding, "sent": p.sent,
                            "send_errors": p.send_errors})
            })
            .collect();
        let damage_json: Vec<_> = damage.iter().map(|d| json!({"read_bytes": d.read_bytes, "what": d.what})).collect();
        shoal_tools::emit(&json!({"event": "summary", "published": published, "passes": passes, "seconds": elapsed,
                                  "had_summary": had_summary, "unknown_channel": unknown_channel,
                                  "damage": damage_json, "topics": topics}));
    }
    if !damage.is_empty() || unknown_channel > 0 {
        bail!("{} is damaged: the readable part was played, the parts listed above were not", a.file.display());
    }
    Ok(())
}

/// Arguments of `shoal info FILE.mcap`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// The MCAP file.
    file: PathBuf,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs `shoal info`: what a file holds (from its summary, or by reading it through when it has none), its
/// recording metadata and what of it cannot be read.
pub(crate) fn info(a: InfoArgs) -> Result<()> {
    let len = std::fs::metadata(&a.file).with_context(|| format!("cannot open {}", a.file.display()))?.len();
    let summary = read_summary(&a.file);
    let mut catalog = summary.as_ref().map(Catalog::from_summary).unwrap_or_default();
    let mut counts: HashMap<u16, u64> = summary
        .as_ref()
        .and_then(|s| s.stats.as_ref())
        .map(|st| st.channel_message_counts.clone().into_iter().collect())
        .unwrap_or_default();
    let (mut start, mut end) = summary
        .as_ref()
        .and_then(|s| s.stats.as_ref())
        .filter(|st| st.message_count > 0)
        .map_or((None, None), |st| (Some(st.message_start_time), Some(st.message_end_time)));
    // The metadata records (and, without a summary, the messages) come from reading the file through.
    let mut metadata: Vec<(String, std::collections::BTreeMap<String, String>)> = Vec::new();
    let have_counts = summary.as_ref().is_some_and(|s| s.stats.is_some());
    let damage = read_records(&a.file, |r| {
        catalog.learn(&r);
        match r {
            Record::Message { header, .. } if !have_counts => {
                *counts.entry(header.channel_id).or_default() += 1;
                start = Some(start.map_or(header.log_time, |t: u64| t.min(header.log_time)));
                end = Some(end.map_or(header.log_time, |t: u64| t.max(header.log_time)));
            }
            Record::Metadata(m) => metadata.push((m.name, m.metadata)),
            _ => {}
        }
        true
    })?;
    let mut ids: Vec<u16> = catalog.channels.keys().copied().collect();
    ids.sort_unstable();
    let channels: Vec<serde_json::Value> = ids
        .iter()
        .filter_map(|id| {
            let (topic, ti) = catalog.type_info(*id)?;
            let ch = &catalog.channels[id];
            let schema = catalog.schemas.get(&ch.schema_id);
            Some(json!({"id": id, "topic": topic, "messages": counts.get(id).copied().unwrap_or(0),
                        "message_encoding": ch.message_encoding, "schema_name": schema.map(|s| s.name.clone()),
                        "schema_encoding": schema.map(|s| s.encoding.clone()), "type_name": ti.name,
                        "encoding": ti.encoding, "descriptor_len": ti.descriptor.len()}))
        })
        .collect();
    let messages: u64 = counts.values().sum();
    let seconds = match (start, end) {
        (Some(s), Some(e)) => e.saturating_sub(s) as f64 / 1e9,
        _ => 0.0,
    };
    if a.json {
        let meta: Vec<_> = metadata.iter().map(|(n, m)| json!({"name": n, "metadata": m})).collect();
        let damage_json: Vec<_> = damage.iter().map(|d| json!({"read_bytes": d.read_bytes, "what": d.what})).collect();
        shoal_tools::emit(
            &json!({"file": a.file.display().to_string(), "bytes": len, "had_summary": summary.is_some(),
                                  "messages": messages, "start_ns": start, "end_ns": end, "seconds": seconds,
                                  "channels": channels, "metadata": meta, "damage": damage_json}),
        );
    } else {
        println!(
            "file:      {} ({len} bytes{})",
            a.file.display(),
            if summary.is_some() { "" } else { ", no summary" }
        );
        let counted = if have_counts { "as the summary counts them" } else { "readable" };
        println!("messages:  {messages} in {seconds:.3} s ({counted})");
        println!("channels:  {}", channels.len());
        for c in &channels {
            println!(
                "  {:<40} {:>9} msgs  {} ({}), schema {}",
                c["topic"].as_str().unwrap_or_default(),
                c["messages"],
                c["type_name"].as_str().unwrap_or_default(),
                c["encoding"].as_str().unwrap_or_default(),
                c["schema_name"].as_str().map_or("none".to_string(), |n| format!(
                    "{n} ({})",
                    c["schema_encoding"].as_str().unwrap_or_default()
                ))
            );
        }
        for (name, m) in &metadata {
            println!("metadata {name}:");
            for (k, v) in m {
                println!("  {k} = {v}");
            }
        }
        for d in &damage {
            println!("damaged:   {d}");
        }
    }
    if !damage.is_empty() {
        bail!("{} is damaged: the parts listed above cannot be read", a.file.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{ChannelInfo, SchemaInfo, type_info_of, unhex};
    use crate::record::hex;

    fn channel(encoding: &str, meta: &[(&str, &str)]) -> ChannelInfo {
        ChannelInfo {
            topic: "t".into(),
            schema_id: 0,
            message_encoding: encoding.into(),
            metadata: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn recorded_type_information_comes_back_unchanged() {
        let d = [0u8, 1, 0xab, 0xff];
        assert_eq!(unhex(&hex(&d)).as_deref(), Some(&d[..]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        let ch = channel(
            "flatb",
            &[("ecal.type_name", "demo.Table"), ("ecal.encoding", "flatb"), ("ecal.descriptor_hex", "00ab")],
        );
        let ti = type_info_of(&ch, None);
        assert_eq!(
            (ti.name.as_str(), ti.encoding.as_str(), ti.descriptor.as_slice()),
            ("demo.Table", "flatb", &[0, 0xab][..])
        );
        // Another recorder's protobuf channel: announced as eCAL announces protobuf topics.
        let schema = SchemaInfo { name: "pkg.Msg".into(), encoding: "protobuf".into(), data: vec![1, 2] };
        let ti = type_info_of(&channel("protobuf", &[]), Some(&schema));
        assert_eq!(
            (ti.name.as_str(), ti.encoding.as_str(), ti.descriptor.as_slice()),
            ("pkg.Msg", "proto", &[1, 2][..])
        );
        let ti = type_info_of(&channel("json", &[]), None);
        assert_eq!((ti.name.as_str(), ti.encoding.as_str()), ("", "json"));
    }
}
