//! `shoal play`: publishes the messages of an MCAP file with their recorded timing and type information.
//!
//! The file is read as a stream, one record at a time ([`shoal_tools::mcap_read`]), so a file without its summary (a
//! recording that was killed) plays as far as it is readable. A chunk that does not decode, fails its CRC or
//! decompresses to more than it declares is skipped whole and reported; so is a record or chunk above
//! `--max-record-mb`, and reading goes on after it; a record whose length runs past the end of the file ends the
//! reading there, reported. Nothing of a damaged chunk is published. Channels beyond `--max-channels`, and schemas
//! beyond `--max-schema-mb` (with the channels that use them), are not played: their messages are counted and
//! reported. Memory: about twice `--max-record-mb` for reading, plus `--max-schema-mb`, whatever the file declares.
//!
//! Type information: a channel written by `shoal record` carries eCAL's (`ecal.type_name`, `ecal.encoding`, the
//! schema data or `ecal.descriptor_hex` as descriptor); any other file's `protobuf` channels are announced as eCAL
//! does protobuf topics (schema name, `proto`, the schema's `FileDescriptorSet`), other channels with their schema
//! name and message encoding.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;
use shoal::monitor::printable;
use shoal::{Node, Publisher, TypeInfo};
use shoal_tools::mcap_read::{self, Catalog, ChannelInfo, Damages, Limits, Rec, SchemaInfo, Skip};

use crate::record::{META_DESCRIPTOR_HEX, META_ENCODING, META_TYPE_NAME};

/// The limits of reading a file, shared by `shoal play` and `shoal info`.
#[derive(Debug, Args)]
pub(crate) struct ReadLimitArgs {
    /// The largest record read, in MiB: a message, a schema, a chunk (compressed, and the uncompressed size it
    /// declares). A larger one is skipped and reported; reading needs about twice this in memory.
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_RECORD_MB, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_record_mb: u64,
    /// Memory for the schemas and channel definitions kept, in MiB. Schemas beyond it are not kept, and the channels
    /// that use them are skipped (reported, their messages counted).
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_SCHEMA_MB, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_schema_mb: u64,
}

impl ReadLimitArgs {
    fn limits(&self, max_channels: usize) -> Limits {
        Limits {
            max_record: self.max_record_mb << 20,
            max_channels,
            max_catalog_bytes: usize::try_from(self.max_schema_mb << 20).unwrap_or(usize::MAX),
            max_metadata_bytes: Limits::MAX_METADATA_BYTES,
        }
    }
}

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
    /// Channels played at most: each is a publisher with its own shared-memory ring (about 1.3 MB with the default
    /// ring). Channels beyond are skipped and reported, their messages counted.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_channels: u64,
    #[command(flatten)]
    limits: ReadLimitArgs,
    /// Print a final JSON summary on stdout.
    #[arg(long)]
    json: bool,
}

/// Reads the MCAP file at `path` from start to end within `limits` ([`mcap_read::read_records`]).
fn read_records(path: &Path, limits: &Limits, on_record: impl FnMut(Rec<'_>) -> bool) -> Result<Damages> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    mcap_read::read_records(BufReader::with_capacity(1 << 16, file), limits, on_record)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// The summary section of the file at `path` when it has an intact one: its catalog and statistics.
fn read_summary(path: &Path, limits: &Limits, filter: &[String]) -> Option<(Catalog, Option<mcap_read::SummaryStats>)> {
    let file = File::open(path).ok()?;
    match mcap_read::read_summary(BufReader::with_capacity(1 << 16, file), limits, filter) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("{}: no usable summary: {e}", path.display());
            None
        }
    }
}

/// Prints the damaged and skipped parts of `file` on stderr, prefixed with `prefix`.
fn print_damage(prefix: &str, file: &Path, d: &Damages) {
    for x in &d.list {
        eprintln!("{prefix}{}: {}", file.display(), printable(&x.to_string()));
    }
    if d.unlisted > 0 {
        eprintln!("{prefix}{}: {} more damaged or skipped parts (not listed)", file.display(), d.unlisted);
    }
}

/// The channels a catalog did not keep, one sentence per reason (with the messages skipped on them, when known).
fn skipped_text(catalog: &Catalog, limits: &Limits, messages: &BTreeMap<Skip, u64>) -> Vec<String> {
    let mut out = Vec::new();
    for (skip, n) in catalog.skipped_counts() {
        let msgs = messages.get(&skip).copied().unwrap_or(0);
        let (why, raise) = match skip {
            Skip::Filtered => continue,
            Skip::ChannelLimit => (format!("beyond --max-channels ({})", limits.max_channels), "--max-channels"),
            Skip::ByteLimit => (
                format!("beyond --max-schema-mb ({} MiB of channel definitions)", limits.max_catalog_bytes >> 20),
                "--max-schema-mb",
            ),
            Skip::SchemaSkipped => ("whose schema was beyond --max-schema-mb".to_string(), "--max-schema-mb"),
        };
        out.push(format!("{n} channels {why} were skipped ({msgs} messages on them); a larger {raise} keeps them"));
    }
    if catalog.skipped_schemas() > 0 {
        out.push(format!(
            "{} schemas ({} bytes) beyond --max-schema-mb ({} MiB) were not kept",
            catalog.skipped_schemas(),
            catalog.skipped_schema_bytes,
            limits.max_catalog_bytes >> 20
        ));
    }
    out
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

/// The type information of channel `id` of `catalog`: None when the channel is not known, or uses a schema that
/// was not kept.
fn channel_type(catalog: &Catalog, id: u16) -> Option<(String, TypeInfo)> {
    let ch = catalog.channels.get(&id)?;
    let schema = if ch.schema_id == 0 { None } else { catalog.schemas.get(&ch.schema_id) };
    Some((ch.topic.clone(), type_info_of(ch, schema)))
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
    list: Vec<Played>,
    by_key: HashMap<(String, TypeInfo), usize>,
    by_channel: HashMap<u16, Option<usize>>,
}

impl Publishers<'_> {
    /// The publisher of `channel` (created on first use), or None when the channel is not in the catalog (unknown,
    /// filtered out or skipped).
    fn for_channel(&mut self, catalog: &Catalog, channel: u16) -> Result<Option<usize>> {
        if let Some(p) = self.by_channel.get(&channel) {
            return Ok(*p);
        }
        let Some((topic, ti)) = channel_type(catalog, channel) else { return Ok(None) };
        let p = if let Some(&i) = self.by_key.get(&(topic.clone(), ti.clone())) {
            i
        } else {
            let publisher = self
                .node
                .publisher(&topic)
                .type_info(ti.clone())
                .create()
                .with_context(|| format!("cannot create the publisher of {topic}"))?;
            self.list.push(Played { topic: topic.clone(), publisher, sent: 0, send_errors: 0 });
            self.by_key.insert((topic, ti), self.list.len() - 1);
            self.list.len() - 1
        };
        self.by_channel.insert(channel, Some(p));
        Ok(Some(p))
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

/// Runs `shoal play`: checks the arguments, finds the file's channels, creates their publishers, waits for
/// subscribers, plays the file (once, or again and again with `--repeat`) and prints the summary.
pub(crate) fn run(a: PlayArgs) -> Result<()> {
    check_args(&a)?;
    let limits = a.limits.limits(usize::try_from(a.max_channels).unwrap_or(usize::MAX));
    let stop = crate::common::stop_on_signals()?;
    let (mut catalog, first_log_time, had_summary) = catalog_of(&a, &limits)?;

    let node = Node::init("shoal_play").context("starting the shoal node (check ecal.ini and /dev/shm)")?;
    let mut pubs = Publishers { node: &node, list: Vec::new(), by_key: HashMap::new(), by_channel: HashMap::new() };
    let mut ids: Vec<u16> = catalog.channels.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        pubs.for_channel(&catalog, id)?;
    }
    for t in &a.topics {
        if !pubs.list.iter().any(|p| &p.topic == t) {
            eprintln!("shoal play: topic {} is not in {}", printable(t), a.file.display());
        }
    }
    wait_for_subscribers(&a, &pubs);

    let first = first_log_time.unwrap_or(0);
    let pace = Pace {
        first,
        window_start: first.saturating_add(a.start.map_or(0, |s| (s * 1e9) as u64)),
        window_end: a.end.map_or(u64::MAX, |e| first.saturating_add((e * 1e9) as u64)),
        rate: a.rate,
    };
    let mut playback = Playback::new();
    loop {
        playback.passes += 1;
        let found = playback.pass(&a.file, &limits, &mut catalog, &mut pubs, &pace, &stop)?;
        if playback.passes == 1 {
            playback.damage = found;
        }
        if !a.repeat || stop.load(Ordering::Relaxed) || playback.published == 0 {
            break;
        }
    }
    if playback.terminal {
        eprintln!();
    }
    // Let the last messages reach readers that are not polling right now before the publishers go away.
    std::thread::sleep(Duration::from_millis(200));
    report(&a, &limits, &catalog, &pubs, &playback, had_summary)
}

/// A usage error for arguments that cannot be played, a not-found error for a file that is not there.
fn check_args(a: &PlayArgs) -> Result<()> {
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
    Ok(())
}

/// What the file contains, the log time of its first message, and whether it came from the file's summary: from
/// its summary, or (a file without one) from a first pass over it.
fn catalog_of(a: &PlayArgs, limits: &Limits) -> Result<(Catalog, Option<u64>, bool)> {
    if let Some((c, stats)) = read_summary(&a.file, limits, &a.topics) {
        return Ok((c, stats.filter(|st| st.message_count > 0).map(|st| st.message_start_time), true));
    }
    eprintln!("shoal play: {} has no readable summary; reading it once to find its channels", a.file.display());
    let mut c = Catalog::new(limits, &a.topics);
    let mut first: Option<u64> = None;
    read_records(&a.file, limits, |r| {
        c.learn(&r);
        if let Rec::Message { log_time, .. } = r {
            first = Some(first.map_or(log_time, |t| t.min(log_time)));
        }
        true
    })?;
    Ok((c, first, false))
}

/// Waits up to `--wait-timeout` for `--wait-subs` subscribers on every publisher (not with `--no-wait`), saying
/// which have fewer; then, if any has a subscriber, `--settle-ms` for the connections to settle.
fn wait_for_subscribers(a: &PlayArgs, pubs: &Publishers<'_>) {
    let wait_subs = if a.no_wait { 0 } else { a.wait_subs };
    if wait_subs == 0 || pubs.list.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.wait_timeout.max(0.0));
    for p in &pubs.list {
        if p.publisher.wait_for_subscribers(wait_subs, deadline.saturating_duration_since(Instant::now())).is_err() {
            eprintln!(
                "shoal play: {} has {} of {wait_subs} subscribers after {:.1} s; playing anyway",
                printable(&p.topic),
                p.publisher.subscriber_count(),
                a.wait_timeout
            );
        }
    }
    if pubs.list.iter().any(|p| p.publisher.subscriber_count() > 0) {
        std::thread::sleep(Duration::from_millis(a.settle_ms));
    }
}

/// The part of the recording played and how fast: log times (ns) of its first message and of the window
/// (`--start`, `--end`), and `--rate`.
struct Pace {
    first: u64,
    window_start: u64,
    window_end: u64,
    rate: f64,
}

/// A playback's progress and counters, for the progress line and the summary.
struct Playback {
    published: u64,
    /// Messages whose channel record was in a damaged part (first pass only).
    unknown_channel: u64,
    passes: u64,
    /// Messages not played because their channel was skipped (first pass only), by reason.
    skipped_messages: BTreeMap<Skip, u64>,
    /// The first send and the last.
    sends: Option<(Instant, Instant)>,
    /// The damaged parts the first pass found.
    damage: Damages,
    /// Whether stderr is a terminal (the progress line is shown), and when the line was last rewritten.
    terminal: bool,
    last_progress: Instant,
}

impl Playback {
    fn new() -> Playback {
        Playback {
            published: 0,
            unknown_channel: 0,
            passes: 0,
            skipped_messages: BTreeMap::new(),
            sends: None,
            damage: Damages::default(),
            terminal: std::io::stderr().is_terminal(),
            last_progress: Instant::now(),
        }
    }

    /// One pass over the file: publishes each message in the window when its time comes (relative to the pass's
    /// first message, divided by `--rate`), learning channels as they come. Ends early when `stop` is set; returns
    /// the damaged parts found, or the first error creating a publisher.
    fn pass(
        &mut self,
        file: &Path,
        limits: &Limits,
        catalog: &mut Catalog,
        pubs: &mut Publishers<'_>,
        pace: &Pace,
        stop: &AtomicBool,
    ) -> Result<Damages> {
        let mut origin: Option<(u64, Instant)> = None;
        let mut fatal: Option<anyhow::Error> = None;
        let found = read_records(file, limits, |r| {
            if let Some(id) = catalog.learn(&r)
                && let Err(e) = pubs.for_channel(catalog, id)
            {
                fatal = Some(e);
                return false;
            }
            let Rec::Message { channel_id, log_time, data, .. } = r else { return true };
            if log_time < pace.window_start || log_time > pace.window_end {
                return true;
            }
            let p = match pubs.for_channel(catalog, channel_id) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    if self.passes == 1 {
                        match catalog.skipped(channel_id) {
                            Some(s) => *self.skipped_messages.entry(s).or_default() += 1,
                            None => self.unknown_channel += 1,
                        }
                    }
                    return true;
                }
                Err(e) => {
                    fatal = Some(e);
                    return false;
                }
            };
            let (log0, wall0) = *origin.get_or_insert((log_time, Instant::now()));
            let offset = Duration::from_nanos(log_time.saturating_sub(log0)).div_f64(pace.rate);
            if !sleep_until(wall0 + offset, stop) {
                return false;
            }
            self.send(&mut pubs.list[p], data);
            self.show_progress(log_time.saturating_sub(pace.first));
            true
        })?;
        match fatal {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    /// Sends `data` on `played`, counting it; says the first send error of a publisher and counts every one.
    fn send(&mut self, played: &mut Played, data: &[u8]) {
        let result = played.publisher.send(data);
        let now = Instant::now();
        self.sends = Some((self.sends.map_or(now, |(first, _)| first), now));
        match result {
            Ok(()) => {
                played.sent += 1;
                self.published += 1;
            }
            Err(e) => {
                if played.send_errors == 0 {
                    eprintln!("shoal play: {}: cannot send: {e}", printable(&played.topic));
                }
                played.send_errors += 1;
            }
        }
    }

    /// On a terminal, rewrites the progress line every 250 ms; `at_ns`: where the playback is in the recording.
    fn show_progress(&mut self, at_ns: u64) {
        if self.terminal && self.last_progress.elapsed() >= Duration::from_millis(250) {
            self.last_progress = Instant::now();
            let at = at_ns as f64 / 1e9;
            let (published, passes) = (self.published, self.passes);
            eprint!("\r\x1b[Kplaying: {published} messages  at {at:.1} s of the recording  pass {passes}");
        }
    }
}

/// Prints the summary on stderr (and with `--json` as a JSON line on stdout); an error when part of the file was
/// not played (damaged, or beyond the limits).
fn report(
    a: &PlayArgs,
    limits: &Limits,
    catalog: &Catalog,
    pubs: &Publishers<'_>,
    pb: &Playback,
    had_summary: bool,
) -> Result<()> {
    let (published, passes, unknown_channel, damage) = (pb.published, pb.passes, pb.unknown_channel, &pb.damage);
    // From the first send to the last: the recorded span divided by --rate (times the passes).
    let elapsed = pb.sends.map_or(0.0, |(first, last)| (last - first).as_secs_f64());
    let send_errors: u64 = pubs.list.iter().map(|p| p.send_errors).sum();
    eprintln!(
        "shoal play: {published} messages on {} topics, {elapsed:.2} s from the first to the last ({passes} pass{}){}",
        pubs.list.len(),
        if passes == 1 { "" } else { "es" },
        if send_errors > 0 { format!(", {send_errors} send errors") } else { String::new() }
    );
    print_damage("shoal play: ", &a.file, damage);
    if unknown_channel > 0 {
        eprintln!("shoal play: {unknown_channel} messages skipped: their channel record was in a damaged part");
    }
    let skipped = skipped_text(catalog, limits, &pb.skipped_messages);
    for s in &skipped {
        eprintln!("shoal play: {}: {s}", a.file.display());
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
        shoal_tools::emit(&json!({"event": "summary", "published": published, "passes": passes, "seconds": elapsed,
                                  "had_summary": had_summary, "unknown_channel": unknown_channel,
                                  "damage": damage_json(damage), "skipped": skipped_json(catalog, &pb.skipped_messages),
                                  "topics": topics, "peak_rss_kb": crate::perf::peak_rss_kb()}));
    }
    let channels_skipped = catalog.skipped_counts().iter().any(|(s, n)| *s != Skip::Filtered && *n > 0);
    if !damage.is_empty() || unknown_channel > 0 || channels_skipped {
        bail!(
            "{} was played in part: the parts listed above were damaged or beyond the limits, and were not played",
            a.file.display()
        );
    }
    Ok(())
}

/// The damaged parts as JSON: `[{read_bytes, what}]`, then `{"unlisted": n}` when some were only counted.
fn damage_json(d: &Damages) -> Vec<serde_json::Value> {
    let mut v: Vec<_> = d.list.iter().map(|x| json!({"read_bytes": x.read_bytes, "what": x.what})).collect();
    if d.unlisted > 0 {
        v.push(json!({"unlisted": d.unlisted}));
    }
    v
}

/// The channels and schemas a catalog did not keep, as JSON (`messages`: those skipped on them, by reason).
fn skipped_json(catalog: &Catalog, messages: &BTreeMap<Skip, u64>) -> serde_json::Value {
    let counts = catalog.skipped_counts();
    let n = |s: Skip| counts.get(&s).copied().unwrap_or(0);
    let m = |s: Skip| messages.get(&s).copied().unwrap_or(0);
    json!({"channels_over_max_channels": n(Skip::ChannelLimit), "channels_over_max_schema_mb": n(Skip::ByteLimit),
           "channels_of_skipped_schemas": n(Skip::SchemaSkipped), "schemas": catalog.skipped_schemas(),
           "schema_bytes": catalog.skipped_schema_bytes,
           "messages": m(Skip::ChannelLimit) + m(Skip::ByteLimit) + m(Skip::SchemaSkipped)})
}

/// Arguments of `shoal info FILE.mcap`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// The MCAP file.
    file: PathBuf,
    /// Channels listed at most; channels beyond are counted (with their messages).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_channels: u64,
    #[command(flatten)]
    limits: ReadLimitArgs,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs `shoal info`: what a file holds (from its summary, or by reading it through when it has none), its
/// recording metadata and what of it cannot be read. Metadata records beyond 16 MiB in all are counted, not kept.
pub(crate) fn info(a: InfoArgs) -> Result<()> {
    let len = std::fs::metadata(&a.file).with_context(|| format!("cannot open {}", a.file.display()))?.len();
    let limits = a.limits.limits(usize::try_from(a.max_channels).unwrap_or(usize::MAX));
    let summary = read_summary(&a.file, &limits, &[]);
    let had_summary = summary.is_some();
    let (mut catalog, stats) = summary.unwrap_or_else(|| (Catalog::new(&limits, &[]), None));
    let have_counts = stats.is_some();
    let (mut start, mut end) = stats
        .as_ref()
        .filter(|st| st.message_count > 0)
        .map_or((None, None), |st| (Some(st.message_start_time), Some(st.message_end_time)));
    let mut counts: HashMap<u16, u64> = stats.map(|st| st.channel_message_counts).unwrap_or_default();
    // The metadata records (and, without a summary, the messages) come from reading the file through.
    let mut metadata: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let (mut metadata_bytes, mut metadata_unkept, mut metadata_unkept_bytes) = (0usize, 0u64, 0u64);
    let damage = read_records(&a.file, &limits, |r| {
        catalog.learn(&r);
        match r {
            Rec::Message { channel_id, log_time, .. } if !have_counts => {
                let n = counts.entry(channel_id).or_default();
                *n = n.saturating_add(1);
                start = Some(start.map_or(log_time, |t: u64| t.min(log_time)));
                end = Some(end.map_or(log_time, |t: u64| t.max(log_time)));
            }
            Rec::Metadata { name, metadata: m } => {
                let size = name.len() + m.byte_len() + m.len() * 64;
                if metadata_bytes.saturating_add(size) <= limits.max_metadata_bytes {
                    metadata_bytes += size;
                    metadata.push((name.to_owned(), m.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()));
                } else {
                    metadata_unkept += 1;
                    metadata_unkept_bytes = metadata_unkept_bytes.saturating_add(size as u64);
                }
            }
            _ => {}
        }
        true
    })?;
    let mut ids: Vec<u16> = catalog.channels.keys().copied().collect();
    ids.sort_unstable();
    let channels: Vec<serde_json::Value> = ids
        .iter()
        .filter_map(|id| {
            let (topic, ti) = channel_type(&catalog, *id)?;
            let ch = &catalog.channels[id];
            let schema = catalog.schemas.get(&ch.schema_id);
            Some(json!({"id": id, "topic": topic, "messages": counts.get(id).copied().unwrap_or(0),
                        "message_encoding": ch.message_encoding, "schema_name": schema.map(|s| s.name.clone()),
                        "schema_encoding": schema.map(|s| s.encoding.clone()), "type_name": ti.name,
                        "encoding": ti.encoding, "descriptor_len": ti.descriptor.len()}))
        })
        .collect();
    let messages: u64 = counts.values().fold(0u64, |a, &b| a.saturating_add(b));
    let mut skipped_messages: BTreeMap<Skip, u64> = BTreeMap::new();
    for (id, n) in &counts {
        if let Some(s) = catalog.skipped(*id) {
            let e = skipped_messages.entry(s).or_default();
            *e = e.saturating_add(*n);
        }
    }
    let skipped = skipped_text(&catalog, &limits, &skipped_messages);
    let seconds = match (start, end) {
        (Some(s), Some(e)) => e.saturating_sub(s) as f64 / 1e9,
        _ => 0.0,
    };
    if a.json {
        let meta: Vec<_> = metadata.iter().map(|(n, m)| json!({"name": n, "metadata": m})).collect();
        shoal_tools::emit(&json!({"file": a.file.display().to_string(), "bytes": len, "had_summary": had_summary,
                                  "messages": messages, "start_ns": start, "end_ns": end, "seconds": seconds,
                                  "channels": channels, "metadata": meta,
                                  "metadata_not_kept": {"records": metadata_unkept, "bytes": metadata_unkept_bytes},
                                  "skipped": skipped_json(&catalog, &skipped_messages),
                                  "damage": damage_json(&damage), "peak_rss_kb": crate::perf::peak_rss_kb()}));
    } else {
        println!("file:      {} ({len} bytes{})", a.file.display(), if had_summary { "" } else { ", no summary" });
        let counted = if have_counts { "as the summary counts them" } else { "readable" };
        println!("messages:  {messages} in {seconds:.3} s ({counted})");
        println!("channels:  {}", channels.len());
        for c in &channels {
            println!(
                "  {:<40} {:>9} msgs  {} ({}), schema {}",
                printable(c["topic"].as_str().unwrap_or_default()),
                c["messages"],
                printable(c["type_name"].as_str().unwrap_or_default()),
                printable(c["encoding"].as_str().unwrap_or_default()),
                c["schema_name"].as_str().map_or("none".to_string(), |n| format!(
                    "{} ({})",
                    printable(n),
                    printable(c["schema_encoding"].as_str().unwrap_or_default())
                ))
            );
        }
        for s in &skipped {
            println!("skipped:   {s}");
        }
        for (name, m) in &metadata {
            println!("metadata {}:", printable(name));
            for (k, v) in m {
                println!("  {} = {}", printable(k), printable(v));
            }
        }
        if metadata_unkept > 0 {
            println!(
                "metadata:  {metadata_unkept} more records ({metadata_unkept_bytes} bytes) beyond the {} MiB shown",
                limits.max_metadata_bytes >> 20
            );
        }
        for d in &damage.list {
            println!("damaged:   {}", printable(&d.to_string()));
        }
        if damage.unlisted > 0 {
            println!("damaged:   {} more parts (not listed)", damage.unlisted);
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
