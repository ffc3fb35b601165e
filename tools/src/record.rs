//! `shoal record`: writes what topics carry into an MCAP file, with each channel's schema.
//!
//! Threads: the process's doorbell thread runs the subscribers' callbacks, which copy each sample into a bounded
//! queue (a full queue drops the sample and counts it; nothing else happens on that path); one writer thread takes
//! the queue and writes the file; the main thread finds new topics (`--all`, `--regex`), prints the progress line
//! and stops everything on Ctrl-C, SIGTERM, `--duration` or a writer error.
//!
//! Bounds: at most `--max-topics` topics are subscribed (`--all` and `--regex` on a churn of topic names keep
//! recording: names beyond the bound are counted, not subscribed, and the count goes into the file's
//! `shoal.recording` metadata as `topics_not_recorded`); a file holds at most [`MAX_FILE_CHANNELS`] channels (a
//! message that would need another is dropped and counted as the topic's `channel_drops`) and at most
//! [`MAX_FILE_SCHEMA_BYTES`] of schemas and descriptors (a channel beyond is recorded without its descriptor, saying
//! so in its metadata).
//!
//! Files are created with the mode `[shoal_security] shm_access` gives the files shoal writes for others to read
//! (`owner`: 0600, `group`: 0640, `all`: 0644), whatever the umask: an existing file is removed first (its mode would
//! stay), and the new one is created exclusively with that mode.
//!
//! Channels: one per topic and type information. A `proto` topic whose descriptor defines its type gets a
//! `protobuf` schema (the descriptor, a serialized `FileDescriptorSet`) and the `protobuf` message encoding, as
//! Foxglove and the MCAP tools expect; every other topic a schema-less channel whose message encoding is the eCAL
//! encoding. Each channel's metadata keeps eCAL's type information (`ecal.type_name`, `ecal.encoding`, and
//! `ecal.descriptor_hex` when a schema-less channel has a descriptor) so that `shoal play` announces it unchanged.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufWriter, IsTerminal, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use serde_json::json;
use shoal::monitor::{TopicDirection, Via, printable};
use shoal::{CallbackSubscriber, Node, Sample, TypeInfo};

/// Channel metadata keys carrying eCAL's type information (read back by `shoal play`).
pub(crate) const META_TYPE_NAME: &str = "ecal.type_name";
/// See [`META_TYPE_NAME`].
pub(crate) const META_ENCODING: &str = "ecal.encoding";
/// See [`META_TYPE_NAME`]: the descriptor of a schema-less channel, in lowercase hex.
pub(crate) const META_DESCRIPTOR_HEX: &str = "ecal.descriptor_hex";
/// Name of the metadata record with the recording's counters, written when a file is closed.
pub(crate) const RECORDING_METADATA: &str = "shoal.recording";

/// Channels one file holds at most (MCAP channel ids are 16-bit; the writer keeps every channel until the file is
/// closed).
pub(crate) const MAX_FILE_CHANNELS: usize = 4096;
/// Bytes of schemas and descriptors one file keeps at most (the writer holds them until the file is closed, for its
/// summary).
pub(crate) const MAX_FILE_SCHEMA_BYTES: usize = 64 << 20;
/// Distinct topic names beyond `--max-topics` that are counted exactly; beyond that the count says "at least".
const MAX_COUNTED_NAMES: usize = 1 << 20;

/// How often the main thread looks for new topics, refreshes the drop counters and the progress line.
const TICK: Duration = Duration::from_millis(250);

/// Arguments of `shoal record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Topics to record (exact names). With `--all` or `--regex`, topics that appear later are recorded too.
    topics: Vec<String>,
    /// The MCAP file to write (with `--max-size`: FILE_000.mcap, FILE_001.mcap, ...). An existing file is replaced.
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Record every topic that has a publisher (other than this recorder), including ones that appear later.
    #[arg(long)]
    all: bool,
    /// Record every topic whose name matches this regular expression (anywhere in the name; anchor it with ^...$),
    /// including ones that appear later.
    #[arg(long, conflicts_with = "all")]
    regex: Option<String>,
    /// Chunk compression.
    #[arg(long, value_enum, default_value_t = CompressionArg::Zstd)]
    compression: CompressionArg,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Start a new file when the current one reaches this size (bytes, or with a k, M or G suffix: 500M).
    #[arg(long, value_parser = parse_size)]
    max_size: Option<u64>,
    /// Memory for messages waiting to be written, in MiB; a message arriving when it is full is dropped (and
    /// counted). A single message larger than this is still taken when the queue is empty.
    #[arg(long, default_value_t = 256)]
    queue_mb: u64,
    /// Topics subscribed at most. With --all or --regex, topics that appear beyond it are not recorded: their
    /// names are counted (summary, and `topics_not_recorded` in the file's metadata).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65535))]
    max_topics: u64,
    /// Target uncompressed size of a chunk, in KiB.
    #[arg(long, default_value_t = 1024)]
    chunk_kb: u64,
    /// Print one JSON object per subscribed topic and a final summary on stdout.
    #[arg(long)]
    json: bool,
}

/// `--compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CompressionArg {
    /// Zstandard (MCAP's usual choice).
    Zstd,
    /// LZ4 (faster, larger).
    Lz4,
    /// Uncompressed chunks.
    None,
}

impl CompressionArg {
    fn to_mcap(self) -> Option<mcap::Compression> {
        match self {
            CompressionArg::Zstd => Some(mcap::Compression::Zstd),
            CompressionArg::Lz4 => Some(mcap::Compression::Lz4),
            CompressionArg::None => None,
        }
    }
}

/// `500M`, `2G`, `64k` or plain bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size (examples: 1000000, 64k, 500M, 2G)"))?;
    if !n.is_finite() || n < 1.0 {
        return Err(format!("`{s}`: the size must be at least 1 byte"));
    }
    Ok((n * mult as f64) as u64)
}

/// Counters of one recorded topic, shared by its callback, the writer thread and the main thread.
#[derive(Debug)]
struct TopicState {
    name: Arc<str>,
    /// Samples the callback received.
    received: AtomicU64,
    /// Samples the callback dropped because the queue was full.
    queue_drops: AtomicU64,
    /// Samples the writer dropped because the file had [`MAX_FILE_CHANNELS`] channels already.
    channel_drops: AtomicU64,
    /// The core subscriber's drop counter (overruns, losses on the way), copied by the main thread.
    subscriber_drops: AtomicU64,
    /// Samples received per layer, by [`Via::code`].
    via: [AtomicU64; VIAS.len()],
}

/// Every layer a sample can arrive through, in [`Via::code`] order.
const VIAS: [Via; 5] = [Via::SameProcess, Via::ShoalRing, Via::EcalShm, Via::Udp, Via::Tcp];

impl TopicState {
    /// `layer=count` for the layers samples arrived through, e.g. `shm=50`.
    fn via_text(&self) -> String {
        let parts: Vec<String> = VIAS
            .iter()
            .zip(&self.via)
            .map(|(v, n)| (v.name(), n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
        parts.join(",")
    }

    fn via_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (v, n) in VIAS.iter().zip(&self.via) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                m.insert(v.name().into(), n.into());
            }
        }
        serde_json::Value::Object(m)
    }
}

/// One received sample on its way to the writer.
struct Item {
    topic: Arc<TopicState>,
    type_info: Arc<TypeInfo>,
    log_time: u64,
    publish_time: u64,
    sequence: u32,
    data: Vec<u8>,
}

/// The bounded queue between the callbacks and the writer thread (bounded in bytes).
struct Queue {
    state: Mutex<QueueState>,
    cond: Condvar,
    max_bytes: usize,
}

struct QueueState {
    items: VecDeque<Item>,
    bytes: usize,
    closed: bool,
}

impl Queue {
    fn new(max_bytes: usize) -> Queue {
        Queue {
            state: Mutex::new(QueueState { items: VecDeque::new(), bytes: 0, closed: false }),
            cond: Condvar::new(),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item`; gives it back when the queue is full or closed.
    fn push(&self, item: Item) -> Result<(), Item> {
        let mut q = self.lock();
        let len = item.data.len();
        if q.closed || (!q.items.is_empty() && q.bytes + len > self.max_bytes) {
            return Err(item);
        }
        q.bytes += len;
        q.items.push_back(item);
        drop(q);
        self.cond.notify_one();
        Ok(())
    }

    /// Waits for items and takes all of them; an empty batch means closed and drained.
    fn pop_all(&self, into: &mut VecDeque<Item>) {
        let mut q = self.lock();
        while q.items.is_empty() && !q.closed {
            q = self.cond.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        std::mem::swap(&mut q.items, into);
        q.bytes = 0;
    }

    fn close(&self) {
        self.lock().closed = true;
        self.cond.notify_all();
    }
}

/// A `Write + Seek` that publishes the file's size (the furthest byte written) for `--max-size`.
struct SizedFile {
    inner: BufWriter<File>,
    pos: u64,
    size: Arc<AtomicU64>,
}

impl Write for SizedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.pos += n as u64;
        self.size.fetch_max(self.pos, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Seek for SizedFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }
}

/// What the writer thread reports when it is done.
#[derive(Debug, Default)]
struct WriterReport {
    files: Vec<PathBuf>,
    messages: u64,
    bytes: u64,
}

/// Figures the writer thread publishes for the progress line.
#[derive(Debug, Default)]
struct Progress {
    messages: AtomicU64,
    bytes: AtomicU64,
    file_index: AtomicU64,
}

/// The channels of one topic in the open file, by type information.
type TopicChannels = Vec<(Arc<TypeInfo>, u16)>;

/// The writer thread's state.
struct FileWriter {
    base: PathBuf,
    /// Mode of the files created ([`create_file`]).
    mode: u32,
    split: bool,
    max_size: Option<u64>,
    options: mcap::WriteOptions,
    writer: Option<mcap::Writer<SizedFile>>,
    size: Arc<AtomicU64>,
    /// Payload bytes written since the file's size last changed: the part of the open chunk not yet on disk.
    pending: u64,
    last_size: u64,
    /// Per topic (by address of its state): the channels of this file, by type information.
    channels: Vec<(Arc<TopicState>, TopicChannels)>,
    /// Channels of this file, and bytes of schemas and descriptors they keep.
    file_channels: usize,
    file_schema_bytes: usize,
    /// Distinct topic names not recorded (beyond `--max-topics`), published by the main thread.
    topics_not_recorded: Arc<AtomicU64>,
    topics: Arc<Mutex<Vec<Arc<TopicState>>>>,
    started: SystemTime,
    report: WriterReport,
    file_messages: u64,
    progress: Arc<Progress>,
}

impl FileWriter {
    fn path(&self, index: usize) -> PathBuf {
        if !self.split {
            return self.base.clone();
        }
        let stem = self.base.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let ext = self.base.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "mcap".into());
        self.base.with_file_name(format!("{stem}_{index:03}.{ext}"))
    }

    fn open(&mut self) -> Result<()> {
        let path = self.path(self.report.files.len());
        let file = create_file(&path, self.mode).with_context(|| format!("cannot create {}", path.display()))?;
        self.size.store(0, Ordering::Relaxed);
        let sized = SizedFile { inner: BufWriter::with_capacity(1 << 20, file), pos: 0, size: Arc::clone(&self.size) };
        let w = self.options.clone().create(sized).with_context(|| format!("cannot start {}", path.display()))?;
        self.writer = Some(w);
        self.channels.clear();
        self.file_channels = 0;
        self.file_schema_bytes = 0;
        self.pending = 0;
        self.last_size = 0;
        self.file_messages = 0;
        self.progress.file_index.store(self.report.files.len() as u64, Ordering::Relaxed);
        self.report.files.push(path);
        Ok(())
    }

    /// Writes the metadata record and the summary; the file is valid afterwards.
    fn close(&mut self) -> Result<()> {
        let Some(mut w) = self.writer.take() else { return Ok(()) };
        let path = self.report.files.last().cloned().unwrap_or_default();
        let mut meta = BTreeMap::new();
        meta.insert("recorder".to_string(), format!("shoal {}", env!("CARGO_PKG_VERSION")));
        meta.insert("started_unix_ns".to_string(), unix_ns(self.started).to_string());
        meta.insert("closed_unix_ns".to_string(), unix_ns(SystemTime::now()).to_string());
        meta.insert("file_index".to_string(), (self.report.files.len() - 1).to_string());
        meta.insert("file_messages".to_string(), self.file_messages.to_string());
        let (mut queue_drops, mut subscriber_drops, mut channel_drops) = (0u64, 0u64, 0u64);
        for t in lock(&self.topics).iter() {
            let (q, s) = (t.queue_drops.load(Ordering::Relaxed), t.subscriber_drops.load(Ordering::Relaxed));
            let c = t.channel_drops.load(Ordering::Relaxed);
            queue_drops = queue_drops.saturating_add(q);
            subscriber_drops = subscriber_drops.saturating_add(s);
            channel_drops = channel_drops.saturating_add(c);
            meta.insert(format!("topic.{}.received", t.name), t.received.load(Ordering::Relaxed).to_string());
            meta.insert(format!("topic.{}.queue_drops", t.name), q.to_string());
            meta.insert(format!("topic.{}.subscriber_drops", t.name), s.to_string());
            if c > 0 {
                meta.insert(format!("topic.{}.channel_drops", t.name), c.to_string());
            }
            meta.insert(format!("topic.{}.layers", t.name), t.via_text());
        }
        meta.insert("queue_drops".to_string(), queue_drops.to_string());
        meta.insert("subscriber_drops".to_string(), subscriber_drops.to_string());
        meta.insert("channel_drops".to_string(), channel_drops.to_string());
        meta.insert("topics_not_recorded".to_string(), self.topics_not_recorded.load(Ordering::Relaxed).to_string());
        meta.insert(
            "counters".to_string(),
            "cumulative since the recording started, at the time this file was closed; queue_drops: samples the \
             recorder's queue had no room for; subscriber_drops: samples lost before reaching the recorder \
             (counted by shoal's subscribers); channel_drops: samples dropped because the file had its maximum of \
             channels; topics_not_recorded: distinct topic names beyond --max-topics, not subscribed"
                .to_string(),
        );
        w.write_metadata(&mcap::records::Metadata { name: RECORDING_METADATA.to_string(), metadata: meta })
            .with_context(|| format!("cannot write the metadata of {}", path.display()))?;
        w.finish().with_context(|| format!("cannot finish {}", path.display()))?;
        let mut sized = w.into_inner();
        sized.flush().with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }

    /// The channel of `item`'s topic and type in the open file (added on first use); None when the file has
    /// [`MAX_FILE_CHANNELS`] already.
    fn channel(&mut self, item: &Item) -> Result<Option<u16>> {
        let per_topic = match self.channels.iter().position(|(t, _)| Arc::ptr_eq(t, &item.topic)) {
            Some(i) => i,
            None => {
                self.channels.push((Arc::clone(&item.topic), Vec::new()));
                self.channels.len() - 1
            }
        };
        let known = &self.channels[per_topic].1;
        if let Some((_, id)) = known.iter().find(|(ti, _)| Arc::ptr_eq(ti, &item.type_info) || **ti == *item.type_info)
        {
            return Ok(Some(*id));
        }
        if self.file_channels >= MAX_FILE_CHANNELS {
            return Ok(None);
        }
        let budget = MAX_FILE_SCHEMA_BYTES.saturating_sub(self.file_schema_bytes);
        let w = self.writer.as_mut().context("no open file")?;
        let (id, kept) = add_channel(w, &item.topic.name, &item.type_info, budget)?;
        self.file_channels += 1;
        self.file_schema_bytes += kept;
        self.channels[per_topic].1.push((Arc::clone(&item.type_info), id));
        Ok(Some(id))
    }

    fn write(&mut self, item: Item) -> Result<()> {
        if self.writer.is_none() {
            self.open()?;
        }
        let Some(channel_id) = self.channel(&item)? else {
            item.topic.channel_drops.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let header = mcap::records::MessageHeader {
            channel_id,
            sequence: item.sequence,
            log_time: item.log_time,
            publish_time: item.publish_time,
        };
        let w = self.writer.as_mut().context("no open file")?;
        w.write_to_known_channel(&header, &item.data).context("cannot write a message")?;
        let len = item.data.len() as u64;
        self.report.messages += 1;
        self.report.bytes += len;
        self.file_messages += 1;
        self.progress.messages.fetch_add(1, Ordering::Relaxed);
        self.progress.bytes.fetch_add(len, Ordering::Relaxed);
        let size = self.size.load(Ordering::Relaxed);
        if size != self.last_size {
            self.last_size = size;
            self.pending = 0;
        }
        self.pending += len + 31;
        if let Some(max) = self.max_size
            && size + self.pending >= max
        {
            self.close()?;
        }
        Ok(())
    }
}

/// Adds the channel of `topic` with `ti` (and its schema, for protobuf) to `w`; a descriptor of more than
/// `budget` bytes (twice that in hex) is left out, and the channel's metadata says so. Returns the channel id and the
/// bytes of schema and descriptor the writer keeps for it.
fn add_channel(w: &mut mcap::Writer<SizedFile>, topic: &str, ti: &TypeInfo, budget: usize) -> Result<(u16, usize)> {
    let mut meta = BTreeMap::new();
    meta.insert(META_TYPE_NAME.to_string(), ti.name.clone());
    meta.insert(META_ENCODING.to_string(), ti.encoding.clone());
    let mut kept = ti.name.len() + ti.encoding.len() + topic.len();
    if ti.descriptor.len().saturating_mul(2) > budget {
        meta.insert(
            "ecal.descriptor_omitted".to_string(),
            format!(
                "a descriptor of {} bytes was left out: the file holds {} MiB of schemas and descriptors at most",
                ti.descriptor.len(),
                MAX_FILE_SCHEMA_BYTES >> 20
            ),
        );
        let id = w.add_channel(0, topic, &ti.encoding, &meta).context("cannot add a channel")?;
        return Ok((id, kept));
    }
    let schema = if ti.encoding == "proto" && !ti.descriptor.is_empty() {
        match shoal::dynamic::DynamicDecoder::new(ti) {
            Ok(_) => Some(w.add_schema(&ti.name, "protobuf", &ti.descriptor).context("cannot add a schema")?),
            Err(e) => {
                tracing::warn!("topic {topic}: recorded without a schema: {e}");
                meta.insert("ecal.schema_error".to_string(), e.to_string());
                None
            }
        }
    } else {
        None
    };
    let (schema_id, encoding) = match schema {
        Some(id) => {
            kept += ti.descriptor.len();
            (id, "protobuf")
        }
        None => {
            if !ti.descriptor.is_empty() {
                meta.insert(META_DESCRIPTOR_HEX.to_string(), hex(&ti.descriptor));
                kept += 2 * ti.descriptor.len();
            }
            (0, ti.encoding.as_str())
        }
    };
    let id = w.add_channel(schema_id, topic, encoding, &meta).context("cannot add a channel")?;
    Ok((id, kept))
}

/// Creates the file at `path` with exactly `mode`, whatever the umask: an existing file is removed first (opening
/// it would keep its mode), the new one is created exclusively (`O_EXCL`: no symlink is followed) with `mode`, and
/// the bits the umask took away are given back on the open descriptor. The file is never more open than `mode`.
pub(crate) fn create_file(path: &Path, mode: u32) -> std::io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(file)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which topics to record.
enum Selection {
    Listed,
    All,
    Regex(regex::Regex),
}

/// Runs `shoal record`: checks the arguments, starts the writer thread, subscribes, records until stopped, and
/// prints the summary.
pub(crate) fn run(a: RecordArgs) -> Result<()> {
    let (selection, max_topics) = check_args(&a)?;
    let stop = crate::common::stop_on_signals()?;

    let node = Node::init("shoal_record").context("starting the shoal node (check ecal.ini and /dev/shm)")?;
    let queue = Arc::new(Queue::new(usize::try_from(a.queue_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)));
    let topics: Arc<Mutex<Vec<Arc<TopicState>>>> = Arc::default();
    let progress = Arc::new(Progress::default());
    let cpu_start = shoal_tools::process_cpu_s();
    let started = SystemTime::now();
    let t0 = Instant::now();

    let topics_not_recorded = Arc::new(AtomicU64::new(0));
    let mut fw = FileWriter {
        base: a.output.clone(),
        // Files others may read: the mode shoal gives its ring segments ([shoal_security] shm_access).
        mode: node.config().security.shm_access.read_mode(),
        split: a.max_size.is_some(),
        max_size: a.max_size,
        options: write_options(&a),
        writer: None,
        size: Arc::default(),
        pending: 0,
        last_size: 0,
        channels: Vec::new(),
        file_channels: 0,
        file_schema_bytes: 0,
        topics_not_recorded: Arc::clone(&topics_not_recorded),
        topics: Arc::clone(&topics),
        started,
        report: WriterReport::default(),
        file_messages: 0,
        progress: Arc::clone(&progress),
    };
    // The first file exists from the start, so that a recording of nothing is still a valid (empty) file.
    fw.open()?;
    let writer = spawn_writer(fw, Arc::clone(&queue), Arc::clone(&stop))?;

    let mut subs = Subscriptions {
        node: &node,
        queue: Arc::clone(&queue),
        topics: Arc::clone(&topics),
        json: a.json,
        max_topics,
        list: Vec::new(),
        subscribed: HashSet::new(),
        hashing: std::collections::hash_map::RandomState::new(),
        not_recorded: HashSet::new(),
        topics_not_recorded: Arc::clone(&topics_not_recorded),
    };
    for t in &a.topics {
        subs.subscribe(t)?;
    }
    record_until_stopped(&mut subs, &selection, &stop, &progress, &a, t0);

    // Stop receiving first, then let the writer drain the queue and finish the file.
    subs.copy_subscriber_drops();
    drop(subs);
    queue.close();
    let report = writer.join().map_err(|_| anyhow::anyhow!("the writer thread panicked"))??;
    let summary = Summary {
        elapsed: t0.elapsed().as_secs_f64(),
        cpu: shoal_tools::process_cpu_s() - cpu_start,
        states: lock(&topics).clone(),
        not_recorded: topics_not_recorded.load(Ordering::Relaxed),
        max_topics,
        report,
    };
    summary.print(a.json);
    Ok(())
}

/// What to record and at most how many topics, or a usage error for arguments that do not go together.
fn check_args(a: &RecordArgs) -> Result<(Selection, usize)> {
    let selection = match (&a.regex, a.all) {
        (Some(r), _) => {
            Selection::Regex(regex::Regex::new(r).map_err(|e| crate::exit::usage(format!("--regex `{r}`: {e}")))?)
        }
        (None, true) => Selection::All,
        (None, false) if a.topics.is_empty() => {
            return Err(crate::exit::usage("nothing to record: name topics, or give --all or --regex PATTERN"));
        }
        (None, false) => Selection::Listed,
    };
    if let Some(d) = a.duration
        && !(d.is_finite() && d > 0.0)
    {
        return Err(crate::exit::usage("--duration must be a positive number of seconds"));
    }
    if a.chunk_kb == 0 {
        return Err(crate::exit::usage("--chunk-kb must be at least 1"));
    }
    let max_topics = usize::try_from(a.max_topics).unwrap_or(usize::MAX);
    if a.topics.len() > max_topics {
        return Err(crate::exit::usage(format!(
            "{} topics named, more than --max-topics ({max_topics}): raise --max-topics",
            a.topics.len()
        )));
    }
    if let Some(parent) = a.output.parent()
        && !parent.as_os_str().is_empty()
        && !parent.is_dir()
    {
        return Err(crate::exit::usage(format!("the directory of {} does not exist", a.output.display())));
    }
    Ok((selection, max_topics))
}

/// The MCAP writer's options from `--compression` and `--chunk-kb`.
fn write_options(a: &RecordArgs) -> mcap::WriteOptions {
    mcap::WriteOptions::new()
        .compression(a.compression.to_mcap())
        .chunk_size(Some(a.chunk_kb.saturating_mul(1024)))
        .profile("")
        .library(format!("shoal {} (mcap-rust {})", env!("CARGO_PKG_VERSION"), mcap::VERSION))
}

/// Starts the writer thread: it writes what the queue holds until the queue is closed and drained, then finishes
/// the file. On a write error it sets `stop` and closes the queue (nothing more can be written).
fn spawn_writer(
    mut fw: FileWriter,
    queue: Arc<Queue>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<WriterReport>>> {
    std::thread::Builder::new()
        .name("shoal-record-writer".into())
        .spawn(move || -> Result<WriterReport> {
            let mut batch = VecDeque::new();
            let result = (|| -> Result<()> {
                loop {
                    queue.pop_all(&mut batch);
                    if batch.is_empty() {
                        return Ok(());
                    }
                    for item in batch.drain(..) {
                        fw.write(item)?;
                    }
                }
            })();
            let closed = fw.close();
            if result.is_err() || closed.is_err() {
                // Stop the recording: nothing more can be written.
                stop.store(true, Ordering::Relaxed);
                queue.close();
            }
            result.and(closed)?;
            Ok(fw.report)
        })
        .context("cannot start the writer thread")
}

/// The recorded topics' subscribers, and the names found beyond `--max-topics`.
struct Subscriptions<'n> {
    node: &'n Node,
    queue: Arc<Queue>,
    topics: Arc<Mutex<Vec<Arc<TopicState>>>>,
    json: bool,
    max_topics: usize,
    list: Vec<(Arc<TopicState>, CallbackSubscriber)>,
    subscribed: HashSet<Arc<str>>,
    hashing: std::collections::hash_map::RandomState,
    /// Names found beyond --max-topics (or that could not be subscribed), by hash: counted once each, not retried.
    not_recorded: HashSet<u64>,
    topics_not_recorded: Arc<AtomicU64>,
}

impl Subscriptions<'_> {
    /// Subscribes to `name` (once): its callback queues every sample for the writer.
    fn subscribe(&mut self, name: &str) -> Result<()> {
        if self.subscribed.contains(name) {
            return Ok(());
        }
        let state = Arc::new(TopicState {
            name: Arc::from(name),
            received: AtomicU64::new(0),
            queue_drops: AtomicU64::new(0),
            channel_drops: AtomicU64::new(0),
            subscriber_drops: AtomicU64::new(0),
            via: Default::default(),
        });
        let sub = self
            .node
            .subscriber(name)
            .callback(enqueue(Arc::clone(&state), Arc::clone(&self.queue)))
            .create()
            .with_context(|| format!("cannot subscribe to {name}"))?;
        self.subscribed.insert(Arc::clone(&state.name));
        lock(&self.topics).push(Arc::clone(&state));
        self.list.push((state, sub));
        if self.json {
            shoal_tools::emit(&json!({"event": "subscribed", "topic": name}));
        }
        Ok(())
    }

    /// Subscribes to the topics with a publisher (other than this recorder, `me`) that `selection` takes and that
    /// are not recorded yet, up to `--max-topics`; counts the others.
    fn discover(&mut self, selection: &Selection, me: &(String, u32)) {
        let snap = self.node.snapshot();
        let mut names: Vec<&str> = snap
            .topics
            .iter()
            .filter(|t| t.direction == TopicDirection::Publisher && !(t.host_name == me.0 && t.pid == me.1))
            .map(|t| t.topic_name.as_str())
            .filter(|n| match selection {
                Selection::Regex(r) => r.is_match(n),
                _ => true,
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        for n in names {
            if self.subscribed.contains(n) {
                continue;
            }
            let h = self.hashing.hash_one(n);
            if self.not_recorded.contains(&h) {
                continue;
            }
            if self.list.len() < self.max_topics {
                match self.subscribe(n) {
                    Ok(()) => continue,
                    Err(e) => tracing::warn!("not recorded: {}", printable(&format!("{e:#}"))),
                }
            }
            if self.not_recorded.len() < MAX_COUNTED_NAMES {
                self.not_recorded.insert(h);
                self.topics_not_recorded.store(self.not_recorded.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Copies each core subscriber's drop counter into its topic's state.
    fn copy_subscriber_drops(&self) {
        for (t, s) in &self.list {
            t.subscriber_drops.store(s.drops(), Ordering::Relaxed);
        }
    }

    /// Drops of every kind so far, summed over the topics.
    fn drops(&self) -> u64 {
        self.list.iter().fold(0u64, |n, (t, _)| {
            n.saturating_add(t.queue_drops.load(Ordering::Relaxed))
                .saturating_add(t.subscriber_drops.load(Ordering::Relaxed))
                .saturating_add(t.channel_drops.load(Ordering::Relaxed))
        })
    }
}

/// The callback of a recorded topic: counts the sample, copies it into an [`Item`] and queues it (a full queue
/// drops it and counts the drop).
fn enqueue(state: Arc<TopicState>, queue: Arc<Queue>) -> impl FnMut(&Sample) + Send + 'static {
    let mut last_type: Option<Arc<TypeInfo>> = None;
    move |s: &Sample| {
        let log_time = unix_ns(SystemTime::now());
        state.received.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = usize::try_from(s.via().code()).ok().and_then(|i| state.via.get(i)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let type_info = match &last_type {
            Some(t) if **t == *s.type_info() => Arc::clone(t),
            _ => {
                let t = Arc::new(s.type_info().clone());
                last_type = Some(Arc::clone(&t));
                t
            }
        };
        let item = Item {
            topic: Arc::clone(&state),
            type_info,
            log_time,
            // MCAP: the publish time is the log time when the publisher's is not known.
            publish_time: u64::try_from(s.send_time_ns()).ok().filter(|&t| t > 0).unwrap_or(log_time),
            sequence: s.clock() as u32,
            data: s.payload().to_vec(),
        };
        if queue.push(item).is_err() {
            state.queue_drops.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The main thread's loop until Ctrl-C, SIGTERM, `--duration` or a writer error: finds new topics (`--all`,
/// `--regex`), copies the drop counters and, on a terminal, rewrites the progress line, every [`TICK`].
fn record_until_stopped(
    subs: &mut Subscriptions<'_>,
    selection: &Selection,
    stop: &AtomicBool,
    progress: &Progress,
    a: &RecordArgs,
    t0: Instant,
) {
    let terminal = std::io::stderr().is_terminal();
    let me = (subs.node.host_name().to_string(), std::process::id());
    let deadline = a.duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last_tick = (Instant::now(), 0u64, 0u64);
    let mut next_discovery = Instant::now();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let now = Instant::now();
        if !matches!(selection, Selection::Listed) && now >= next_discovery {
            next_discovery = now + Duration::from_millis(500);
            subs.discover(selection, &me);
        }
        subs.copy_subscriber_drops();
        if terminal {
            print_progress(subs, progress, &mut last_tick, a.max_size.is_some(), t0);
        }
        std::thread::sleep(TICK);
    }
    if terminal {
        eprintln!();
    }
}

/// Rewrites the progress line on stderr: messages, megabytes, the rates since `last_tick` (then updated), drops,
/// the file's index (when files are split) and the time since `t0`.
fn print_progress(
    subs: &Subscriptions<'_>,
    progress: &Progress,
    last_tick: &mut (Instant, u64, u64),
    split: bool,
    t0: Instant,
) {
    let (msgs, bytes) = (progress.messages.load(Ordering::Relaxed), progress.bytes.load(Ordering::Relaxed));
    let dt = last_tick.0.elapsed().as_secs_f64().max(1e-3);
    let rate = (msgs - last_tick.1) as f64 / dt;
    let bw = (bytes - last_tick.2) as f64 / dt / 1e6;
    *last_tick = (Instant::now(), msgs, bytes);
    let drops = subs.drops();
    let file = if split { format!("  file {:03}", progress.file_index.load(Ordering::Relaxed)) } else { String::new() };
    eprint!(
        "\r\x1b[Krecording {} topics: {msgs} msgs  {:.1} MB  {rate:.0} msg/s  {bw:.1} MB/s  drops {drops}{file}  {:.0} s",
        subs.list.len(),
        bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
}

/// What a finished recording reports.
struct Summary {
    report: WriterReport,
    /// Every topic subscribed.
    states: Vec<Arc<TopicState>>,
    /// Topic names not recorded (at least this many when [`MAX_COUNTED_NAMES`]).
    not_recorded: u64,
    max_topics: usize,
    /// Seconds recorded, and CPU seconds the process spent.
    elapsed: f64,
    cpu: f64,
}

impl Summary {
    /// Prints the summary on stderr, and with `json` as a JSON line (with per-topic figures) on stdout.
    fn print(&self, json: bool) {
        let Summary { report, states, not_recorded, max_topics, elapsed, cpu } = self;
        let (not_recorded, max_topics, elapsed, cpu) = (*not_recorded, *max_topics, *elapsed, *cpu);
        let total = |f: fn(&TopicState) -> &AtomicU64| {
            states.iter().fold(0u64, |n, t| n.saturating_add(f(t).load(Ordering::Relaxed)))
        };
        let queue_drops = total(|t| &t.queue_drops);
        let subscriber_drops = total(|t| &t.subscriber_drops);
        let channel_drops = total(|t| &t.channel_drops);
        let received = total(|t| &t.received);
        let mb = report.bytes as f64 / 1e6;
        let files: Vec<String> = report.files.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "shoal record: {} messages ({mb:.1} MB) from {} topics in {elapsed:.1} s into {}; drops: {queue_drops} in \
             the recorder's queue, {subscriber_drops} before the recorder; CPU {cpu:.2} s",
            report.messages,
            states.len(),
            files.join(", ")
        );
        if not_recorded > 0 {
            eprintln!(
                "shoal record: {}{not_recorded} more topics were not recorded (beyond --max-topics {max_topics}, or \
                 they could not be subscribed)",
                if not_recorded as usize >= MAX_COUNTED_NAMES { "at least " } else { "" }
            );
        }
        if channel_drops > 0 {
            eprintln!(
                "shoal record: {channel_drops} messages dropped: a file held its maximum of {MAX_FILE_CHANNELS} \
                 channels (topics x types)"
            );
        }
        if json {
            let per_topic: Vec<_> = states
                .iter()
                .map(|t| {
                    json!({"topic": &*t.name, "received": t.received.load(Ordering::Relaxed),
                           "queue_drops": t.queue_drops.load(Ordering::Relaxed),
                           "subscriber_drops": t.subscriber_drops.load(Ordering::Relaxed),
                           "channel_drops": t.channel_drops.load(Ordering::Relaxed), "layers": t.via_json()})
                })
                .collect();
            shoal_tools::emit(
                &json!({"event": "summary", "files": files, "messages": report.messages, "received": received,
                        "bytes": report.bytes, "queue_drops": queue_drops, "subscriber_drops": subscriber_drops,
                        "channel_drops": channel_drops, "topics_not_recorded": not_recorded,
                        "seconds": elapsed, "cpu_s": cpu,
                        "cpu_ms_per_mb": if mb > 0.0 { cpu * 1000.0 / mb } else { 0.0 },
                        "topics": per_topic}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::SystemTime;

    use shoal::TypeInfo;
    use shoal_tools::mcap_read::{self, Limits, Rec};

    use super::{FileWriter, Item, MAX_FILE_CHANNELS, Queue, TopicState, WriterReport, parse_size};

    fn topic_state(name: &str) -> Arc<TopicState> {
        Arc::new(TopicState {
            name: name.into(),
            received: AtomicU64::new(0),
            queue_drops: AtomicU64::new(0),
            channel_drops: AtomicU64::new(0),
            subscriber_drops: AtomicU64::new(0),
            via: Default::default(),
        })
    }

    fn file_writer(path: &std::path::Path, topic: &Arc<TopicState>) -> FileWriter {
        FileWriter {
            base: path.to_path_buf(),
            mode: 0o600,
            split: false,
            max_size: None,
            options: mcap::WriteOptions::new(),
            writer: None,
            size: Arc::default(),
            pending: 0,
            last_size: 0,
            channels: Vec::new(),
            file_channels: 0,
            file_schema_bytes: 0,
            topics_not_recorded: Arc::default(),
            topics: Arc::new(std::sync::Mutex::new(vec![Arc::clone(topic)])),
            started: SystemTime::now(),
            report: WriterReport::default(),
            file_messages: 0,
            progress: Arc::default(),
        }
    }

    fn typed(topic: &Arc<TopicState>, ti: TypeInfo) -> Item {
        Item {
            topic: Arc::clone(topic),
            type_info: Arc::new(ti),
            log_time: 1,
            publish_time: 1,
            sequence: 1,
            data: vec![1],
        }
    }

    type Meta = std::collections::BTreeMap<String, String>;

    /// The channels of the MCAP file at `path` (their metadata, by id: the summary repeats them), and the
    /// `shoal.recording` metadata.
    fn channels_of(path: &std::path::Path) -> (Vec<Meta>, Vec<(String, String)>) {
        let (mut channels, mut meta) = (std::collections::BTreeMap::<u16, Meta>::new(), Vec::new());
        let file = std::fs::File::open(path).expect("open");
        let damage = mcap_read::read_records(file, &Limits::default(), |r| {
            match r {
                Rec::Channel { id, metadata, .. } => {
                    channels.insert(id, metadata.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect());
                }
                Rec::Metadata { metadata, .. } => {
                    meta.extend(metadata.iter().map(|(k, v)| (k.to_owned(), v.to_owned())))
                }
                _ => {}
            }
            true
        })
        .expect("read");
        assert!(damage.is_empty(), "{damage:?}");
        (channels.into_values().collect(), meta)
    }

    #[test]
    fn a_file_holds_at_most_max_file_channels_and_counts_the_messages_beyond() {
        let path = std::env::temp_dir().join(format!("shoal_record_channels_{}.mcap", std::process::id()));
        let topic = topic_state("churning_types");
        let mut w = file_writer(&path, &topic);
        for i in 0..MAX_FILE_CHANNELS + 5 {
            w.write(typed(&topic, TypeInfo::raw(format!("type_{i}")))).expect("write");
        }
        // A known channel still takes messages.
        w.write(typed(&topic, TypeInfo::raw("type_0"))).expect("write");
        w.close().expect("close");
        assert_eq!(topic.channel_drops.load(Ordering::Relaxed), 5);
        assert_eq!(w.report.messages, MAX_FILE_CHANNELS as u64 + 1);
        let (channels, meta) = channels_of(&path);
        assert_eq!(channels.len(), MAX_FILE_CHANNELS);
        assert!(meta.contains(&("channel_drops".to_string(), "5".to_string())), "{meta:?}");
        assert!(meta.contains(&("topic.churning_types.channel_drops".to_string(), "5".to_string())), "{meta:?}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn descriptors_beyond_the_file_budget_are_left_out_and_said_so() {
        let path = std::env::temp_dir().join(format!("shoal_record_descriptors_{}.mcap", std::process::id()));
        let topic = topic_state("big_descriptors");
        let mut w = file_writer(&path, &topic);
        for i in 0..40u8 {
            // Raw type information with a 1 MiB descriptor: kept as 2 MiB of hex in the channel's metadata.
            w.write(typed(&topic, TypeInfo::new(format!("t{i}"), "raw", vec![i; 1 << 20]))).expect("write");
        }
        w.close().expect("close");
        assert_eq!(topic.channel_drops.load(Ordering::Relaxed), 0, "every message is recorded");
        let (channels, _) = channels_of(&path);
        assert_eq!(channels.len(), 40);
        let with = channels.iter().filter(|m| m.contains_key("ecal.descriptor_hex")).count();
        let without = channels.iter().filter(|m| m.contains_key("ecal.descriptor_omitted")).count();
        assert_eq!(with + without, 40);
        assert_eq!(with, 31, "64 MiB hold 31 descriptors of 2 MiB in hex (and their names)");
        let _ = std::fs::remove_file(&path);
    }

    fn item(len: usize) -> Item {
        let topic = topic_state("t");
        Item { topic, type_info: Arc::default(), log_time: 1, publish_time: 1, sequence: 1, data: vec![0; len] }
    }

    #[test]
    fn the_queue_is_bounded_in_bytes_and_takes_one_large_message_when_empty() {
        let q = Queue::new(1000);
        assert!(q.push(item(600)).is_ok());
        assert!(q.push(item(400)).is_ok(), "exactly full");
        assert!(q.push(item(1)).is_err(), "full: the caller counts the drop");
        let mut batch = VecDeque::new();
        q.pop_all(&mut batch);
        assert_eq!(batch.len(), 2);
        assert!(q.push(item(5000)).is_ok(), "larger than the queue, but the queue is empty");
        assert!(q.push(item(1)).is_err());
        batch.clear();
        q.pop_all(&mut batch);
        q.close();
        assert!(q.push(item(1)).is_err(), "closed");
        batch.clear();
        q.pop_all(&mut batch);
        assert!(batch.is_empty(), "closed and drained");
    }

    #[test]
    fn sizes_take_k_m_g_suffixes() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("").is_err());
    }
}
