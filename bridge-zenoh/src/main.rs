//! `shoal-zenoh-bridge`: carries shoal (and eCAL) topics between sites over Zenoh routers.
//!
//! ```text
//! shoal-zenoh-bridge --config bridge.toml
//! shoal-zenoh-bridge --connect tcp/203.0.113.7:7447 --allow '^robot/' --topic chatter
//! ```
//!
//! Logs go to stderr (`RUST_LOG`, default `info`); machine-readable events (ready, export, import, stats) are JSON
//! lines on stdout. SIGINT / SIGTERM stop it cleanly (a final stats line with `"final": true`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use shoal_zenoh_bridge::bridge;
use shoal_zenoh_bridge::config::Config;

/// Carries shoal (and eCAL) topics between sites over Zenoh routers.
#[derive(Parser, Debug)]
#[command(name = "shoal-zenoh-bridge", version)]
struct Args {
    /// TOML configuration file (see bridge-zenoh/etc/bridge.toml for every key).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// A bridged topic, added to the file's: NAME[,direction=export|import|both] (default both).
    #[arg(long = "topic", short = 't')]
    topics: Vec<String>,
    /// A regular expression on shoal topic names: matching topics are bridged (in [select] direction, default
    /// both); repeatable, added to the file's.
    #[arg(long)]
    allow: Vec<String>,
    /// A regular expression excluding topics that --allow selects; repeatable, added to the file's.
    #[arg(long)]
    deny: Vec<String>,
    /// A Zenoh endpoint to connect to, tcp/<host>:<port>; repeatable, added to the file's.
    #[arg(long)]
    connect: Vec<String>,
    /// A Zenoh endpoint to listen on, tcp/<host>:<port>; repeatable, added to the file's.
    #[arg(long)]
    listen: Vec<String>,
    /// Zenoh mode: client or peer.
    #[arg(long)]
    mode: Option<String>,
    /// Key prefix (default shoal).
    #[arg(long)]
    prefix: Option<String>,
    /// The bridge's shoal unit name (default shoal_zenoh_bridge).
    #[arg(long)]
    unit_name: Option<String>,
    /// Statistics interval in milliseconds (0: none).
    #[arg(long)]
    stats_interval_ms: Option<u64>,
    /// Zenoh keys imported at most (a sample of a further key is dropped, counted as imports_refused, unless an
    /// import has been idle for import-idle-ms).
    #[arg(long)]
    max_imports: Option<usize>,
    /// With max-imports keys imported, a new key takes the slot of the key idle longest once that one has had no
    /// sample for this many milliseconds.
    #[arg(long)]
    import_idle_ms: Option<u64>,
    /// Messages an export queue holds at most.
    #[arg(long)]
    queue_messages: Option<usize>,
    /// Payload bytes an export queue holds at most.
    #[arg(long)]
    queue_bytes: Option<usize>,
    /// What a full export queue does: drop_oldest, drop_newest, or block (wait for room, at most 1 s).
    #[arg(long)]
    drop_policy: Option<String>,
    /// Messages per second each exported topic sends at most (0: no limit; a [[topic]] may set its own).
    #[arg(long)]
    max_rate_hz: Option<u64>,
    /// Payload bytes per second each exported topic sends at most (0: no limit).
    #[arg(long)]
    max_bytes_per_s: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    shoal_bridge_common::process::init_tracing();
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    for t in &args.topics {
        let rule = Config::parse_topic_flag(t)?;
        config.topics.retain(|r| r.name != rule.name);
        config.topics.push(rule);
    }
    for a in &args.allow {
        config.allow.push(Config::parse_regex_flag("--allow", a)?);
    }
    for d in &args.deny {
        config.deny.push(Config::parse_regex_flag("--deny", d)?);
    }
    for e in &args.connect {
        config.connect.push(Config::parse_endpoint_flag("--connect", e)?);
    }
    for e in &args.listen {
        config.listen.push(Config::parse_endpoint_flag("--listen", e)?);
    }
    if let Some(m) = &args.mode {
        config.mode = Config::parse_mode_flag(m)?;
    }
    if let Some(p) = &args.prefix {
        config.prefix = Config::parse_prefix_flag(p)?;
    }
    if let Some(u) = args.unit_name {
        anyhow::ensure!(!u.is_empty(), "--unit-name: not empty");
        config.unit_name = u;
    }
    if let Some(s) = args.stats_interval_ms {
        config.stats_interval_ms = s;
    }
    if let Some(m) = args.max_imports {
        config.max_imports = in_range("--max-imports", m, shoal_zenoh_bridge::config::MAX_IMPORTS_RANGE)?;
    }
    if let Some(m) = args.import_idle_ms {
        config.import_idle_ms = in_range("--import-idle-ms", m, shoal_zenoh_bridge::config::IMPORT_IDLE_MS_RANGE)?;
    }
    if let Some(m) = args.queue_messages {
        anyhow::ensure!(m >= 1, "--queue-messages {m}: at least 1");
        config.queue_messages = m;
    }
    if let Some(b) = args.queue_bytes {
        anyhow::ensure!(b >= 1024, "--queue-bytes {b}: at least 1024");
        config.queue_bytes = b;
    }
    if let Some(p) = &args.drop_policy {
        config.drop_policy = Config::parse_policy_flag(p)?;
    }
    if let Some(r) = args.max_rate_hz {
        let max = shoal_zenoh_bridge::config::RATE_RANGE.1;
        anyhow::ensure!(i64::try_from(r).is_ok_and(|r| r <= max), "--max-rate-hz {r}: allowed 0..={max}");
        config.limits.messages_per_s = r;
    }
    if let Some(b) = args.max_bytes_per_s {
        let max = shoal_zenoh_bridge::config::BYTES_PER_S_RANGE.1;
        anyhow::ensure!(i64::try_from(b).is_ok_and(|b| b <= max), "--max-bytes-per-s {b}: allowed 0..={max}");
        config.limits.bytes_per_s = b;
    }
    anyhow::ensure!(config.selects_something(), "nothing to bridge: give --config FILE, --topic NAME or --allow REGEX");
    anyhow::ensure!(
        !config.connect.is_empty() || !config.listen.is_empty(),
        "no Zenoh endpoint: give --connect tcp/<router>:7447 (or [zenoh] connect in the file), or --listen"
    );

    let stop = shoal_bridge_common::process::stop_on_signals().context("installing the SIGTERM/SIGINT handlers")?;
    bridge::run(&config, stop)?;
    Ok(())
}

/// `value` of `flag` if it lies in the config key's range, else an error naming the range.
fn in_range<T: Copy + std::fmt::Display + TryInto<i64>>(
    flag: &str,
    value: T,
    (lo, hi): (i64, i64),
) -> anyhow::Result<T> {
    anyhow::ensure!(value.try_into().is_ok_and(|v| (lo..=hi).contains(&v)), "{flag} {value}: allowed {lo}..={hi}");
    Ok(value)
}
