//! The bridge's configuration: a TOML file (every key checked; an error names `file:line:column`, the key and the
//! allowed values) and command-line flags. `etc/bridge.toml` in this crate documents every key.
//!
//! Which shoal topics are bridged: a topic named by a `[[topic]]` entry (or `--topic`) is bridged in that entry's
//! direction; any other topic is bridged in `[select] direction` when it matches one of the `allow` regular
//! expressions and none of the `deny` ones. Export (shoal → Zenoh) starts when a shoal publisher of the topic
//! appears in registration; import (Zenoh → shoal) when a sample arrives on its key.

use std::path::Path;

use regex::Regex;
use serde::Deserialize;
use toml::Spanned;

pub use shoal_bridge_common::ConfigError;
use shoal_bridge_common::{FileCtx, read_file};

use crate::keyexpr::check_prefix;

/// How the bridge's Zenoh session joins the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Connects to a router (`connect`), the usual way to join sites.
    Client,
    /// A Zenoh peer: connects to `connect`, accepts on `listen`, and talks to other peers directly.
    Peer,
}

impl Mode {
    const ALLOWED: &'static str = "client, peer";
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "client" => Some(Mode::Client),
            "peer" => Some(Mode::Peer),
            _ => None,
        }
    }
    /// The name Zenoh's configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Client => "client",
            Mode::Peer => "peer",
        }
    }
}

/// Which way a topic is bridged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// shoal (and eCAL) publishers → Zenoh.
    Export,
    /// Zenoh → shoal (and eCAL) subscribers.
    Import,
    /// Both ways; the bridge ignores its own publications on either side, so nothing echoes.
    Both,
}

impl Direction {
    const ALLOWED: &'static str = "export, import, both";
    fn parse(s: &str) -> Option<Direction> {
        match s {
            "export" => Some(Direction::Export),
            "import" => Some(Direction::Import),
            "both" => Some(Direction::Both),
            _ => None,
        }
    }
    /// Whether shoal samples go to Zenoh.
    pub fn exports(self) -> bool {
        matches!(self, Direction::Export | Direction::Both)
    }
    /// Whether Zenoh samples go to shoal.
    pub fn imports(self) -> bool {
        matches!(self, Direction::Import | Direction::Both)
    }
}

/// What a full export queue does with one more message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropPolicy {
    /// The arriving message is dropped.
    DropNewest,
    /// The oldest queued message is dropped to make room (the receiver gets the most recent data).
    DropOldest,
    /// The bridge's shoal receive thread waits for room (at most [`BLOCK_MAX`]; then the arriving message is
    /// dropped): with reliable subscribers, a reliable publisher waits for the link, losing nothing. Every exported
    /// topic waits with it (one receive thread), so it is for a bridge of reliable streams that must not lose. With
    /// `reliable`, imported topics' publishers are reliable too (waiting at most `BLOCK_MAX` for reliable local
    /// subscribers, which holds the Zenoh session's receive thread and so slows the far side through the link).
    Block,
}

/// How long a full `block` queue makes the bridge's receive thread wait before it drops the arriving message.
pub const BLOCK_MAX: std::time::Duration = std::time::Duration::from_secs(1);

impl DropPolicy {
    const ALLOWED: &'static str = "drop_newest, drop_oldest, block";
    fn parse(s: &str) -> Option<DropPolicy> {
        match s {
            "drop_newest" => Some(DropPolicy::DropNewest),
            "drop_oldest" => Some(DropPolicy::DropOldest),
            "block" => Some(DropPolicy::Block),
            _ => None,
        }
    }
}

/// How much of one topic is exported per second at most: a token bucket that holds one second's worth (so a
/// burst of up to a second's budget passes at once). 0: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Messages per second.
    pub messages_per_s: u64,
    /// Payload bytes per second.
    pub bytes_per_s: u64,
}

/// Allowed `max_rate_hz`.
pub const RATE_RANGE: (i64, i64) = (0, 10_000_000);
/// Allowed `max_bytes_per_s`.
pub const BYTES_PER_S_RANGE: (i64, i64) = (0, 1 << 40);

/// A topic named in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRule {
    /// The shoal topic name.
    pub name: String,
    /// Which way.
    pub direction: Direction,
    /// Its export limits, when they differ from `[queue]`'s.
    pub limits: Option<Limits>,
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Zenoh mode.
    pub mode: Mode,
    /// Zenoh endpoints to connect to (`tcp/<host>:<port>`).
    pub connect: Vec<String>,
    /// Zenoh endpoints to listen on.
    pub listen: Vec<String>,
    /// The key prefix of every bridged topic.
    pub prefix: String,
    /// The bridge's shoal unit name; publishers of processes with this unit name are other bridges.
    pub unit_name: String,
    /// Statistics line interval, ms (0: none).
    pub stats_interval_ms: u64,
    /// How often shoal registration is scanned for new publishers, ms.
    pub scan_interval_ms: u64,
    /// The exports' shoal subscribers are reliable (a reliable publisher waits for the bridge's copy into the
    /// export queue rather than overwrite what the bridge has not taken).
    pub reliable: bool,
    /// Topics named explicitly.
    pub topics: Vec<TopicRule>,
    /// Patterns selecting topics.
    pub allow: Vec<Regex>,
    /// Patterns excluding topics from `allow`.
    pub deny: Vec<Regex>,
    /// The direction of topics selected by `allow`.
    pub select_direction: Direction,
    /// Zenoh keys this bridge imports at most (each is a shoal publisher with its ring); a sample of a further key
    /// is dropped and counted (`imports_refused`) unless an import has been idle for `import_idle_ms`, so remote
    /// publishers cannot make this host's bridge create publishers without end.
    pub max_imports: usize,
    /// With `max_imports` keys imported, a new key takes the slot of the key idle longest once that one has had no
    /// sample for this many milliseconds (its shoal publisher is dropped; a later sample imports it again).
    pub import_idle_ms: u64,
    /// Messages an export queue holds at most.
    pub queue_messages: usize,
    /// Payload bytes an export queue holds at most (one message larger than this still passes when the queue is
    /// empty).
    pub queue_bytes: usize,
    /// What a full export queue does.
    pub drop_policy: DropPolicy,
    /// Each exported topic's limits, unless its `[[topic]]` sets its own.
    pub limits: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Client,
            connect: Vec::new(),
            listen: Vec::new(),
            prefix: "shoal".into(),
            unit_name: "shoal_zenoh_bridge".into(),
            stats_interval_ms: 1000,
            scan_interval_ms: 250,
            reliable: true,
            topics: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            select_direction: Direction::Both,
            max_imports: 1024,
            import_idle_ms: 60_000,
            queue_messages: 1024,
            queue_bytes: 64 << 20,
            drop_policy: DropPolicy::DropOldest,
            limits: Limits::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    zenoh: Option<FileZenoh>,
    shoal: Option<FileShoal>,
    select: Option<FileSelect>,
    queue: Option<FileQueue>,
    #[serde(default)]
    topic: Vec<FileTopic>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileZenoh {
    mode: Option<Spanned<String>>,
    connect: Option<Vec<Spanned<String>>>,
    listen: Option<Vec<Spanned<String>>>,
    prefix: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShoal {
    unit_name: Option<Spanned<String>>,
    stats_interval_ms: Option<Spanned<i64>>,
    scan_interval_ms: Option<Spanned<i64>>,
    reliable: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSelect {
    allow: Option<Vec<Spanned<String>>>,
    deny: Option<Vec<Spanned<String>>>,
    direction: Option<Spanned<String>>,
    max_imports: Option<Spanned<i64>>,
    import_idle_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQueue {
    messages: Option<Spanned<i64>>,
    bytes: Option<Spanned<i64>>,
    policy: Option<Spanned<String>>,
    max_rate_hz: Option<Spanned<i64>>,
    max_bytes_per_s: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopic {
    name: Spanned<String>,
    direction: Option<Spanned<String>>,
    max_rate_hz: Option<Spanned<i64>>,
    max_bytes_per_s: Option<Spanned<i64>>,
}

/// Range of `[select] max_imports`.
pub const MAX_IMPORTS_RANGE: (i64, i64) = (1, 65536);
/// Range of `[select] import_idle_ms` (100 ms to a day).
pub const IMPORT_IDLE_MS_RANGE: (i64, i64) = (100, 86_400_000);
/// Messages range of `[queue] messages`.
pub const QUEUE_MESSAGES_RANGE: (i64, i64) = (1, 1 << 20);
/// Bytes range of `[queue] bytes`.
pub const QUEUE_BYTES_RANGE: (i64, i64) = (1024, 1 << 34);

/// Checks a Zenoh endpoint: `tcp/<host>:<port>` (the only link this build has).
pub fn check_endpoint(e: &str) -> Result<String, String> {
    let ok = e
        .strip_prefix("tcp/")
        .and_then(|a| a.rsplit_once(':'))
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if ok {
        Ok(e.to_string())
    } else {
        Err(format!("{e:?}: allowed tcp/<host>:<port>, e.g. tcp/10.0.0.1:7447 (this build has only Zenoh's TCP link)"))
    }
}

fn check_regex(r: &str) -> Result<Regex, String> {
    Regex::new(r).map_err(|e| format!("{r:?} is not a regular expression: {e}"))
}

fn check_topic(t: &str) -> Result<String, String> {
    if t.is_empty() { Err("\"\": a topic name is not empty".into()) } else { Ok(t.to_string()) }
}

impl Config {
    /// Reads and checks a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = read_file(path)?;
        Config::from_toml(&path.display().to_string(), &text)
    }

    /// Parses and checks configuration text; `path` is used in error messages.
    pub fn from_toml(path: &str, text: &str) -> Result<Config, ConfigError> {
        let cx = FileCtx::new(path, text);
        let file: FileConfig = cx.parse()?;
        let mut c = Config::default();
        if let Some(z) = file.zenoh {
            if let Some(v) = &z.mode {
                c.mode = cx.choice(v, "mode", Mode::parse, Mode::ALLOWED)?;
            }
            for v in z.connect.iter().flatten() {
                c.connect.push(cx.with(v, "connect", check_endpoint)?);
            }
            for v in z.listen.iter().flatten() {
                c.listen.push(cx.with(v, "listen", check_endpoint)?);
            }
            if let Some(v) = &z.prefix {
                cx.with(v, "prefix", check_prefix)?;
                c.prefix = v.get_ref().clone();
            }
        }
        if let Some(s) = file.shoal {
            if let Some(v) = &s.unit_name {
                c.unit_name = cx.with(v, "unit_name", check_topic)?;
            }
            if let Some(v) = &s.stats_interval_ms {
                c.stats_interval_ms = cx.int(v, "stats_interval_ms", (0, 3_600_000))?;
            }
            if let Some(v) = &s.scan_interval_ms {
                c.scan_interval_ms = cx.int(v, "scan_interval_ms", (10, 60_000))?;
            }
            if let Some(v) = s.reliable {
                c.reliable = v;
            }
        }
        if let Some(s) = file.select {
            for v in s.allow.iter().flatten() {
                c.allow.push(cx.with(v, "allow", check_regex)?);
            }
            for v in s.deny.iter().flatten() {
                c.deny.push(cx.with(v, "deny", check_regex)?);
            }
            if let Some(v) = &s.direction {
                c.select_direction = cx.choice(v, "direction", Direction::parse, Direction::ALLOWED)?;
            }
            if let Some(v) = &s.max_imports {
                c.max_imports = cx.int(v, "max_imports", MAX_IMPORTS_RANGE)?;
            }
            if let Some(v) = &s.import_idle_ms {
                c.import_idle_ms = cx.int(v, "import_idle_ms", IMPORT_IDLE_MS_RANGE)?;
            }
        }
        if let Some(q) = file.queue {
            if let Some(v) = &q.messages {
                c.queue_messages = cx.int(v, "messages", QUEUE_MESSAGES_RANGE)?;
            }
            if let Some(v) = &q.bytes {
                c.queue_bytes = cx.int(v, "bytes", QUEUE_BYTES_RANGE)?;
            }
            if let Some(v) = &q.policy {
                c.drop_policy = cx.choice(v, "policy", DropPolicy::parse, DropPolicy::ALLOWED)?;
            }
            if let Some(v) = &q.max_rate_hz {
                c.limits.messages_per_s = cx.int(v, "max_rate_hz", RATE_RANGE)?;
            }
            if let Some(v) = &q.max_bytes_per_s {
                c.limits.bytes_per_s = cx.int(v, "max_bytes_per_s", BYTES_PER_S_RANGE)?;
            }
        }
        for t in &file.topic {
            let name = cx.with(&t.name, "name", check_topic)?;
            let direction = match &t.direction {
                Some(v) => cx.choice(v, "direction", Direction::parse, Direction::ALLOWED)?,
                None => Direction::Both,
            };
            if c.topics.iter().any(|r| r.name == name) {
                return Err(cx.err(t.name.span(), format!("name = {name:?}: the topic is already listed")));
            }
            let limits = if t.max_rate_hz.is_some() || t.max_bytes_per_s.is_some() {
                let mut l = c.limits;
                if let Some(v) = &t.max_rate_hz {
                    l.messages_per_s = cx.int(v, "max_rate_hz", RATE_RANGE)?;
                }
                if let Some(v) = &t.max_bytes_per_s {
                    l.bytes_per_s = cx.int(v, "max_bytes_per_s", BYTES_PER_S_RANGE)?;
                }
                Some(l)
            } else {
                None
            };
            c.topics.push(TopicRule { name, direction, limits });
        }
        Ok(c)
    }

    /// Parses a `--topic NAME[,direction=export|import|both]` flag.
    pub fn parse_topic_flag(flag: &str) -> Result<TopicRule, ConfigError> {
        let err = |message: String| ConfigError::Flag { flag: format!("--topic {flag}"), message };
        let mut parts = flag.split(',');
        let name = check_topic(parts.next().unwrap_or_default()).map_err(err)?;
        let mut direction = Direction::Both;
        for p in parts {
            match p.split_once('=') {
                Some(("direction", v)) => {
                    direction = Direction::parse(v)
                        .ok_or_else(|| err(format!("direction={v}: allowed {}", Direction::ALLOWED)))?;
                }
                _ => return Err(err(format!("{p:?}: allowed direction=export|import|both"))),
            }
        }
        Ok(TopicRule { name, direction, limits: None })
    }

    /// Parses a `--mode` flag.
    pub fn parse_mode_flag(v: &str) -> Result<Mode, ConfigError> {
        Mode::parse(v).ok_or_else(|| ConfigError::Flag {
            flag: format!("--mode {v}"),
            message: format!("allowed {}", Mode::ALLOWED),
        })
    }

    /// Parses a `--drop-policy` flag.
    pub fn parse_policy_flag(v: &str) -> Result<DropPolicy, ConfigError> {
        DropPolicy::parse(v).ok_or_else(|| ConfigError::Flag {
            flag: format!("--drop-policy {v}"),
            message: format!("allowed {}", DropPolicy::ALLOWED),
        })
    }

    /// Parses a `--allow` or `--deny` flag.
    pub fn parse_regex_flag(flag: &str, v: &str) -> Result<Regex, ConfigError> {
        check_regex(v).map_err(|message| ConfigError::Flag { flag: format!("{flag} {v}"), message })
    }

    /// Parses a `--connect` or `--listen` flag.
    pub fn parse_endpoint_flag(flag: &str, v: &str) -> Result<String, ConfigError> {
        check_endpoint(v).map_err(|message| ConfigError::Flag { flag: format!("{flag} {v}"), message })
    }

    /// Parses a `--prefix` flag.
    pub fn parse_prefix_flag(v: &str) -> Result<String, ConfigError> {
        check_prefix(v).map_err(|message| ConfigError::Flag { flag: format!("--prefix {v}"), message })?;
        Ok(v.to_string())
    }

    /// The direction `topic` is bridged in, if any (see the module documentation).
    pub fn direction_of(&self, topic: &str) -> Option<Direction> {
        if let Some(r) = self.topics.iter().find(|r| r.name == topic) {
            return Some(r.direction);
        }
        (self.allow.iter().any(|r| r.is_match(topic)) && !self.deny.iter().any(|r| r.is_match(topic)))
            .then_some(self.select_direction)
    }

    /// The export limits of `topic`: its `[[topic]]`'s, else `[queue]`'s.
    pub fn limits_of(&self, topic: &str) -> Limits {
        self.topics.iter().find(|r| r.name == topic).and_then(|r| r.limits).unwrap_or(self.limits)
    }

    /// Whether anything is selected at all.
    pub fn selects_something(&self) -> bool {
        !self.topics.is_empty() || !self.allow.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/bridge.toml");
        let c = Config::from_file(Path::new(path)).expect("etc/bridge.toml");
        assert_eq!(c.mode, Mode::Client);
        assert_eq!(c.prefix, "shoal");
        assert!(c.selects_something());
    }

    #[test]
    fn selection() {
        let c = Config::from_toml(
            "t.toml",
            "[select]\nallow = [\"^robot/\"]\ndeny = [\"debug\"]\ndirection = \"export\"\n\
             [[topic]]\nname = \"robot/debug\"\ndirection = \"import\"\n",
        )
        .expect("valid");
        assert_eq!(c.direction_of("robot/pose"), Some(Direction::Export));
        assert_eq!(c.direction_of("robot/debug2"), None);
        assert_eq!(c.direction_of("robot/debug"), Some(Direction::Import));
        assert_eq!(c.direction_of("other"), None);
        assert_eq!(c.max_imports, 1024);
        let c = Config::from_toml("t.toml", "[select]\nmax_imports = 3\n").expect("valid");
        assert_eq!(c.max_imports, 3);
        assert_eq!(c.import_idle_ms, 60_000);
        let c = Config::from_toml("t.toml", "[select]\nimport_idle_ms = 500\n").expect("valid");
        assert_eq!(c.import_idle_ms, 500);
    }

    #[test]
    fn errors_name_the_place_and_the_allowed_values() {
        let cases: [(&str, &str); 9] = [
            ("[zenoh]\nmode = \"router\"\n", "t.toml:2:8: mode = \"router\": allowed client, peer"),
            (
                "[zenoh]\nconnect = [\"udp/1.2.3.4:7447\"]\n",
                "t.toml:2:12: connect = \"udp/1.2.3.4:7447\": allowed tcp/<host>:<port>",
            ),
            ("[zenoh]\nprefix = \"a//b\"\n", "t.toml:2:10: prefix = \"a//b\": chunks of"),
            ("[select]\nallow = [\"(\"]\n", "t.toml:2:10: allow = \"(\" is not a regular expression"),
            ("[queue]\nmessages = 0\n", "t.toml:2:12: messages = 0: allowed 1..=1048576"),
            ("[select]\nmax_imports = 0\n", "t.toml:2:15: max_imports = 0: allowed 1..=65536"),
            ("[select]\nimport_idle_ms = 99\n", "t.toml:2:18: import_idle_ms = 99: allowed 100..=86400000"),
            ("[queue]\npolicy = \"wait\"\n", "t.toml:2:10: policy = \"wait\": allowed drop_newest, drop_oldest, block"),
            (
                "[[topic]]\nname = \"a\"\n[[topic]]\nname = \"a\"\n",
                "t.toml:4:8: name = \"a\": the topic is already listed",
            ),
        ];
        for (text, want) in cases {
            let e = Config::from_toml("t.toml", text).expect_err(text).to_string();
            assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}");
        }
        let e = Config::from_toml("t.toml", "[zenoh]\nmodee = 1\n").expect_err("unknown key").to_string();
        assert!(e.starts_with("t.toml:2:1: unknown field `modee`"), "{e}");
    }

    #[test]
    fn limits_per_topic_and_by_default() {
        let c = Config::from_toml(
            "b.toml",
            "[queue]\nmax_rate_hz = 100\n[[topic]]\nname = \"cam\"\nmax_bytes_per_s = 1000000\n\
             [[topic]]\nname = \"imu\"\n",
        )
        .unwrap();
        assert_eq!(c.limits_of("imu"), Limits { messages_per_s: 100, bytes_per_s: 0 });
        assert_eq!(c.limits_of("other"), Limits { messages_per_s: 100, bytes_per_s: 0 });
        assert_eq!(c.limits_of("cam"), Limits { messages_per_s: 100, bytes_per_s: 1_000_000 });
        let e = Config::from_toml("b.toml", "[queue]\nmax_rate_hz = -1\n").unwrap_err().to_string();
        assert!(e.starts_with("b.toml:2:15: max_rate_hz = -1: allowed 0..=10000000"), "{e}");
        let e =
            Config::from_toml("b.toml", "[[topic]]\nname = \"a\"\nmax_bytes_per_s = 1.5\n").unwrap_err().to_string();
        assert!(e.starts_with("b.toml:3:"), "{e}");
    }

    #[test]
    fn flags() {
        assert_eq!(
            Config::parse_topic_flag("a/b,direction=import").expect("valid"),
            TopicRule { name: "a/b".into(), direction: Direction::Import, limits: None }
        );
        let e = Config::parse_topic_flag("a,direction=up").expect_err("bad").to_string();
        assert_eq!(e, "--topic a,direction=up: direction=up: allowed export, import, both");
        assert!(Config::parse_topic_flag("a,x=1").is_err());
        assert!(Config::parse_endpoint_flag("--connect", "tcp/10.0.0.1:7447").is_ok());
        assert!(Config::parse_endpoint_flag("--connect", "tcp/10.0.0.1").is_err());
        assert!(Config::parse_mode_flag("router").is_err());
    }
}
