//! The one declaration of every `ecal.ini` key shoal reads: section, name, documentation, allowed
//! values, and the mapping to and from [`Config`] fields. The parser ([`super::parse`]) and the
//! documented default file ([`super::generate`]) are both driven by [`KEYS`] and [`SECTIONS`].

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::KeyFileError;
use super::{AuthKey, Config, EcalLayer, HugePages, ShmAccess, UdpSendMode, WaitStrategy};

/// Spin time written for `spin_us` when the configured strategy does not spin.
pub(crate) const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// A section of the generated file.
#[derive(Debug)]
pub(crate) struct SectionDef {
    /// Name inside `[...]`.
    pub(crate) name: &'static str,
    /// Heading of the comment block.
    pub(crate) title: &'static str,
    /// Comment lines under the heading.
    pub(crate) doc: &'static [&'static str],
}

/// One key: where it lives, what it means, what it accepts, and which field it sets.
#[derive(Debug)]
pub(crate) struct KeyDef {
    /// Section name (canonical spelling; matched ASCII case-insensitively).
    pub(crate) section: &'static str,
    /// Key name (canonical spelling; matched ASCII case-insensitively).
    pub(crate) key: &'static str,
    /// Another `(section, key)` read as this key (e.g. the eCAL 5 name); not written when generating.
    pub(crate) alias: Option<(&'static str, &'static str)>,
    /// Meaning, one comment line per entry.
    pub(crate) doc: &'static [&'static str],
    /// What the key accepts (shown in the file and in errors). Any `A..=B` in it is checked by a test.
    pub(crate) allowed: &'static str,
    /// The value of this key for a configuration, as written in the file.
    pub(crate) get: fn(&Config) -> String,
    /// Parses `value` into the draft; `None` when the value is not allowed. Pushes warnings to `notes`.
    pub(crate) set: fn(&mut Draft, &str, &mut Vec<String>) -> Option<()>,
}

/// The receive strategy without its spin time (`spin_us` is a separate key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitKind {
    Block,
    SpinThenBlock,
    BusySpin,
}

/// A configuration being parsed: the fields that map 1:1 plus the split wait strategy.
#[derive(Debug)]
pub(crate) struct Draft {
    pub(crate) cfg: Config,
    pub(crate) wait: WaitKind,
    pub(crate) spin: Duration,
    /// Why the last refused `[shoal_auth] key_file` was refused (taken by the parser into [`ConfigError::KeyFile`]).
    pub(crate) key_file_refused: Option<(PathBuf, KeyFileError)>,
}

impl Draft {
    pub(crate) fn new(cfg: Config) -> Self {
        let (wait, spin) = split_wait(cfg.receive.wait);
        Draft { cfg, wait, spin, key_file_refused: None }
    }

    pub(crate) fn finish(mut self) -> Config {
        self.cfg.receive.wait = match self.wait {
            WaitKind::Block => WaitStrategy::Block,
            WaitKind::SpinThenBlock => WaitStrategy::SpinThenBlock(self.spin),
            WaitKind::BusySpin => WaitStrategy::BusySpin,
        };
        self.cfg
    }
}

pub(crate) fn split_wait(w: WaitStrategy) -> (WaitKind, Duration) {
    match w {
        WaitStrategy::Block => (WaitKind::Block, DEFAULT_SPIN),
        WaitStrategy::SpinThenBlock(d) => (WaitKind::SpinThenBlock, d),
        WaitStrategy::BusySpin => (WaitKind::BusySpin, DEFAULT_SPIN),
    }
}

/// Index of a key in [`KEYS`] by its canonical name (for cross-field rules).
pub(crate) fn index_of(section: &str, key: &str) -> Option<usize> {
    KEYS.iter().position(|k| k.section == section && k.key == key)
}

/// Finds the key for `(section, key)` as written in a file (case-insensitive, aliases included).
pub(crate) fn lookup(section: &str, key: &str) -> Option<usize> {
    let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    KEYS.iter().position(|k| {
        (eq(k.section, section) && eq(k.key, key)) || k.alias.is_some_and(|(s, n)| eq(s, section) && eq(n, key))
    })
}

/// Whether any key (or alias) lives in this section.
pub(crate) fn section_known(section: &str) -> bool {
    KEYS.iter().any(|k| {
        k.section.eq_ignore_ascii_case(section) || k.alias.is_some_and(|(s, _)| s.eq_ignore_ascii_case(section))
    })
}

// ---------------------------------------------------------------------------------------------
// Value syntax helpers. All return `None` for a value that is not allowed.

/// An unsigned decimal of ASCII digits only (no sign, no spaces inside).
fn digits(v: &str) -> Option<u64> {
    if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

fn int_in(v: &str, lo: u64, hi: u64) -> Option<u64> {
    digits(v).filter(|n| (lo..=hi).contains(n))
}

fn port(v: &str) -> Option<u16> {
    int_in(v, 1, 65535).and_then(|n| u16::try_from(n).ok())
}

fn boolean(v: &str) -> Option<bool> {
    const TRUE: [&str; 4] = ["true", "1", "yes", "on"];
    const FALSE: [&str; 4] = ["false", "0", "no", "off"];
    if TRUE.iter().any(|t| t.eq_ignore_ascii_case(v)) {
        Some(true)
    } else if FALSE.iter().any(|f| f.eq_ignore_ascii_case(v)) {
        Some(false)
    } else {
        None
    }
}

fn ipv4(v: &str) -> Option<Ipv4Addr> {
    v.parse().ok()
}

/// Prefix length of a contiguous netmask, `None` if the ones are not contiguous from the top.
fn netmask_prefix(m: Ipv4Addr) -> Option<u32> {
    let bits = u32::from(m);
    (bits.leading_ones() + bits.trailing_zeros() == 32).then(|| bits.leading_ones())
}

/// Bytes with an optional binary suffix: `k`/`kb`/`kib`, `m`/..., `g`/... (case-insensitive).
pub(crate) fn size(v: &str) -> Option<u64> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, suffix) = v.split_at(split);
    let n = digits(num)?;
    let suffix = suffix.trim_start();
    let units: [(&[&str], u64); 4] = [
        (&["", "b"], 1),
        (&["k", "kb", "kib"], 1 << 10),
        (&["m", "mb", "mib"], 1 << 20),
        (&["g", "gb", "gib"], 1 << 30),
    ];
    let (_, mult) = units.iter().find(|(names, _)| names.iter().any(|s| s.eq_ignore_ascii_case(suffix)))?;
    n.checked_mul(*mult)
}

pub(crate) fn fmt_size(n: usize) -> String {
    for (suffix, unit) in [("g", 1usize << 30), ("m", 1 << 20), ("k", 1 << 10)] {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

/// Highest CPU id accepted in `cpu_affinity` (glibc `CPU_SETSIZE` - 1).
const MAX_CPU: usize = 1023;

/// `""` or a comma list of CPU ids and inclusive ranges `a-b`; no CPU twice.
fn cpu_list(v: &str) -> Option<Vec<usize>> {
    if v.is_empty() {
        return Some(Vec::new());
    }
    let mut seen = [false; MAX_CPU + 1];
    let mut out = Vec::new();
    for part in v.split(',') {
        let part = part.trim();
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a = usize::try_from(digits(a.trim())?).ok()?;
        let b = usize::try_from(digits(b.trim())?).ok()?;
        if a > b || b > MAX_CPU {
            return None;
        }
        for cpu in a..=b {
            let slot = seen.get_mut(cpu)?;
            if *slot {
                return None;
            }
            *slot = true;
            out.push(cpu);
        }
    }
    Some(out)
}

fn text_ok(v: &str, max_len: usize) -> bool {
    v.len() <= max_len && !v.chars().any(|c| c.is_control() || c == '"')
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

// ---------------------------------------------------------------------------------------------

/// Sections in the order they are written.
pub(crate) static SECTIONS: &[SectionDef] = &[
    SectionDef { name: "common", title: "COMMON SETTINGS (eCAL 5 names)", doc: &[] },
    SectionDef {
        name: "network",
        title: "NETWORK SETTINGS (eCAL 5 names)",
        doc: &[
            "Other eCAL 5 keys of this section (multicast_config_version, multicast_sndbuf, ...)",
            "are accepted and ignored with a warning. shoal always computes topic groups the eCAL",
            "multicast_config_version = v2 way, as eCAL 6 does.",
        ],
    },
    SectionDef {
        name: "publisher",
        title: "PUBLISHER LAYERS (eCAL 5 names; the native ring between shoal processes is [shoal_shm_ring])",
        doc: &[],
    },
    SectionDef { name: "subscriber", title: "SUBSCRIBER LAYERS", doc: &[] },
    SectionDef {
        name: "monitoring",
        title: "LOGGING (eCAL 5 names)",
        doc: &[
            "Other eCAL 5 keys of this section (timeout, filter_excl, filter_incl, filter_log_con,",
            "filter_log_file) are accepted and ignored with a warning: an application installs its own",
            "console or file output (tracing-subscriber); shoal sends log records only on eCAL's UDP log",
            "channel, and only when the application installs shoal::logging's layer.",
        ],
    },
    SectionDef { name: "shoal_registration", title: "SHOAL: REGISTRATION", doc: &[] },
    SectionDef { name: "shoal_network", title: "SHOAL: UDP ADDRESSES AND PORTS", doc: &[] },
    SectionDef {
        name: "shoal_shm_ring",
        title: "SHOAL: NATIVE SHARED-MEMORY RING (between shoal processes on one host)",
        doc: &[],
    },
    SectionDef { name: "shoal_receive", title: "SHOAL: RECEIVING", doc: &[] },
    SectionDef {
        name: "shoal_reliable",
        title: "SHOAL: RELIABLE DELIVERY OVER THE NATIVE RING",
        doc: &[
            "A reliable publisher waits (spins, then sleeps on a futex in its ring), for at most",
            "timeout_ms, before it overwrites a message that a reliable subscriber in another shoal",
            "process has not taken yet; both ends must be reliable. A subscriber whose process is gone",
            "is taken out of this flow control at once, one that stays a whole ring behind for",
            "timeout_ms is taken out for good and reads on, losing what it misses (both counted). No",
            "lock is involved: a crashed process blocks nobody for longer than timeout_ms. Same-process",
            "subscribers and the eCAL layers keep their queue policy ([shoal_receive] queue_*).",
        ],
    },
    SectionDef {
        name: "shoal_history",
        title: "SHOAL: HISTORY FOR LATE JOINERS",
        doc: &[
            "A publisher made with PublisherBuilder::history(n) keeps its last n messages (within",
            "max_bytes of payload); a subscriber made with SubscriberBuilder::history gets them, in",
            "order and once, before live data, when it matches (same process, native ring, TCP;",
            "over UDP and eCAL shared memory it fetches them over TCP, so a history publisher opens its",
            "TCP listener at creation when [publisher] use_tcp is on). Live data that comes before the",
            "history waits for it, 3 registration periods (2 s at least; ended within a period after);",
            "while a publisher's registration is unknown its data waits too, as long. It holds at most 4 x",
            "max_bytes per publisher meanwhile. eCAL subscribers get live data only, as from any publisher.",
        ],
    },
    SectionDef {
        name: "shoal_tcp",
        title: "SHOAL: eCAL TCP LAYER",
        doc: &[
            "Every subscriber connection of a publisher has a send queue bounded in bytes. By default a",
            "message that does not fit is dropped whole and counted (the publisher never waits, as for the",
            "other layers and as eCAL's tcp_pubsub, which keeps only the newest pending message); with",
            "send_timeout_ms > 0 the publisher waits up to that long for room first.",
            "In local mode a publisher's listener is bound to the loopback interface (any 127.x.y.z and",
            "::1 reach it, other hosts do not), in network mode to every address. A publisher answers a",
            "connection's handshake only for a subscriber that registration announced: a matched subscriber",
            "of its topic with TCP enabled whose registration came from the connection's address (from this",
            "host: registered from a loopback address or under this host's name), one connection for each",
            "such subscriber; under [shoal_auth] a protected topic counts authenticated registrations only.",
            "Other connections are closed after handshake_timeout_ms. A subscriber connects only to",
            "publishers it matched, at ports from 1024 on, one attempt at a time to an address that has not",
            "answered a tcp_pubsub handshake since its last failure (100 ms doubling to 2 s between them).",
            "Refusals, time-outs and dropped connections are counted (Node::snapshot().tcp).",
        ],
    },
    SectionDef {
        name: "shoal_service",
        title: "SHOAL: SERVICE SERVERS AND CLIENTS",
        doc: &[
            "A server listens on an ephemeral TCP port it announces in registration (eCAL's service",
            "protocol, version 1): in local mode on the loopback interface, in network mode on every",
            "address. The I/O thread accepts connections and reads requests; the method handlers of all",
            "servers of the process run on handler_threads threads, never on the I/O thread. Every bound",
            "below is counted when it refuses something (Node::snapshot().services).",
        ],
    },
    SectionDef {
        name: "shoal_logging",
        title: "SHOAL: LOG MESSAGES ON eCAL'S LOG CHANNEL",
        doc: &[
            "shoal::logging's tracing layer (installed by the application, never by the library) sends the",
            "records [monitoring] filter_log_udp selects as eCAL log messages, to the registration address",
            "([network]) on this port, from a queue its own thread drains: logging never waits for the",
            "network. What the bounds below refuse is counted (shoal::logging::LogStatsHandle::stats).",
        ],
    },
    SectionDef { name: "shoal_io", title: "SHOAL: I/O THREAD", doc: &[] },
    SectionDef { name: "shoal_security", title: "SHOAL: ACCESS TO SHARED MEMORY", doc: &[] },
    SectionDef {
        name: "shoal_auth",
        title: "SHOAL: AUTHENTICATION BETWEEN SHOAL PEERS (off unless a key is set)",
        doc: &[
            "With a key, this process sends its process registration, the registration of its protected",
            "publishers and subscribers, and the UDP data of its protected topics in an envelope carrying",
            "an HMAC-SHA256 tag (truncated to 16 bytes), a sender id, a counter and the send time; for",
            "protected topics it accepts only registration and UDP data whose tag verifies with the same",
            "key, whose counter it has not seen (a sliding window of 1024 counters per sender, [shoal_limits]",
            "auth_senders senders) and whose time is within max_age_ms. Unauthenticated datagrams for",
            "protected topics, and wrongly signed, replayed and too old ones for any topic, are dropped and",
            "counted per cause (Node::snapshot().auth, per topic where it is known), each cause logged once.",
            "Unprotected topics are registered and sent as eCAL does, without envelope, and eCAL peers keep",
            "working on them. eCAL peers drop the envelope unread (its magic is not \"ECAL\"): they see",
            "neither the protected topics nor this process's own registration entry, and a shoal process",
            "with a key does not match the eCAL publishers and subscribers of protected topics, over any",
            "layer. Shared memory between shoal processes of one host is guarded by file modes",
            "([shoal_security]); authentication decides which peers are matched at all.",
        ],
    },
    SectionDef {
        name: "shoal_limits",
        title: "SHOAL: BOUNDS ON WHAT OTHER PROCESSES CAN COST THIS ONE",
        doc: &[
            "Registration samples and datagrams come from any process of the host (or, in network mode,",
            "the network). Whatever they announce, this process stores and does a bounded amount; what",
            "goes over a bound is dropped and counted. The defaults leave room for large real systems.",
        ],
    },
];

const BOOL: &str = "true or false (also 1/0, yes/no, on/off)";

/// eCAL's log level names and their `eLogLevel` bits, in the order a filter is written.
const LOG_LEVELS: [(&str, u8); 8] = [
    ("info", 1),
    ("warning", 2),
    ("error", 4),
    ("fatal", 8),
    ("debug1", 16),
    ("debug2", 32),
    ("debug3", 64),
    ("debug4", 128),
];

/// eCAL's log level filter: a comma list of level names, `all`, or nothing (no level).
pub(crate) fn log_levels(v: &str) -> Option<u8> {
    let mut mask = 0u8;
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            mask = 0xff;
            continue;
        }
        let (_, bit) = LOG_LEVELS.iter().find(|(name, _)| name.eq_ignore_ascii_case(part))?;
        mask |= bit;
    }
    Some(mask)
}

/// A level mask as eCAL writes it (`info, warning, error, fatal`; `all`; empty for none).
pub(crate) fn fmt_log_levels(mask: u8) -> String {
    if mask == 0xff {
        return "all".into();
    }
    LOG_LEVELS.iter().filter(|(_, bit)| mask & bit != 0).map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}
const LAYER_LIST: &str = "a comma list of shm, udp (also udp_mc), tcp, each at most once, at least one";

/// A layer priority list: `shm, udp, tcp` in any order, no layer twice, not empty.
fn layer_list(v: &str) -> Option<Vec<EcalLayer>> {
    let mut out = Vec::new();
    for part in v.split(',') {
        let layer = match part.trim().to_ascii_lowercase().as_str() {
            "shm" => EcalLayer::Shm,
            "udp" | "udp_mc" => EcalLayer::Udp,
            "tcp" => EcalLayer::Tcp,
            _ => return None,
        };
        if out.contains(&layer) {
            return None;
        }
        out.push(layer);
    }
    (!out.is_empty()).then_some(out)
}

fn layer_list_text(list: &[EcalLayer]) -> String {
    list.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
}
const ECAL5_USE: &str = "true or false (also eCAL 5's 0 = off, 1 = on, 2 = auto, read as on)";

/// eCAL 5's `use_*` publisher keys: 0 off, 1 on, 2 auto; shoal also takes booleans.
fn ecal5_use(v: &str) -> Option<bool> {
    if v.trim() == "2" || v.trim().eq_ignore_ascii_case("auto") { Some(true) } else { boolean(v) }
}

/// The warning for a value that asks for a feature shoal does not have yet (the key is read so that eCAL's own
/// files load; `what` names the missing feature, `applied` what the value still does, if anything).
fn not_supported(notes: &mut Vec<String>, section: &str, key: &str, value: &str, what: &str, applied: &str) {
    notes.push(format!("[{section}] {key} = {value}: {what} is not supported yet; {applied}"));
}

/// Every key, in the order it is written (and in which cross-field rules look at it).
pub(crate) static KEYS: &[KeyDef] = &[
    // ----- [common]
    KeyDef {
        section: "common",
        key: "registration_refresh",
        alias: None,
        doc: &[
            "Period of this process's registration samples, in milliseconds.",
            "Must be smaller than registration_timeout.",
        ],
        allowed: "1..=3600000 (milliseconds)",
        get: |c| ms(c.registration.refresh),
        set: |d, v, _| {
            d.cfg.registration.refresh = Duration::from_millis(int_in(v, 1, 3_600_000)?);
            Some(())
        },
    },
    KeyDef {
        section: "common",
        key: "registration_timeout",
        alias: None,
        doc: &[
            "A remote process, publisher or subscriber whose registration is not refreshed for this",
            "long is dropped, in milliseconds. Must be greater than registration_refresh.",
            "(eCAL 5 shipped 60000 here; eCAL 6 uses 10000.)",
        ],
        allowed: "1..=3600000 (milliseconds)",
        get: |c| ms(c.registration.timeout),
        set: |d, v, _| {
            d.cfg.registration.timeout = Duration::from_millis(int_in(v, 1, 3_600_000)?);
            Some(())
        },
    },
    // ----- [network]
    KeyDef {
        section: "network",
        key: "network_enabled",
        alias: None,
        doc: &[
            "true:  communicate across hosts (registration and UDP data by multicast).",
            "false: this host only (registration and UDP data broadcast to",
            "       [shoal_network] local_broadcast).",
        ],
        allowed: BOOL,
        get: |c| c.network.enabled.to_string(),
        set: |d, v, _| {
            d.cfg.network.enabled = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "network",
        key: "multicast_group",
        alias: None,
        doc: &[
            "Base multicast group of network mode: registration is sent to it, and the per-topic",
            "UDP data groups are derived from it with multicast_mask.",
        ],
        allowed: "an IPv4 multicast address (224.0.0.0 to 239.255.255.255)",
        get: |c| c.network.multicast_group.to_string(),
        set: |d, v, _| {
            d.cfg.network.multicast_group = ipv4(v).filter(Ipv4Addr::is_multicast)?;
            Some(())
        },
    },
    KeyDef {
        section: "network",
        key: "multicast_mask",
        alias: None,
        doc: &[
            "Netmask of the per-topic multicast groups (eCAL multicast_config_version = v2 style).",
            "An eCAL 5 v1 style mask such as 0.0.0.15 is read as its inverse (255.255.255.240),",
            "with a warning.",
        ],
        allowed: "a netmask from 240.0.0.0 to 255.255.255.255, or the inverse of one (eCAL 5 v1)",
        get: |c| c.network.multicast_mask.to_string(),
        set: |d, v, notes| {
            let mask = ipv4(v)?;
            if netmask_prefix(mask).is_some_and(|p| p >= 4) {
                d.cfg.network.multicast_mask = mask;
                return Some(());
            }
            let inverse = Ipv4Addr::from(!u32::from(mask));
            if netmask_prefix(inverse).is_some_and(|p| p >= 4) {
                notes.push(format!(
                    "[network] multicast_mask = {mask} is an eCAL 5 v1 style mask; \
                     read as {inverse} (write that to silence this warning)"
                ));
                d.cfg.network.multicast_mask = inverse;
                return Some(());
            }
            None
        },
    },
    KeyDef {
        section: "network",
        key: "multicast_port",
        alias: None,
        doc: &[
            "UDP port of the registration samples, local and network mode",
            "(eCAL 6: registration.network.udp.port). eCAL 5 also used this port + 2 for UDP",
            "data; shoal takes the data port from [shoal_network] data_port instead.",
        ],
        allowed: "1..=65535",
        get: |c| c.registration.port.to_string(),
        set: |d, v, _| {
            d.cfg.registration.port = port(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "network",
        key: "multicast_ttl",
        alias: None,
        doc: &[
            "Time-to-live (hop limit) of multicast datagrams in network mode.",
            "(eCAL 5 shipped 2 here; eCAL 6 uses 3.)",
        ],
        allowed: "0..=255",
        get: |c| c.network.multicast_ttl.to_string(),
        set: |d, v, _| {
            d.cfg.network.multicast_ttl = u32::try_from(int_in(v, 0, 255)?).ok()?;
            Some(())
        },
    },
    // ----- [publisher]
    KeyDef {
        section: "publisher",
        key: "use_shm",
        alias: None,
        doc: &["Serve eCAL shared-memory subscribers on this host (eCAL memfiles)."],
        allowed: ECAL5_USE,
        get: |c| c.layers.pub_shm.to_string(),
        set: |d, v, _| {
            d.cfg.layers.pub_shm = ecal5_use(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "use_udp_mc",
        alias: None,
        doc: &["Serve UDP subscribers (local broadcast, or multicast in network mode)."],
        allowed: ECAL5_USE,
        get: |c| c.layers.pub_udp.to_string(),
        set: |d, v, _| {
            d.cfg.layers.pub_udp = ecal5_use(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "use_tcp",
        alias: None,
        doc: &[
            "Serve TCP subscribers (eCAL tcp_pubsub): a publisher starts its TCP server when a subscriber",
            "that has TCP enabled matches and no layer earlier in the priority list serves it, or at",
            "creation when it keeps a history for late joiners (shoal subscribers fetch it over TCP when",
            "their live data comes over UDP or eCAL shared memory).",
        ],
        allowed: ECAL5_USE,
        get: |c| c.layers.pub_tcp.to_string(),
        set: |d, v, _| {
            d.cfg.layers.pub_tcp = ecal5_use(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "priority_local",
        alias: None,
        doc: &[
            "Layers a publisher chooses from, in order, for a subscriber on this host (eCAL 6",
            "publisher.layer_priority_local); the first one both sides have enabled carries the data.",
            "The native ring between shoal processes comes before all of them.",
        ],
        allowed: LAYER_LIST,
        get: |c| layer_list_text(&c.layers.priority_local),
        set: |d, v, _| {
            d.cfg.layers.priority_local = layer_list(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "priority_remote",
        alias: None,
        doc: &[
            "Layers a publisher chooses from, in order, for a subscriber on another host (eCAL 6",
            "publisher.layer_priority_remote); shm is never used across hosts.",
        ],
        allowed: LAYER_LIST,
        get: |c| layer_list_text(&c.layers.priority_remote),
        set: |d, v, _| {
            d.cfg.layers.priority_remote = layer_list(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "memfile_minsize",
        alias: None,
        doc: &["Smallest payload capacity of an eCAL shared-memory memfile (suffixes k, m, g as for slot_size)."],
        allowed: "64..=1073741824 bytes (64 to 1g)",
        get: |c| fmt_size(c.layers.memfile_min_size as usize),
        set: |d, v, _| {
            d.cfg.layers.memfile_min_size = size(v).filter(|n| (64..=1 << 30).contains(n))?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "memfile_reserve",
        alias: None,
        doc: &["Extra capacity, in percent, when a memfile is re-created for a larger message."],
        allowed: "0..=1000",
        get: |c| c.layers.memfile_reserve_percent.to_string(),
        set: |d, v, _| {
            d.cfg.layers.memfile_reserve_percent = int_in(v, 0, 1000)?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "memfile_ack_timeout",
        alias: None,
        doc: &[
            "Milliseconds a publisher waits, per message, until every eCAL shared-memory subscriber process has",
            "read it (eCAL's acknowledge handshake); 0 does not wait.",
        ],
        allowed: "0..=60000",
        get: |c| c.layers.memfile_ack_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.layers.memfile_ack_timeout_ms = u32::try_from(int_in(v, 0, 60_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "publisher",
        key: "memfile_buffer_count",
        alias: None,
        doc: &[
            "Memfiles a publisher writes in turn, so a slow eCAL subscriber still reads one while the next",
            "message goes to another.",
        ],
        allowed: "1..=16",
        get: |c| c.layers.memfile_buffer_count.to_string(),
        set: |d, v, _| {
            d.cfg.layers.memfile_buffer_count = u32::try_from(int_in(v, 1, 16)?).ok()?;
            Some(())
        },
    },
    // ----- [subscriber]
    KeyDef {
        section: "subscriber",
        key: "shm_rec_enabled",
        alias: None,
        doc: &["Receive from eCAL publishers through their shared-memory memfiles."],
        allowed: BOOL,
        get: |c| c.layers.sub_shm.to_string(),
        set: |d, v, _| {
            d.cfg.layers.sub_shm = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "subscriber",
        key: "udp_mc_rec_enabled",
        alias: None,
        doc: &["Receive UDP (from eCAL publishers, and from shoal publishers on other hosts)."],
        allowed: BOOL,
        get: |c| c.layers.sub_udp.to_string(),
        set: |d, v, _| {
            d.cfg.layers.sub_udp = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "subscriber",
        key: "tcp_rec_enabled",
        alias: None,
        doc: &[
            "Receive TCP (eCAL tcp_pubsub): connect to the TCP server of each matching publisher that",
            "announces one (eCAL 6 default: off).",
        ],
        allowed: BOOL,
        get: |c| c.layers.sub_tcp.to_string(),
        set: |d, v, _| {
            d.cfg.layers.sub_tcp = boolean(v)?;
            Some(())
        },
    },
    // ----- [monitoring]
    KeyDef {
        section: "monitoring",
        key: "filter_log_udp",
        alias: None,
        doc: &[
            "Levels of the records sent as eCAL log messages on UDP (eCAL 6: logging.provider.udp.log_level).",
            "tracing's ERROR is error, WARN warning, INFO info, DEBUG debug1, TRACE debug2.",
        ],
        allowed: "a comma list of info, warning, error, fatal, debug1, debug2, debug3, debug4; all; or empty (none)",
        get: |c| fmt_log_levels(c.logging.udp_levels),
        set: |d, v, _| {
            d.cfg.logging.udp_levels = log_levels(v)?;
            Some(())
        },
    },
    // ----- [shoal_registration]
    KeyDef {
        section: "shoal_registration",
        key: "loopback",
        alias: None,
        doc: &["Apply registration samples sent by this process itself (eCAL 6: registration.loopback)."],
        allowed: BOOL,
        get: |c| c.registration.loopback.to_string(),
        set: |d, v, _| {
            d.cfg.registration.loopback = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_registration",
        key: "shm_transport_domain",
        alias: Some(("network", "host_group_name")),
        doc: &[
            "The shared-memory domain announced in registration; empty means the host name",
            "(eCAL 6: registration.shm_transport_domain). In local mode, registrations of processes",
            "with another host name but this domain are accepted. eCAL uses shared memory between",
            "all processes of one domain; shoal only between processes of one host name: shared",
            "memory across host names is not supported yet, and a non-empty value is warned about",
            "at start-up. eCAL 5's [network] host_group_name is read as this key.",
        ],
        allowed: "empty (the host name) or up to 255 bytes without control characters or '\"'",
        get: |c| c.registration.shm_transport_domain.clone(),
        set: |d, v, notes| {
            if !text_ok(v, 255) {
                return None;
            }
            if !v.is_empty() {
                not_supported(
                    notes,
                    "shoal_registration",
                    "shm_transport_domain",
                    &format!("{v:?}"),
                    "shared memory with processes of another host name",
                    "the domain is announced and accepted in registration, but shoal uses shared memory only \
                     within its own host name",
                );
            }
            d.cfg.registration.shm_transport_domain = v.to_owned();
            Some(())
        },
    },
    // ----- [shoal_network]
    KeyDef {
        section: "shoal_network",
        key: "data_port",
        alias: None,
        doc: &[
            "UDP port of the data layer (eCAL 6: transport_layer.udp.port).",
            "Must differ from [network] multicast_port.",
        ],
        allowed: "1..=65535",
        get: |c| c.network.data_port.to_string(),
        set: |d, v, _| {
            d.cfg.network.data_port = port(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "local_broadcast",
        alias: None,
        doc: &["Broadcast address of registration and UDP data in local mode (network_enabled = false)."],
        allowed: "an IPv4 address that is neither multicast nor 0.0.0.0",
        get: |c| c.network.local_broadcast.to_string(),
        set: |d, v, _| {
            d.cfg.network.local_broadcast = ipv4(v).filter(|a| !a.is_multicast() && !a.is_unspecified())?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "multicast_interface",
        alias: None,
        doc: &[
            "Address of the local interface that sends multicast and joins the groups in network",
            "mode (registration and data alike); 0.0.0.0 takes the interface of the route to",
            "multicast_group, as the operating system would.",
        ],
        allowed: "0.0.0.0 or a unicast IPv4 address",
        get: |c| c.network.multicast_interface.to_string(),
        set: |d, v, _| {
            d.cfg.network.multicast_interface = ipv4(v).filter(|a| !a.is_multicast() && !a.is_broadcast())?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "receive_buffer",
        alias: None,
        doc: &[
            "Receive buffer of the UDP sockets, registration and data, in bytes (eCAL 6:",
            "transport_layer.udp.receive_buffer). Datagrams that arrive while it is full are lost: size it for",
            "the bursts a subscriber must absorb (a 6 MB message is 100 datagrams of 64 KB). The kernel caps it at",
            "net.core.rmem_max unless the process may raise that (root); a capped request is warned about once,",
            "with the limit.",
        ],
        allowed: "65536..=1073741824 (bytes)",
        get: |c| c.network.receive_buffer.to_string(),
        set: |d, v, _| {
            d.cfg.network.receive_buffer = usize::try_from(int_in(v, 65536, 1073741824)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_buffer",
        alias: None,
        doc: &[
            "Send buffer of the UDP send socket in bytes (eCAL 6: transport_layer.udp.send_buffer); capped at",
            "net.core.wmem_max like the receive buffer.",
        ],
        allowed: "65536..=1073741824 (bytes)",
        get: |c| c.network.send_buffer.to_string(),
        set: |d, v, _| {
            d.cfg.network.send_buffer = usize::try_from(int_in(v, 65536, 1073741824)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "max_send_rate",
        alias: None,
        doc: &[
            "Pacing of the UDP data layer: bytes per second (suffixes k, m, g) this process sends at most over",
            "UDP, summed over its publishers (a token bucket holding 1 ms of the rate, at least two datagrams;",
            "a send() that finds it empty sleeps on the publisher's thread until it refills). 0: unpaced, a",
            "message is sent as fast as the socket takes it. Pacing makes large messages at a high rate arrive",
            "where the receivers' socket buffers would otherwise overflow; registration is not paced.",
        ],
        allowed: "0 or 65536..=1099511627776 bytes per second (64k to 1024g)",
        get: |c| fmt_size(usize::try_from(c.network.max_send_rate).unwrap_or(usize::MAX)),
        set: |d, v, _| {
            d.cfg.network.max_send_rate = size(v).filter(|n| *n == 0 || (65536..=1 << 40).contains(n))?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_mode",
        alias: None,
        doc: &[
            "Which thread sends UDP data (the data layer only; registration is always sent by the I/O thread):",
            "  auto         per message: a message of up to send_batch_max bytes that follows its",
            "               publisher's previous one within 50 µs (a stream) is queued for the I/O thread's",
            "               batches; a lone message, or a larger one, is sent from the publisher's thread",
            "               at once. A publisher's messages still queued keep its next ones in the queue,",
            "               so none are reordered.",
            "  user_thread  the publisher's send() calls send_to itself, one system call per datagram (the",
            "               least latency for a lone message)",
            "  io_thread    send() frames the message and queues it; the I/O thread sends the queue in",
            "               sendmmsg batches, equal-size datagrams to one address as one UDP GSO send",
            "               (a send costs a copy into the queue; a system call only to wake an idle",
            "               I/O thread); between shoal peers it also packs small messages (send_pack)",
            "A send that finds the queue full waits up to send_queue_wait_us for room, then drops the",
            "message and counts it as a drop of its publisher. Batching gains nothing for a message of",
            "several 64 KB datagrams, and the faster sending loses more of them at full rate:",
            "user_thread suits large messages, which auto sends that way.",
        ],
        allowed: "auto, user_thread or io_thread",
        get: |c| {
            match c.network.send_mode {
                UdpSendMode::Auto => "auto",
                UdpSendMode::UserThread => "user_thread",
                UdpSendMode::IoThread => "io_thread",
            }
            .to_owned()
        },
        set: |d, v, _| {
            d.cfg.network.send_mode = match v.trim() {
                "auto" => UdpSendMode::Auto,
                "user_thread" => UdpSendMode::UserThread,
                "io_thread" => UdpSendMode::IoThread,
                _ => return None,
            };
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_batch_max",
        alias: None,
        doc: &[
            "send_mode = auto: payload bytes up to which a message of a stream goes through the I/O thread's",
            "batches (larger ones are sent from the publisher's thread, which copies nothing).",
            "0 sends everything from the publisher's thread. Suffixes k, m as for slot_size.",
        ],
        allowed: "0..=1048576 bytes (0 to 1m)",
        get: |c| fmt_size(c.network.send_batch_max),
        set: |d, v, _| {
            d.cfg.network.send_batch_max = usize::try_from(size(v).filter(|n| *n <= 1 << 20)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_flush_delay_us",
        alias: None,
        doc: &[
            "send_mode = io_thread or auto: microseconds the I/O thread may hold the first queued message to gather",
            "more into one batch (it sends at once when 64 are queued). 0 sends whatever is queued as soon",
            "as the I/O thread wakes, so a lone message waits for nothing but the wake-up.",
        ],
        allowed: "0..=10000 (µs)",
        get: |c| c.network.send_flush_delay.as_micros().to_string(),
        set: |d, v, _| {
            d.cfg.network.send_flush_delay = Duration::from_micros(int_in(v, 0, 10_000)?);
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_queue",
        alias: None,
        doc: &[
            "send_mode = io_thread or auto: messages the queue from the publishers to the I/O thread holds (shared",
            "by all publishers of the process). A send that finds it full waits up to send_queue_wait_us",
            "for room, then drops its message and counts it.",
        ],
        allowed: "16..=1048576 (messages)",
        get: |c| c.network.send_queue.to_string(),
        set: |d, v, _| {
            d.cfg.network.send_queue = usize::try_from(int_in(v, 16, 1_048_576)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_queue_bytes",
        alias: None,
        doc: &[
            "send_mode = io_thread or auto: bytes of datagrams the queue to the I/O thread and the I/O thread hold",
            "unsent at most (all publishers of the process), so that large messages cannot fill memory:",
            "a send that would go beyond it counts as finding the queue full. One message is always taken",
            "when nothing is held, however large.",
        ],
        allowed: "65536..=4294967296 bytes (64k to 4g)",
        get: |c| fmt_size(c.network.send_queue_bytes),
        set: |d, v, _| {
            d.cfg.network.send_queue_bytes =
                usize::try_from(size(v).filter(|n| (64 << 10..=4 << 30).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_queue_wait_us",
        alias: None,
        doc: &[
            "send_mode = io_thread or auto: microseconds a send that finds the queue to the I/O thread full waits",
            "for room (the I/O thread empties it as fast as the socket takes datagrams), so that a sender",
            "faster than the socket is slowed down to its pace instead of losing messages. After that long",
            "the message is dropped and counted. 0 drops at once: send() never waits. The default outlasts",
            "the I/O thread losing its CPU for a scheduler time slice (with 1000, a 64 B stream on 2 busy",
            "cores lost 1-5 of 1 M messages in most runs); it bounds how long a send waits on a stalled thread.",
        ],
        allowed: "0..=100000 (µs)",
        get: |c| c.network.send_queue_wait.as_micros().to_string(),
        set: |d, v, _| {
            d.cfg.network.send_queue_wait = Duration::from_micros(int_in(v, 0, 100_000)?);
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_pack",
        alias: None,
        doc: &[
            "Between shoal processes only: pack several small UDP data samples of one publisher into one",
            "datagram (shoal's own format, magic \"SHPK\"). On: this process's subscribers announce in",
            "registration that they read packed datagrams, and with send_mode = io_thread or auto its",
            "publishers pack what the I/O thread finds queued back to back while every UDP subscriber of",
            "the topic announced it (an eCAL or older shoal subscriber, or a [shoal_auth] protected topic,",
            "gets eCAL's format). Packing holds no message back (only send_flush_delay_us does): in",
            "io_thread mode a lone message leaves as a packed datagram of one sample (auto sends it from",
            "the publisher's thread in eCAL's format). user_thread mode never packs. Off: neither",
            "announced nor sent.",
        ],
        allowed: BOOL,
        get: |c| c.network.send_pack.to_string(),
        set: |d, v, _| {
            d.cfg.network.send_pack = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_network",
        key: "send_pack_bytes",
        alias: None,
        doc: &[
            "send_pack: bytes a packed datagram holds at most (header, topic name and samples). Samples",
            "that do not fit in one alone are sent in eCAL's format. The default, one Ethernet frame's",
            "UDP payload, is never IP-fragmented, so a frame lost across hosts loses at most the samples",
            "of one datagram; equal-size packed datagrams still leave as one UDP GSO send.",
        ],
        allowed: "512..=65507 (bytes)",
        get: |c| c.network.send_pack_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.network.send_pack_bytes = usize::try_from(int_in(v, 512, 65_507)?).ok()?;
            Some(())
        },
    },
    // ----- [shoal_shm_ring]
    KeyDef {
        section: "shoal_shm_ring",
        key: "enabled",
        alias: None,
        doc: &[
            "Use shoal's lock-free shared-memory ring between shoal processes on this host.",
            "(eCAL processes are served by the eCAL-compatible memory-file layer either way.)",
        ],
        allowed: BOOL,
        get: |c| c.shm_ring.enabled.to_string(),
        set: |d, v, _| {
            d.cfg.shm_ring.enabled = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_shm_ring",
        key: "slot_count",
        alias: None,
        doc: &["Slots per publisher ring: how far a subscriber may fall behind before it loses samples."],
        allowed: "a power of two in 2..=65536",
        get: |c| c.shm_ring.slot_count.to_string(),
        set: |d, v, _| {
            let n = int_in(v, 2, 65536).filter(|n| n.is_power_of_two())?;
            d.cfg.shm_ring.slot_count = u32::try_from(n).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_shm_ring",
        key: "slot_size",
        alias: None,
        doc: &[
            "Initial payload bytes per slot. A larger message grows the ring to slots of the next power",
            "of two, with fewer of them: slot_count x slot_size bytes are kept as the budget, but a grown",
            "ring keeps at least 16 slots.",
            "Suffixes k, m, g (also kb/kib, ...; any case) multiply by 1024, 1024^2, 1024^3.",
        ],
        allowed: "64..=1073741824 bytes (64 to 1g)",
        get: |c| fmt_size(c.shm_ring.slot_size),
        set: |d, v, _| {
            let n = size(v).filter(|n| (64..=1 << 30).contains(n))?;
            d.cfg.shm_ring.slot_size = usize::try_from(n).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_shm_ring",
        key: "huge_pages",
        alias: None,
        doc: &[
            "Put ring segments on the hugetlbfs mount huge_pages_path (2 MB pages: fewer TLB misses on",
            "large messages):",
            "  auto   when that mount exists and has free huge pages; otherwise normal pages, quietly",
            "  true   always try; a ring that cannot go there uses normal pages, with a warning",
            "  false  normal pages (/dev/shm) only",
            "Which pages each ring got is announced in registration and shown by shoal-monitor and",
            "shoal perf.",
        ],
        allowed: "auto, or true or false (also 1/0, yes/no, on/off)",
        get: |c| {
            match c.shm_ring.huge_pages {
                HugePages::Auto => "auto",
                HugePages::On => "true",
                HugePages::Off => "false",
            }
            .to_owned()
        },
        set: |d, v, _| {
            d.cfg.shm_ring.huge_pages = if v.trim().eq_ignore_ascii_case("auto") {
                HugePages::Auto
            } else if boolean(v)? {
                HugePages::On
            } else {
                HugePages::Off
            };
            Some(())
        },
    },
    KeyDef {
        section: "shoal_shm_ring",
        key: "huge_pages_path",
        alias: None,
        doc: &[
            "The hugetlbfs mount point used when huge_pages is auto or true (segments go directly in it:",
            "subscribers open ring files only there or in /dev/shm).",
        ],
        allowed: "an absolute path (up to 4095 bytes, no control characters or '\"')",
        get: |c| c.shm_ring.huge_pages_path.to_string_lossy().into_owned(),
        set: |d, v, _| {
            if !text_ok(v, 4095) || !Path::new(v).is_absolute() {
                return None;
            }
            d.cfg.shm_ring.huge_pages_path = PathBuf::from(v);
            Some(())
        },
    },
    // ----- [shoal_security]
    KeyDef {
        section: "shoal_security",
        key: "shm_access",
        alias: None,
        doc: &[
            "Who may open the files this process creates in shared memory (ring segments, doorbells, and the",
            "eCAL layer's memfiles, flag locks and events):",
            "  owner  this user only (0600): peers of other users are refused and say so",
            "  group  this user and its group (rings 0640, files peers write 0660)",
            "  all    every user (rings 0644, files peers write 0666, as eCAL creates its own)",
            "Both sides of a connection between users need group or all: the subscriber's doorbell is written",
            "by the publisher. The setting is process-wide: the first node of a process applies it.",
        ],
        allowed: "owner, group or all",
        get: |c| {
            match c.security.shm_access {
                ShmAccess::Owner => "owner",
                ShmAccess::Group => "group",
                ShmAccess::All => "all",
            }
            .to_owned()
        },
        set: |d, v, _| {
            d.cfg.security.shm_access = match v.trim() {
                "owner" => ShmAccess::Owner,
                "group" => ShmAccess::Group,
                "all" => ShmAccess::All,
                _ => return None,
            };
            Some(())
        },
    },
    // ----- [shoal_receive]
    KeyDef {
        section: "shoal_receive",
        key: "wait",
        alias: None,
        doc: &[
            "How a blocking receive waits for the next sample:",
            "  block            sleep on the doorbell; while samples come back to back (the last",
            "                   wait found one within 10 us), poll 10 us first, so a receiver that",
            "                   keeps up with a stream costs its publisher no wake-up per sample;",
            "                   otherwise one wait in 64 polls (sooner after a stream ends), for",
            "                   50 us when its thread published since its last wait (a reply is",
            "                   due), so both sides of a request/response exchange end up polling,",
            "                   100 us longer per MiB it published (at most 2 ms: a large",
            "                   message's reply comes after two copies);",
            "                   a message of 256 KiB or more wakes it when its write starts and it",
            "                   polls (up to 1 ms) until it is published: the wake-up overlaps the copy",
            "  spin_then_block  spin for spin_us microseconds, then sleep",
            "  busy_spin        spin, never sleep (least latency; uses a whole core); while no",
            "                   thread of the process has slept, its publishers skip a fence",
            "                   per send (where the kernel has the expedited global membarrier,",
            "                   Linux 4.16 and later unless seccomp refuses it)",
        ],
        allowed: "block, spin_then_block or busy_spin",
        get: |c| {
            match split_wait(c.receive.wait).0 {
                WaitKind::Block => "block",
                WaitKind::SpinThenBlock => "spin_then_block",
                WaitKind::BusySpin => "busy_spin",
            }
            .to_owned()
        },
        set: |d, v, _| {
            d.wait = [
                ("block", WaitKind::Block),
                ("spin_then_block", WaitKind::SpinThenBlock),
                ("busy_spin", WaitKind::BusySpin),
            ]
            .into_iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(v))?
            .1;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_receive",
        key: "spin_us",
        alias: None,
        doc: &["Spin time of wait = spin_then_block, in microseconds; unused by the other strategies."],
        allowed: "1..=1000000 (microseconds)",
        get: |c| split_wait(c.receive.wait).1.as_micros().to_string(),
        set: |d, v, _| {
            d.spin = Duration::from_micros(int_in(v, 1, 1_000_000)?);
            Some(())
        },
    },
    KeyDef {
        section: "shoal_receive",
        key: "latency_statistics",
        alias: None,
        doc: &[
            "Measure received messages' latency (receive time minus the publisher's send time) per",
            "publisher and layer, for registration and the monitor: every message up to about 1000 a second",
            "per connection, a spread sample of faster streams (one clock read per measured message).",
            "Off: rate, bandwidth, size and drops are still measured, latency is not.",
        ],
        allowed: BOOL,
        get: |c| c.receive.latency_statistics.to_string(),
        set: |d, v, _| {
            d.cfg.receive.latency_statistics = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_receive",
        key: "queue_depth",
        alias: None,
        doc: &[
            "Messages a subscriber always keeps until they are taken, whatever their size (the newest",
            "ones; KEEP_LAST): the queue of same-process, eCAL shared-memory and UDP samples holds at",
            "least this many, and a publisher's native ring that grows for large messages keeps at",
            "least this many slots (rounded up to a power of two, at most slot_count).",
        ],
        allowed: "1..=65536 (messages)",
        get: |c| c.receive.queue.depth.to_string(),
        set: |d, v, _| {
            d.cfg.receive.queue.depth = usize::try_from(int_in(v, 1, 65536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_receive",
        key: "queue_bytes",
        alias: None,
        doc: &[
            "Beyond queue_depth, a subscriber keeps older messages while all it keeps stays within",
            "this many bytes (a message counts as at least 64 bytes); the oldest is dropped and",
            "counted when both bounds are exceeded. (The native ring is its own queue; only a",
            "policy given with SubscriberBuilder::queue makes a ring reader skip to its newest.)",
            "Suffixes k, m, g as for slot_size.",
        ],
        allowed: "0..=68719476736 bytes (0 to 64g)",
        get: |c| fmt_size(c.receive.queue.bytes),
        set: |d, v, _| {
            let n = size(v).filter(|n| *n <= 1 << 36)?;
            d.cfg.receive.queue.bytes = usize::try_from(n).ok()?;
            Some(())
        },
    },
    // ----- [shoal_history]
    KeyDef {
        section: "shoal_history",
        key: "max_depth",
        alias: None,
        doc: &["The most messages a publisher keeps for late joiners (a larger history(n) is taken as this)."],
        allowed: "1..=65536 (messages)",
        get: |c| c.history.max_depth.to_string(),
        set: |d, v, _| {
            d.cfg.history.max_depth = u32::try_from(int_in(v, 1, 65536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_history",
        key: "max_bytes",
        alias: None,
        doc: &[
            "Payload bytes a publisher keeps for late joiners at most: the oldest kept messages are let go",
            "first when its last n exceed it (a single larger message is not kept). Suffixes k, m, g.",
        ],
        allowed: "0..=68719476736 bytes (0 to 64g)",
        get: |c| fmt_size(c.history.max_bytes),
        set: |d, v, _| {
            let n = size(v).filter(|n| *n <= 1 << 36)?;
            d.cfg.history.max_bytes = usize::try_from(n).ok()?;
            Some(())
        },
    },
    // ----- [shoal_reliable]
    KeyDef {
        section: "shoal_reliable",
        key: "publishers",
        alias: None,
        doc: &["Publishers are reliable unless their builder says otherwise (PublisherBuilder::reliable)."],
        allowed: BOOL,
        get: |c| c.reliable.publishers.to_string(),
        set: |d, v, _| {
            d.cfg.reliable.publishers = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_reliable",
        key: "subscribers",
        alias: None,
        doc: &["Subscribers are reliable unless their builder says otherwise (SubscriberBuilder::reliable)."],
        allowed: BOOL,
        get: |c| c.reliable.subscribers.to_string(),
        set: |d, v, _| {
            d.cfg.reliable.subscribers = boolean(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_reliable",
        key: "timeout_ms",
        alias: None,
        doc: &["Longest wait of a reliable publisher for one reliable subscriber, in milliseconds."],
        allowed: "1..=3600000 (milliseconds)",
        get: |c| ms(c.reliable.timeout),
        set: |d, v, _| {
            d.cfg.reliable.timeout = Duration::from_millis(int_in(v, 1, 3_600_000)?);
            Some(())
        },
    },
    // ----- [shoal_io]
    KeyDef {
        section: "shoal_tcp",
        key: "send_queue",
        alias: None,
        doc: &[
            "Bytes a publisher queues per TCP subscriber beyond its socket buffer (suffixes k, m, g). A message",
            "is always taken when the queue is empty, so one larger than this still goes out.",
        ],
        allowed: "4096..=4294967296 bytes (4k to 4g)",
        get: |c| fmt_size(c.tcp.send_queue_bytes),
        set: |d, v, _| {
            d.cfg.tcp.send_queue_bytes = usize::try_from(size(v).filter(|n| (4096..=1 << 32).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "send_timeout_ms",
        alias: None,
        doc: &[
            "0: a message that does not fit a subscriber's send queue is dropped; otherwise the publisher waits up to this long for room, then drops it.",
        ],
        allowed: "0..=60000 (milliseconds)",
        get: |c| c.tcp.send_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.send_timeout_ms = u32::try_from(int_in(v, 0, 60_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "max_message",
        alias: None,
        doc: &[
            "Largest TCP frame a subscriber accepts (suffixes k, m, g); a larger one is skipped unread and counted.",
        ],
        allowed: "1024..=4294967296 bytes (1k to 4g)",
        get: |c| fmt_size(c.tcp.max_message_bytes),
        set: |d, v, _| {
            d.cfg.tcp.max_message_bytes = usize::try_from(size(v).filter(|n| (1024..=1 << 32).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "handshake_timeout_ms",
        alias: None,
        doc: &[
            "A publisher closes a subscriber connection that has not sent its handshake and been admitted",
            "within this long; a subscriber gives up a connection whose publisher has not answered its",
            "handshake within this long (and tries again after its backoff). Both counted.",
        ],
        allowed: "100..=60000 (milliseconds)",
        get: |c| c.tcp.handshake_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.handshake_timeout_ms = u32::try_from(int_in(v, 100, 60_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "stall_timeout_ms",
        alias: None,
        doc: &[
            "A publisher closes a subscriber connection that takes none of the bytes queued for it for this",
            "long; the messages still queued for it are counted as drops of the publisher. (A connection",
            "that has nothing queued is never closed for being idle: a topic may be silent for hours.)",
        ],
        allowed: "100..=3600000 (milliseconds)",
        get: |c| c.tcp.stall_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.stall_timeout_ms = u32::try_from(int_in(v, 100, 3_600_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "max_sessions",
        alias: None,
        doc: &[
            "Subscriber connections all publishers of this process hold at most, admitted or still in their",
            "handshake; a further one is closed at once and counted. Each holds a file descriptor and up to",
            "send_queue bytes.",
        ],
        allowed: "1..=65536",
        get: |c| c.tcp.max_sessions.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.max_sessions = usize::try_from(int_in(v, 1, 65_536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "max_sessions_per_source",
        alias: None,
        doc: &[
            "Subscriber connections from one address all publishers of this process hold at most; a further",
            "one is closed at once and counted.",
        ],
        allowed: "1..=65536",
        get: |c| c.tcp.max_sessions_per_source.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.max_sessions_per_source = usize::try_from(int_in(v, 1, 65_536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_tcp",
        key: "max_connections",
        alias: None,
        doc: &[
            "Connections to publishers all subscribers of this process hold at most, connected or",
            "connecting; a further one waits for its next attempt (counted).",
        ],
        allowed: "1..=65536",
        get: |c| c.tcp.max_connections.to_string(),
        set: |d, v, _| {
            d.cfg.tcp.max_connections = usize::try_from(int_in(v, 1, 65_536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "handler_threads",
        alias: None,
        doc: &["Threads that run the method handlers of all servers of this process."],
        allowed: "1..=256",
        get: |c| c.service.handler_threads.to_string(),
        set: |d, v, _| {
            d.cfg.service.handler_threads = usize::try_from(int_in(v, 1, 256)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "max_pending",
        alias: None,
        doc: &[
            "Requests waiting for a handler thread, for all servers of this process; a further request is",
            "answered at once as failed (\"server busy\") and counted.",
        ],
        allowed: "1..=1048576",
        get: |c| c.service.max_pending.to_string(),
        set: |d, v, _| {
            d.cfg.service.max_pending = usize::try_from(int_in(v, 1, 1 << 20)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "max_request",
        alias: None,
        doc: &[
            "Largest request a server reads and a client sends (suffixes k, m, g). A server closes a",
            "connection announcing a larger one (counted); a client refuses to send one.",
        ],
        allowed: "1024..=4294967295 bytes (1k to 4g - 1)",
        get: |c| fmt_size(c.service.max_request_bytes),
        set: |d, v, _| {
            d.cfg.service.max_request_bytes =
                usize::try_from(size(v).filter(|n| (1024..(1 << 32)).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "max_response",
        alias: None,
        doc: &[
            "Largest response a client reads and a server sends (suffixes k, m, g). A larger response is",
            "sent as a failed call instead; a client closes a connection announcing one (the call fails).",
        ],
        allowed: "1024..=4294967295 bytes (1k to 4g - 1)",
        get: |c| fmt_size(c.service.max_response_bytes),
        set: |d, v, _| {
            d.cfg.service.max_response_bytes =
                usize::try_from(size(v).filter(|n| (1024..(1 << 32)).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "max_sessions",
        alias: None,
        doc: &[
            "Client connections all servers of this process hold at most; a further one is closed at once",
            "and counted.",
        ],
        allowed: "1..=65536",
        get: |c| c.service.max_sessions.to_string(),
        set: |d, v, _| {
            d.cfg.service.max_sessions = usize::try_from(int_in(v, 1, 65_536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "handshake_timeout_ms",
        alias: None,
        doc: &[
            "A server closes a connection that has not completed the protocol handshake within this long (counted).",
        ],
        allowed: "100..=60000 (milliseconds)",
        get: |c| c.service.handshake_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.service.handshake_timeout_ms = u32::try_from(int_in(v, 100, 60_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_service",
        key: "idle_timeout_ms",
        alias: None,
        doc: &[
            "A server closes a connection that has sent no request (and has none in progress) for this long",
            "(counted). An eCAL client connects again with the server's next registration, a shoal client",
            "when it next calls.",
        ],
        allowed: "1000..=86400000 (milliseconds)",
        get: |c| c.service.idle_timeout_ms.to_string(),
        set: |d, v, _| {
            d.cfg.service.idle_timeout_ms = u32::try_from(int_in(v, 1000, 86_400_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_io",
        key: "cpu_affinity",
        alias: None,
        doc: &[
            "CPUs the I/O thread is pinned to: a comma list of CPU ids and ranges, e.g. 2,3 or 0-3,8.",
            "Empty: no pinning.",
        ],
        allowed: "empty, or CPU ids and ranges a-b within 0..=1023, each CPU at most once",
        get: |c| c.io.cpu_affinity.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        set: |d, v, _| {
            d.cfg.io.cpu_affinity = cpu_list(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "registration_message_bytes",
        alias: None,
        doc: &["Largest registration message accepted, in bytes (after reassembly of its datagrams)."],
        allowed: "65536..=67108864 (bytes)",
        get: |c| c.limits.registration_message_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.registration_message_bytes = usize::try_from(int_in(v, 65536, 67108864)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "remote_topics",
        alias: None,
        doc: &["Remote publishers and subscribers kept in all; further new ones are ignored."],
        allowed: "1..=1000000",
        get: |c| c.limits.remote_topics.to_string(),
        set: |d, v, _| {
            d.cfg.limits.remote_topics = usize::try_from(int_in(v, 1, 1000000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "topics_per_process",
        alias: None,
        doc: &["Remote publishers and subscribers kept per process."],
        allowed: "1..=1000000",
        get: |c| c.limits.topics_per_process.to_string(),
        set: |d, v, _| {
            d.cfg.limits.topics_per_process = usize::try_from(int_in(v, 1, 1000000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "remote_processes",
        alias: None,
        doc: &["Remote processes kept."],
        allowed: "1..=1000000",
        get: |c| c.limits.remote_processes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.remote_processes = usize::try_from(int_in(v, 1, 1000000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "layers_per_topic",
        alias: None,
        doc: &["Transport layer entries in one registration sample; a sample with more is dropped."],
        allowed: "1..=1024",
        get: |c| c.limits.layers_per_topic.to_string(),
        set: |d, v, _| {
            d.cfg.limits.layers_per_topic = usize::try_from(int_in(v, 1, 1024)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "string_bytes",
        alias: None,
        doc: &[
            "Bytes of one name or other text field of a registration sample; a sample with a longer one is dropped.",
        ],
        allowed: "64..=1048576 (bytes)",
        get: |c| c.limits.string_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.string_bytes = usize::try_from(int_in(v, 64, 1048576)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "descriptor_bytes",
        alias: None,
        doc: &["Bytes of one type descriptor; a sample with a larger one is dropped."],
        allowed: "0..=67108864 (bytes)",
        get: |c| c.limits.descriptor_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.descriptor_bytes = usize::try_from(int_in(v, 0, 67108864)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "fragmented_per_source",
        alias: None,
        doc: &["Incomplete fragmented registration messages kept per sender (its oldest is dropped for a new one)."],
        allowed: "1..=64",
        get: |c| c.limits.fragmented_per_source.to_string(),
        set: |d, v, _| {
            d.cfg.limits.fragmented_per_source = usize::try_from(int_in(v, 1, 64)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "receive_batch",
        alias: None,
        doc: &["Datagrams the I/O thread takes from one socket before it serves its timers and other sockets."],
        allowed: "1..=65536",
        get: |c| c.limits.receive_batch.to_string(),
        set: |d, v, _| {
            d.cfg.limits.receive_batch = usize::try_from(int_in(v, 1, 65536)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "registry_bytes",
        alias: None,
        doc: &[
            "Bytes the registry keeps for remote topics and processes, all together (their names, type descriptors",
            "and layers). When it is spent, the sending address that holds the most entities gives up one; if that",
            "is the newcomer's own, a new topic is kept without its descriptor (tools cannot decode it), or refused.",
        ],
        allowed: "1048576..=1073741824 (bytes)",
        get: |c| c.limits.registry_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.registry_bytes = usize::try_from(int_in(v, 1048576, 1073741824)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "udp_reassembly_bytes",
        alias: None,
        doc: &[
            "Bytes buffered for incomplete fragmented messages of the UDP data layer, all senders together; also",
            "the largest message the UDP layer receives.",
        ],
        allowed: "65536..=1073741824 (bytes)",
        get: |c| c.limits.udp_reassembly_bytes.to_string(),
        set: |d, v, _| {
            d.cfg.limits.udp_reassembly_bytes = usize::try_from(int_in(v, 65536, 1073741824)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "udp_fragmented_per_source",
        alias: None,
        doc: &["Incomplete fragmented UDP data messages kept per sender (its oldest is dropped for a new one)."],
        allowed: "1..=64",
        get: |c| c.limits.udp_fragmented_per_source.to_string(),
        set: |d, v, _| {
            d.cfg.limits.udp_fragmented_per_source = usize::try_from(int_in(v, 1, 64)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_limits",
        key: "auth_senders",
        alias: None,
        doc: &[
            "Senders whose replay window is kept with [shoal_auth], for registration and for UDP data each;",
            "a new sender evicts the one heard least recently (only senders with the key create one).",
        ],
        allowed: "1..=1000000",
        get: |c| c.limits.auth_senders.to_string(),
        set: |d, v, _| {
            d.cfg.limits.auth_senders = usize::try_from(int_in(v, 1, 1000000)?).ok()?;
            Some(())
        },
    },
    // ----- [shoal_logging]
    KeyDef {
        section: "shoal_logging",
        key: "port",
        alias: None,
        doc: &["UDP port of log messages, sent and received (eCAL 6: logging.provider.udp.port, 14001)."],
        allowed: "1..=65535",
        get: |c| c.logging.port.to_string(),
        set: |d, v, _| {
            d.cfg.logging.port = port(v)?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_logging",
        key: "max_rate",
        alias: None,
        doc: &[
            "Records per second this process sends at most (a bucket of one second's records, refilled",
            "continuously); records beyond are dropped and counted, so a log storm cannot flood the network.",
        ],
        allowed: "1..=1000000 (records per second)",
        get: |c| c.logging.max_rate.to_string(),
        set: |d, v, _| {
            d.cfg.logging.max_rate = u32::try_from(int_in(v, 1, 1_000_000)?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_logging",
        key: "max_record",
        alias: None,
        doc: &[
            "Bytes of a record's content at most (message and fields; suffix k allowed); a longer one is",
            "cut on a character boundary, marked with a trailing ..., and counted. Every record fits one datagram.",
        ],
        allowed: "64..=60000 bytes",
        get: |c| fmt_size(c.logging.max_record_bytes),
        set: |d, v, _| {
            d.cfg.logging.max_record_bytes = usize::try_from(size(v).filter(|n| (64..=60_000).contains(n))?).ok()?;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_logging",
        key: "queue",
        alias: None,
        doc: &[
            "Records waiting for the sender thread at most; a record that finds the queue full is dropped",
            "and counted (the logging thread never waits).",
        ],
        allowed: "1..=1048576 (records)",
        get: |c| c.logging.queue.to_string(),
        set: |d, v, _| {
            d.cfg.logging.queue = usize::try_from(int_in(v, 1, 1 << 20)?).ok()?;
            Some(())
        },
    },
    // ----- [shoal_auth]
    KeyDef {
        section: "shoal_auth",
        key: "key_file",
        alias: None,
        doc: &[
            "The preferred way to set the key: an absolute path to a file of this user that neither its group",
            "nor others may read or write (chmod 600), holding the key as 32 to 128 hex digits (16 to 64",
            "bytes; e.g. `openssl rand -hex 32`). A file others can read is refused. Empty: no key.",
        ],
        allowed: "empty, or an absolute path to a regular file of this user with mode 0600 or 0400 holding 32 to 128 hex digits",
        get: |c| c.auth.key_file.as_ref().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
        set: |d, v, _| {
            if v.is_empty() {
                d.cfg.auth.key_file = None;
                if !d.cfg.auth.key_from_hex {
                    d.cfg.auth.key = None;
                }
                return Some(());
            }
            if !text_ok(v, 4095) || !Path::new(v).is_absolute() {
                return None;
            }
            match read_key_file(Path::new(v)) {
                Ok(key) => {
                    d.cfg.auth.key = Some(std::sync::Arc::new(key));
                    d.cfg.auth.key_file = Some(PathBuf::from(v));
                    Some(())
                }
                Err(why) => {
                    d.key_file_refused = Some((PathBuf::from(v), why));
                    None
                }
            }
        },
    },
    KeyDef {
        section: "shoal_auth",
        key: "key_hex",
        alias: None,
        doc: &[
            "The key itself as 32 to 128 hex digits, when a separate file is not practical: then this ini file",
            "holds the secret and must be as private as a key_file (prefer key_file). Shown as (hidden).",
            "Set at most one of key_file and key_hex.",
        ],
        allowed: "empty, or 32 to 128 hex digits (an even count)",
        get: |c| if c.auth.key_from_hex { "(hidden)".to_owned() } else { String::new() },
        set: |d, v, _| {
            if v.is_empty() {
                if d.cfg.auth.key_from_hex {
                    d.cfg.auth.key = None;
                }
                d.cfg.auth.key_from_hex = false;
                return Some(());
            }
            d.cfg.auth.key = Some(std::sync::Arc::new(AuthKey::from_hex(v)?));
            d.cfg.auth.key_from_hex = true;
            Some(())
        },
    },
    KeyDef {
        section: "shoal_auth",
        key: "protected_topics",
        alias: None,
        doc: &[
            "With a key: the topics that require authentication, a regular expression the whole topic name",
            "must match (Rust regex syntax). The default protects every topic; e.g. ^(imu|cmd/.*)$ protects",
            "imu and the cmd/ topics and leaves all others to eCAL peers too. Service names are matched",
            "too: a protected service's server and clients register sealed, and its server answers a",
            "connection only for an authenticated client of it that registration announced from the",
            "connection's address (until handshake_timeout_ms of [shoal_service], then it closes it).",
        ],
        allowed: "a regular expression of at most 4095 bytes",
        get: |c| c.auth.protected_topics.clone(),
        set: |d, v, notes| {
            if v.len() > 4095 {
                return None;
            }
            if let Err(e) = regex::Regex::new(&format!("^(?:{v})$")) {
                notes.push(format!("[shoal_auth] protected_topics: {e}"));
                return None;
            }
            d.cfg.auth.protected_topics = v.to_owned();
            Some(())
        },
    },
    KeyDef {
        section: "shoal_auth",
        key: "max_age_ms",
        alias: None,
        doc: &[
            "With a key: the largest difference, in ms, between the time a sender wrote into a datagram and",
            "this host's clock; older (or later) ones are dropped as stale. Hosts' clocks must agree within",
            "it. A receiver keeps a window of the last 1024 counters of each sender (auth_senders of them),",
            "which refuses a replay while it is kept; a sender it has no window for (the receiver restarted,",
            "or evicted it) is heard only from datagrams written after the receiver started or last evicted a",
            "sender, less 2 s for clocks that differ, so a capture cannot be replayed to a restarted receiver.",
            "0: no time checks at all (replays then stay refused only while the sender's window is kept).",
        ],
        allowed: "0..=86400000 (ms)",
        get: |c| ms(c.auth.max_age),
        set: |d, v, _| {
            d.cfg.auth.max_age = Duration::from_millis(int_in(v, 0, 86400000)?);
            Some(())
        },
    },
];

/// Reads a `[shoal_auth] key_file`: a regular file of this user (not a symlink), no access for group or others,
/// holding the key in hex.
fn read_key_file(path: &Path) -> Result<AuthKey, KeyFileError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(KeyFileError::Open)?;
    let meta = file.metadata().map_err(KeyFileError::Metadata)?;
    if !meta.file_type().is_file() {
        return Err(KeyFileError::NotRegular);
    }
    // The owner of /proc/self is this process's effective user.
    let me = std::fs::metadata("/proc/self").map_err(KeyFileError::WhoAmI)?.uid();
    if meta.uid() != me {
        return Err(KeyFileError::Owner { owner: meta.uid(), me });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(KeyFileError::Mode { mode: meta.mode() & 0o7777 });
    }
    // Read into a buffer that never grows (no copy of the key left behind by a reallocation) and is zeroed on drop.
    let mut text = zeroize::Zeroizing::new(Vec::with_capacity(1100));
    file.take(1024).read_to_end(&mut text).map_err(KeyFileError::Read)?;
    let text = std::str::from_utf8(&text).map_err(|_| KeyFileError::NotAKey)?;
    AuthKey::from_hex(text).ok_or(KeyFileError::NotAKey)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_sections_declared() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(SECTIONS.iter().any(|s| s.name == k.section), "{}", k.key);
            assert_eq!(lookup(k.section, k.key), Some(i), "[{}] {}", k.section, k.key);
            if let Some((s, n)) = k.alias {
                assert_eq!(lookup(s, n), Some(i));
            }
            assert!(!k.doc.is_empty(), "[{}] {} has no doc", k.section, k.key);
        }
        assert_eq!(lookup("NETWORK", "Multicast_TTL"), lookup("network", "multicast_ttl"));
        assert_eq!(lookup("network", "multicast_sndbuf"), None);
    }

    /// Each declared `A..=B` range matches what `set` accepts: A and B pass, B+1 (and A-1) fail.
    #[test]
    fn declared_ranges_match_parsers() {
        let mut checked = 0;
        for k in KEYS {
            let Some((lo, hi)) = declared_range(k.allowed) else { continue };
            let accepts = |n: u64| {
                let mut d = Draft::new(Config::default());
                (k.set)(&mut d, &n.to_string(), &mut Vec::new()).is_some()
            };
            assert!(accepts(lo), "[{}] {} rejects {lo}", k.section, k.key);
            assert!(accepts(hi), "[{}] {} rejects {hi}", k.section, k.key);
            assert!(!accepts(hi + 1), "[{}] {} accepts {}", k.section, k.key, hi + 1);
            if lo > 0 {
                assert!(!accepts(lo - 1), "[{}] {} accepts {}", k.section, k.key, lo - 1);
            }
            checked += 1;
        }
        assert!(checked >= 9, "only {checked} ranges checked");
    }

    fn declared_range(allowed: &str) -> Option<(u64, u64)> {
        let (before, after) = allowed.split_once("..=")?;
        let lo_start = before.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
        let hi_end = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
        Some((before[lo_start..].parse().ok()?, after[..hi_end].parse().ok()?))
    }

    #[test]
    fn value_helpers() {
        assert_eq!(size("64k"), Some(65536));
        assert_eq!(size("64 KiB"), Some(65536));
        assert_eq!(size("2M"), Some(2 << 20));
        assert_eq!(size("1gb"), Some(1 << 30));
        assert_eq!(size("100"), Some(100));
        assert_eq!(size("100b"), Some(100));
        for bad in ["", "k", "1.5m", "-1", "+3", "1t", "99999999999999999999g"] {
            assert_eq!(size(bad), None, "{bad:?}");
        }
        assert_eq!(fmt_size(65536), "64k");
        assert_eq!(fmt_size(3 << 20), "3m");
        assert_eq!(fmt_size(1 << 30), "1g");
        assert_eq!(fmt_size(1000), "1000");
        assert_eq!(cpu_list("0-3, 8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(cpu_list(""), Some(vec![]));
        for bad in ["1,1", "0-2,2", "3-1", "1024", "a", "1,", "-1", "0-99999999999999999999"] {
            assert_eq!(cpu_list(bad), None, "{bad:?}");
        }
        assert_eq!(boolean("ON"), Some(true));
        assert_eq!(boolean("0"), Some(false));
        assert_eq!(boolean("maybe"), None);
        assert_eq!(netmask_prefix(Ipv4Addr::new(255, 255, 255, 240)), Some(28));
        assert_eq!(netmask_prefix(Ipv4Addr::new(0, 0, 0, 0)), Some(0));
        assert_eq!(netmask_prefix(Ipv4Addr::new(255, 0, 255, 0)), None);
    }
}
