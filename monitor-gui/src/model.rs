//! The view model: what the window and the headless mode show, built from one [`Snapshot`] (and the view before it,
//! to see drops rising). Both front ends read only this, so they show the same figures.
//!
//! A [`View`] is immutable once built and kept in the [`History`](crate::history::History) for scroll-back; its
//! strings are interned `Arc<str>`, so minutes of history of a thousand topics stay small.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use shoal::monitor::{
    LatencyHistogram, MethodInfo, ServiceRole, Snapshot, TopicDirection, TopicEntry, TopicProblem, TopicSummary, Via,
};

/// A peer whose last registration is older than this is shown as stale (the core's rule, which `shoal list` uses
/// too).
pub use shoal::monitor::STALE_AFTER;

/// What is wrong with a topic, a process or a connection. Several can hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// More messages were lost since the previous refresh (a process: more datagrams dropped by the kernel on its
    /// receive sockets).
    DropsRising,
    /// A publisher's type disagrees with a subscriber's.
    TypeMismatch,
    /// Publishers but no subscriber: a note, not a problem (a topic may be published for whoever wants it, and a
    /// system of many such topics must not read as broken).
    NoSubscribers,
    /// Subscribers but no publisher.
    NoPublishers,
    /// A peer's registration is late (older than [`STALE_AFTER`]).
    Stale,
    /// The process announces a warning, critical or failed state.
    BadState,
    /// A service has clients but no server.
    NoServer,
}

impl Problem {
    /// Short text for tables.
    pub fn label(self) -> &'static str {
        match self {
            Problem::DropsRising => "drops rising",
            Problem::TypeMismatch => "type mismatch",
            Problem::NoSubscribers => "no subscriber",
            Problem::NoPublishers => "no publisher",
            Problem::Stale => "stale",
            Problem::BadState => "bad state",
            Problem::NoServer => "no server",
        }
    }

    /// True for problems shown in red (data is lost or cannot be read); the others are warnings, or notes.
    pub fn is_error(self) -> bool {
        matches!(self, Problem::DropsRising | Problem::TypeMismatch | Problem::BadState)
    }

    /// True for what is worth saying but is no problem: it is shown, not counted, coloured or filtered for.
    pub fn is_note(self) -> bool {
        matches!(self, Problem::NoSubscribers)
    }
}

/// A small set of [`Problem`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, p: Problem) {
        if !self.0.contains(&p) {
            self.0.push(p);
            self.0.sort();
        }
    }

    /// True when nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = Problem> + '_ {
        self.0.iter().copied()
    }

    /// True when `p` is among them.
    pub fn contains(&self, p: Problem) -> bool {
        self.0.contains(&p)
    }

    /// True when one of them is a problem, not a note ([`Problem::is_note`]).
    pub fn need_attention(&self) -> bool {
        self.0.iter().any(|p| !p.is_note())
    }

    /// The worst health these problems make (notes make none).
    pub fn health(&self) -> Health {
        if self.0.iter().any(|p| p.is_error()) {
            Health::Error
        } else if self.need_attention() {
            Health::Warning
        } else {
            Health::Ok
        }
    }

    /// The labels joined by ", " (empty when nothing is wrong).
    pub fn text(&self) -> String {
        self.0.iter().map(|p| p.label()).collect::<Vec<_>>().join(", ")
    }
}

impl Serialize for Problems {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Traffic-light health of a row (the graph's colours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Nothing wrong.
    Ok,
    /// Something to look at.
    Warning,
    /// Data is lost or cannot be read.
    Error,
}

/// Latency percentiles in µs (from a [`LatencyHistogram`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Latencies counted.
    pub count: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
}

impl Percentiles {
    /// The percentiles of `h`; `None` when it counted nothing.
    pub fn of(h: &LatencyHistogram) -> Option<Percentiles> {
        let us = |q: f64| h.percentile(q).map_or(0.0, |ns| ns as f64 / 1000.0);
        (!h.is_empty()).then(|| Percentiles {
            count: h.count(),
            p50_us: us(0.5),
            p90_us: us(0.9),
            p99_us: us(0.99),
            max_us: h.max_ns().map_or(0.0, |ns| ns as f64 / 1000.0),
        })
    }
}

/// A histogram's non-empty buckets `(lower ns, upper ns, count)`, kept per connection and per topic for the plot.
pub type Buckets = Arc<[(u64, u64, u32)]>;

/// One host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRow {
    /// Host name.
    pub host: Arc<str>,
    /// Processes on it.
    pub processes: usize,
    /// Publishers and subscribers on it.
    pub entities: usize,
}

/// One process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    /// Host name.
    pub host: Arc<str>,
    /// Process id.
    pub pid: u32,
    /// Executable (file name).
    pub name: Arc<str>,
    /// Executable path as announced.
    pub path: Arc<str>,
    /// Command line as announced.
    pub command_line: Arc<str>,
    /// Unit name.
    pub unit: Arc<str>,
    /// `shoal` or `eCAL`.
    pub kind: &'static str,
    /// Runtime version as announced.
    pub version: Arc<str>,
    /// Seconds since its last registration.
    pub registration_age_s: f64,
    /// The severity of the state it announces (in JSON: eCAL's number, 0 unknown to 4 failed).
    #[serde(serialize_with = "severity_number")]
    pub severity: shoal::Severity,
    /// The state it announces, as every tool shows it (`warning (level 2): camera at 5 Hz`).
    pub state: Arc<str>,
    /// The monitor itself.
    pub is_self: bool,
    /// Datagrams the kernel dropped on its UDP data and registration sockets for a full receive buffer, as its
    /// registration announces them (`None`: an eCAL process, which does not).
    pub kernel_drops: Option<u64>,
    /// Resident memory, bytes, as its last registration announces it (`None`: an eCAL process, which does not).
    pub memory_bytes: Option<u64>,
    /// CPU load over about its last registration period, in cores (0.5: half of one core), as announced (`None`:
    /// an eCAL process, or not measured yet).
    pub cpu_load: Option<f64>,
    /// What is wrong.
    pub problems: Problems,
}

fn severity_number<S: serde::Serializer>(s: &shoal::Severity, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_i32(s.to_wire())
}

impl ProcessRow {
    /// Equal but for the registration age.
    fn same_but_age(&self, o: &ProcessRow) -> bool {
        let ProcessRow {
            host,
            pid,
            name,
            path,
            command_line,
            unit,
            kind,
            version,
            registration_age_s: _,
            severity,
            state,
            is_self,
            kernel_drops,
            memory_bytes,
            cpu_load,
            problems,
        } = self;
        (host, pid, name, path, command_line, unit, kind, version, severity, state, is_self)
            == (
                &o.host,
                &o.pid,
                &o.name,
                &o.path,
                &o.command_line,
                &o.unit,
                &o.kind,
                &o.version,
                &o.severity,
                &o.state,
                &o.is_self,
            )
            && (kernel_drops, memory_bytes, cpu_load, problems)
                == (&o.kernel_drops, &o.memory_bytes, &o.cpu_load, &o.problems)
    }

    /// `unit@host:pid`, how the other tables name a process.
    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.unit, self.host, self.pid)
    }
}

/// One topic: every publisher and subscriber of one name, together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicRow {
    /// Topic name.
    pub name: Arc<str>,
    /// Type name (the publishers'; the subscribers' when none publishes).
    pub type_name: Arc<str>,
    /// Encoding (`proto`, `flatb`, `raw`, …).
    pub encoding: Arc<str>,
    /// The type as the tools show it: every distinct type and encoding its endpoints announce, `(MISMATCH)` when
    /// they disagree, `-` where none is announced ([`TopicSummary::type_label`]).
    pub type_label: Arc<str>,
    /// No publisher is known: the size and latency are what the subscribers received last, not current figures.
    pub no_publisher: bool,
    /// Number of publishers.
    pub publishers: usize,
    /// Number of subscribers.
    pub subscribers: usize,
    /// Layers in use, joined by `,`.
    pub layers: Arc<str>,
    /// The page sizes (KiB) of the publishers' shoal rings, as announced ([`TopicSummary::ring_page_kb`]).
    pub ring_page_kb: Vec<u32>,
    /// Messages per second (sum over the publishers; the subscribers' when no publisher reports).
    pub rate_hz: f64,
    /// Payload bytes per second.
    pub bandwidth_bps: f64,
    /// Size of the last message, bytes (largest over the publishers).
    pub size_bytes: u64,
    /// `Some(age)` when the rate, bandwidth and size are stale: the freshest registration of the endpoints that
    /// announce them (the publishers; the subscribers when none publishes) is older than [`STALE_AFTER`], so they
    /// are the last figures announced `age` seconds ago, not current ones. `None` while they are fresh.
    pub stale_figures_s: Option<f64>,
    /// Messages lost, summed over the subscribers.
    pub drops: u64,
    /// Latency over every same-host connection's last window (shoal subscribers), if any was measured.
    pub latency: Option<Percentiles>,
    /// Mean latency eCAL's registration announces (eCAL and shoal subscribers), µs, if any.
    pub latency_mean_us: Option<f64>,
    /// Connections that cross hosts (their latency is not shown: the clocks are not shared).
    pub cross_host_connections: usize,
    /// What is wrong.
    pub problems: Problems,
    /// Merged latency histogram of the topic's connections (plot).
    #[serde(skip)]
    pub buckets: Buckets,
}

/// One publisher or subscriber.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityRow {
    /// Topic name.
    pub topic: Arc<str>,
    /// `pub` or `sub`.
    pub direction: &'static str,
    /// Owning process (`unit@host:pid`).
    pub process: Arc<str>,
    /// Host.
    #[serde(skip)]
    pub host: Arc<str>,
    /// Process id.
    #[serde(skip)]
    pub pid: u32,
    /// Entity id.
    pub entity_id: u64,
    /// `shoal` or `eCAL` (its process's runtime; `None` when its process is not known).
    pub kind: Option<&'static str>,
    /// Type name.
    pub type_name: Arc<str>,
    /// Type encoding (`proto`, `flatb`, `raw`, …).
    pub encoding: Arc<str>,
    /// Size of the announced type descriptor, bytes.
    pub descriptor_bytes: usize,
    /// Enabled layers as announced, joined by `,`.
    pub layers: Arc<str>,
    /// Messages sent or received (its data clock).
    pub messages: i64,
    /// Messages per second, as announced.
    pub rate_hz: f64,
    /// Drops (subscriber).
    pub drops: u64,
    /// Connected peers on its host and on other hosts, as announced.
    pub connections: (i32, i32),
    /// Announced type mismatch.
    pub type_mismatch: bool,
    /// Seconds since its last registration.
    pub registration_age_s: f64,
    /// Its registration is older than [`STALE_AFTER`]: its figures are the last announced, not current.
    pub stale: bool,
}

impl EntityRow {
    /// Equal but for the registration age.
    fn same_but_age(&self, o: &EntityRow) -> bool {
        let EntityRow {
            topic,
            direction,
            process,
            host,
            pid,
            entity_id,
            kind,
            type_name,
            encoding,
            descriptor_bytes,
            layers,
            messages,
            rate_hz,
            drops,
            connections,
            type_mismatch,
            registration_age_s: _,
            stale,
        } = self;
        (topic, direction, process, host, pid, entity_id, kind, type_name, encoding, descriptor_bytes, layers)
            == (
                &o.topic,
                &o.direction,
                &o.process,
                &o.host,
                &o.pid,
                &o.entity_id,
                &o.kind,
                &o.type_name,
                &o.encoding,
                &o.descriptor_bytes,
                &o.layers,
            )
            && (messages, rate_hz, drops, connections, type_mismatch, stale)
                == (&o.messages, &o.rate_hz, &o.drops, &o.connections, &o.type_mismatch, &o.stale)
    }
}

/// One publisher's connection to one subscriber: what a shoal subscriber measured from it over one layer, or, for
/// an eCAL subscriber (which announces only its totals), the connection its registration and the publisher's imply
/// ([`shoal::monitor::announced_layer`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnectionRow {
    /// Topic name.
    pub topic: Arc<str>,
    /// Publisher's entity id.
    pub publisher_id: u64,
    /// Publishing process (`unit@host:pid`), or the id when its registration is unknown.
    pub publisher: Arc<str>,
    /// Subscriber's entity id.
    pub subscriber_id: u64,
    /// Subscribing process (`unit@host:pid`).
    pub subscriber: Arc<str>,
    /// Layer (`intra`, `shoal_ring`, `shm`, `udp`, `tcp`).
    pub via: &'static str,
    /// Measured by a shoal subscriber. `false`: an eCAL subscriber's connection, its layer implied by the two
    /// registrations, its rate, messages and drops the subscriber's totals, and no latency.
    pub measured: bool,
    /// Not measured, and the subscriber has more than one publisher: the figures are its totals over all of them.
    pub shared_figures: bool,
    /// Publisher and subscriber share a host clock; otherwise latency is not shown.
    pub same_host: bool,
    /// Messages per second over the last window.
    pub rate_hz: f64,
    /// Bytes per second over the last window.
    pub bandwidth_bps: f64,
    /// Messages received so far.
    pub messages: u64,
    /// Bytes received so far.
    pub bytes: u64,
    /// Messages lost so far.
    pub drops: u64,
    /// Size of the last message.
    pub last_size: u64,
    /// Latency of the last window (same host only).
    pub latency: Option<Percentiles>,
    /// What is wrong.
    pub problems: Problems,
    /// The last window's histogram (plot).
    #[serde(skip)]
    pub buckets: Buckets,
}

impl ConnectionRow {
    /// Identifies a connection across refreshes.
    pub fn key(&self) -> ConnKey {
        ConnKey { publisher_id: self.publisher_id, subscriber_id: self.subscriber_id, via: self.via }
    }
}

/// A connection's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    /// Publisher's entity id.
    pub publisher_id: u64,
    /// Subscriber's entity id.
    pub subscriber_id: u64,
    /// Layer name.
    pub via: &'static str,
}

/// A call rate is derived from two registrations of an endpoint at least this far apart (an immediate
/// registration right after a periodic one would give a rate over a few milliseconds).
pub const MIN_RATE_SPAN_S: f64 = 0.5;

/// A request or response type as a method announces it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeRow {
    /// Type name (may be empty).
    pub name: Arc<str>,
    /// Encoding (`proto`, `raw`, …; may be empty).
    pub encoding: Arc<str>,
    /// Size of the announced descriptor, bytes.
    pub descriptor_bytes: usize,
}

impl TypeRow {
    /// `encoding:name`, `name`, `(encoding)` or `—` when nothing is announced.
    pub fn text(&self) -> String {
        match (self.name.is_empty(), self.encoding.is_empty()) {
            (true, true) => "—".into(),
            (false, true) => self.name.to_string(),
            (true, false) => format!("({})", self.encoding),
            (false, false) => format!("{}:{}", self.encoding, self.name),
        }
    }
}

/// One method of a server or client, as its registration announces it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodRow {
    /// Method name.
    pub name: Arc<str>,
    /// The request's type.
    pub request: TypeRow,
    /// The response's type.
    pub response: TypeRow,
    /// Calls served (a server) or made (a client) so far, as announced (eCAL's `call_count`).
    pub calls: i64,
    /// Calls per second between the two last registrations at least [`MIN_RATE_SPAN_S`] apart; `None` until two
    /// were seen (or after the count went down: a restart). A stale endpoint's rate is its last one: its
    /// endpoint row says `stale`.
    pub call_rate_hz: Option<f64>,
    /// Failed calls, where the endpoint announces them: neither eCAL 6.1.1 nor shoal puts them in registration, so
    /// `None` for every peer (shown "—"; this process's own are in [`View::own_service_counts`]).
    pub errors: Option<u64>,
    /// The call count the rate was last derived from.
    #[serde(skip)]
    pub basis_calls: i64,
    /// When that registration was sent (the view's time minus its age), seconds since the epoch.
    #[serde(skip)]
    pub basis_time_s: f64,
}

impl MethodRow {
    /// Equal but for the time of the registration the rate was derived from (which moves with every
    /// registration, as the age does).
    fn same_but_time(&self, o: &MethodRow) -> bool {
        let MethodRow { name, request, response, calls, call_rate_hz, errors, basis_calls, basis_time_s: _ } = self;
        (name, request, response, calls, call_rate_hz, errors, basis_calls)
            == (&o.name, &o.request, &o.response, &o.calls, &o.call_rate_hz, &o.errors, &o.basis_calls)
    }
}

/// One service server or client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceEndpointRow {
    /// Service name.
    pub service: Arc<str>,
    /// `server` or `client`.
    pub role: &'static str,
    /// Owning process (`unit@host:pid`).
    pub process: Arc<str>,
    /// Host.
    pub host: Arc<str>,
    /// Process id.
    pub pid: u32,
    /// Unit name.
    pub unit: Arc<str>,
    /// `shoal` or `eCAL` (`None`: its process's registration is not known).
    pub kind: Option<&'static str>,
    /// Entity id.
    pub entity_id: u64,
    /// A server's TCP port (`None` for a client).
    pub tcp_port: Option<u16>,
    /// Seconds since its last registration.
    pub registration_age_s: f64,
    /// Its registration is older than [`STALE_AFTER`]: its call counts and rates are its last ones.
    pub stale: bool,
    /// Its methods, by name.
    pub methods: Vec<MethodRow>,
}

impl ServiceEndpointRow {
    /// Equal but for the registration age and the time the rates were derived at.
    fn same_but_age(&self, o: &ServiceEndpointRow) -> bool {
        let ServiceEndpointRow {
            service,
            role,
            process,
            host,
            pid,
            unit,
            kind,
            entity_id,
            tcp_port,
            registration_age_s: _,
            stale,
            methods,
        } = self;
        (service, role, process, host, pid, unit, kind, entity_id, tcp_port, stale)
            == (&o.service, &o.role, &o.process, &o.host, &o.pid, &o.unit, &o.kind, &o.entity_id, &o.tcp_port, &o.stale)
            && methods.len() == o.methods.len()
            && methods.iter().zip(&o.methods).all(|(a, b)| a.same_but_time(b))
    }

    /// The endpoint's identity across refreshes.
    fn key(&self) -> (&str, u32, u64, &'static str) {
        (&self.host, self.pid, self.entity_id, self.role)
    }
}

/// One service: every server and client of one name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceRow {
    /// Service name.
    pub name: Arc<str>,
    /// Number of servers.
    pub servers: usize,
    /// Number of clients.
    pub clients: usize,
    /// Distinct methods its servers offer.
    pub methods: usize,
    /// Calls its servers served so far, summed (saturating: the counts come from the network).
    pub calls: u64,
    /// Calls per second its servers served, summed over the methods whose rate is known (`None`: none is yet).
    pub call_rate_hz: Option<f64>,
    /// What is wrong: no server, a stale endpoint, servers announcing a method with types that disagree.
    pub problems: Problems,
}

/// What this process's own servers and clients did ([`shoal::monitor::ServiceCounts`]): the one place shoal knows
/// failed calls, since registration carries only call counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OwnServiceCounts {
    /// Requests its servers executed.
    pub calls_served: u64,
    /// Requests its servers answered as failed (unknown method, handler error, response too large), did not
    /// decode, or refused as busy.
    pub calls_failed: u64,
    /// Connections its servers refused or closed (too many, handshake, malformed frames, unauthenticated).
    pub connections_refused: u64,
    /// Calls its clients made (one per server called).
    pub calls_made: u64,
    /// Of those: not answered in time.
    pub calls_timed_out: u64,
    /// Of those: the connection failed.
    pub calls_broken: u64,
}

impl OwnServiceCounts {
    fn of(c: &shoal::monitor::ServiceCounts) -> OwnServiceCounts {
        OwnServiceCounts {
            calls_served: c.calls_served,
            calls_failed: c.calls_failed.saturating_add(c.bad_requests).saturating_add(c.busy),
            connections_refused: c
                .refused_max_sessions
                .saturating_add(c.handshake_failures)
                .saturating_add(c.frame_errors)
                .saturating_add(c.unauthenticated),
            calls_made: c.calls_made,
            calls_timed_out: c.calls_timed_out,
            calls_broken: c.calls_broken,
        }
    }
}

/// Everything one refresh shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct View {
    /// When the snapshot was taken, seconds since the UNIX epoch.
    pub time_s: f64,
    /// Hosts, by name.
    pub hosts: Vec<HostRow>,
    /// Processes, by host and pid (the monitor included, marked `is_self`).
    pub processes: Vec<ProcessRow>,
    /// Topics, by name (the monitor's own inspector subscriber left out).
    pub topics: Vec<TopicRow>,
    /// Publishers and subscribers (the monitor's own left out).
    pub entities: Vec<EntityRow>,
    /// Connections measured by shoal subscribers, by topic.
    pub connections: Vec<ConnectionRow>,
    /// Services, by name.
    pub services: Vec<ServiceRow>,
    /// Their servers and clients, by service name, servers first, then by host, pid and entity id.
    pub service_endpoints: Vec<ServiceEndpointRow>,
    /// What this process's own servers and clients did.
    pub own_service_counts: OwnServiceCounts,
    #[serde(skip)]
    topic_index: HashMap<Arc<str>, usize>,
}

impl View {
    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicRow> {
        self.topic_index.get(name).map(|&i| &self.topics[i])
    }

    /// The connections of topic `name`.
    pub fn connections_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ConnectionRow> + 'a {
        let start = self.connections.partition_point(|c| &*c.topic < name);
        self.connections[start..].iter().take_while(move |c| &*c.topic == name)
    }

    /// The service called `name`.
    pub fn service(&self, name: &str) -> Option<&ServiceRow> {
        self.services.binary_search_by(|s| (*s.name).cmp(name)).ok().map(|i| &self.services[i])
    }

    /// The servers and clients of service `name` (servers first).
    pub fn endpoints_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ServiceEndpointRow> + 'a {
        self.service_endpoints[self.endpoint_range(name)].iter()
    }

    /// Where the servers and clients of service `name` are in [`View::service_endpoints`].
    pub fn endpoint_range(&self, name: &str) -> std::ops::Range<usize> {
        let start = self.service_endpoints.partition_point(|e| &*e.service < name);
        let end = start + self.service_endpoints[start..].partition_point(|e| &*e.service == name);
        start..end
    }

    /// Servers, clients and the distinct methods of the servers, over every service.
    pub fn service_totals(&self) -> (usize, usize, usize) {
        self.services.iter().fold((0, 0, 0), |(s, c, m), r| (s + r.servers, c + r.clients, m + r.methods))
    }

    /// The publishers and subscribers of topic `name`.
    pub fn entities_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a EntityRow> + 'a {
        let start = self.entities.partition_point(|e| &*e.topic < name);
        self.entities[start..].iter().take_while(move |e| &*e.topic == name)
    }

    /// True when `other` shows the same network with the same figures: only the time and the registration ages
    /// (which tick with it between two registrations) may differ. A change of what the ages mean (a peer going
    /// stale) is a change of problems, and counts.
    pub fn same_content(&self, other: &View) -> bool {
        self.hosts == other.hosts
            && self.topics == other.topics
            && self.connections == other.connections
            && self.processes.len() == other.processes.len()
            && self.processes.iter().zip(&other.processes).all(|(a, b)| a.same_but_age(b))
            && self.entities.len() == other.entities.len()
            && self.entities.iter().zip(&other.entities).all(|(a, b)| a.same_but_age(b))
            && self.services == other.services
            && self.own_service_counts == other.own_service_counts
            && self.service_endpoints.len() == other.service_endpoints.len()
            && self.service_endpoints.iter().zip(&other.service_endpoints).all(|(a, b)| a.same_but_age(b))
    }

    /// Rows with at least one problem: topics, processes, services.
    pub fn problem_count(&self) -> usize {
        self.topics.iter().filter(|t| t.problems.need_attention()).count()
            + self.processes.iter().filter(|p| p.problems.need_attention()).count()
            + self.services.iter().filter(|s| s.problems.need_attention()).count()
    }
}

/// Shares equal strings between views.
#[derive(Debug, Default)]
pub struct Interner(HashSet<Arc<str>>);

impl Interner {
    /// The shared copy of `s`.
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.0.insert(a.clone());
        a
    }

    /// Forgets strings no view uses any more (call now and then).
    pub fn shrink(&mut self) {
        self.0.retain(|a| Arc::strong_count(a) > 1);
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn via_name(v: Via) -> &'static str {
    v.name()
}

/// Builds the view of `snap`. `prev` (the view before) tells whether drops are rising.
pub fn build_view(snap: &Snapshot, prev: Option<&View>, interner: &mut Interner) -> View {
    let processes = process_rows(snap, prev, interner);
    let hosts = host_rows(snap, interner);
    let self_proc: Option<(&str, u32)> =
        snap.processes.iter().find(|p| p.is_self).map(|p| (p.host_name.as_str(), p.pid));
    let is_self = |t: &TopicEntry| self_proc == Some((t.host_name.as_str(), t.pid));

    // Publishers and subscribers by topic (the monitor's own subscriber left out).
    let mut by_topic: BTreeMap<&str, Vec<&TopicEntry>> = BTreeMap::new();
    for t in snap.topics.iter().filter(|t| !is_self(t)) {
        by_topic.entry(&t.topic_name).or_default().push(t);
    }
    let cx = TopicContext::new(snap, &processes, prev, interner);
    let mut topics = Vec::with_capacity(by_topic.len());
    let mut entities = Vec::with_capacity(snap.topics.len());
    let mut connections = Vec::new();
    for (name, list) in &by_topic {
        let name_a = interner.get(name);
        // The topic's figures and problems: the core's one summary, as `shoal list` shows them.
        let sum = shoal::monitor::summarize_topic(name, list);
        let drops_before = prev.and_then(|v| v.topic(name)).map(|t| t.drops);
        let problems = topic_problems(&sum, drops_before);
        for s in list.iter().filter(|t| t.direction == TopicDirection::Subscriber) {
            cx.connections(&name_a, s, list, interner, &mut connections);
        }
        for t in list {
            entities.push(cx.entity(&name_a, t, interner));
        }
        topics.push(topic_row(name_a, &sum, problems, interner));
    }
    let topic_index = topics.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
    let time_s = view_time(snap);
    let (services, service_endpoints) = service_rows(snap, time_s, &processes, prev, interner);
    View {
        time_s,
        hosts,
        processes,
        topics,
        entities,
        connections,
        services,
        service_endpoints,
        own_service_counts: OwnServiceCounts::of(&snap.service_counts),
        topic_index,
    }
}

/// The services of `snap`: one row per name, and their servers and clients with each method's call rate, derived
/// from the call counts of the view before (`prev`).
fn service_rows(
    snap: &Snapshot,
    time_s: f64,
    processes: &[ProcessRow],
    prev: Option<&View>,
    interner: &mut Interner,
) -> (Vec<ServiceRow>, Vec<ServiceEndpointRow>) {
    let proc_of: HashMap<(&str, u32), &ProcessRow> = processes.iter().map(|p| ((&*p.host, p.pid), p)).collect();
    let before: HashMap<(&str, u32, u64, &'static str), &ServiceEndpointRow> =
        prev.map(|v| v.service_endpoints.iter().map(|e| (e.key(), e)).collect()).unwrap_or_default();
    let mut endpoints: Vec<ServiceEndpointRow> = snap
        .services
        .iter()
        .map(|s| {
            let role = match s.role {
                ServiceRole::Server => "server",
                ServiceRole::Client => "client",
            };
            let proc_row = proc_of.get(&(s.host_name.as_str(), s.pid));
            let age = s.registration_age.as_secs_f64();
            let sent_at = time_s - age;
            let prev_ep = before.get(&(s.host_name.as_str(), s.pid, s.entity_id, role));
            let mut methods: Vec<MethodRow> = s
                .methods
                .iter()
                .map(|m| {
                    let prev_m = prev_ep.and_then(|e| e.methods.iter().find(|pm| *pm.name == m.name));
                    method_row(m, sent_at, prev_m, interner)
                })
                .collect();
            methods.sort_by(|a, b| a.name.cmp(&b.name));
            ServiceEndpointRow {
                service: interner.get(&s.service_name),
                role,
                process: match proc_row {
                    Some(p) => interner.get(&p.label()),
                    None => interner.get(&format!("{}@{}:{}", s.unit_name, s.host_name, s.pid)),
                },
                host: interner.get(&s.host_name),
                pid: s.pid,
                unit: interner.get(&s.unit_name),
                kind: proc_row.map(|p| p.kind),
                entity_id: s.entity_id,
                tcp_port: (s.role == ServiceRole::Server).then_some(s.tcp_port),
                registration_age_s: age,
                stale: s.registration_age > STALE_AFTER && !s.is_self,
                methods,
            }
        })
        .collect();
    endpoints.sort_by(|a, b| {
        (&a.service, a.role != "server", &a.host, a.pid, a.entity_id).cmp(&(
            &b.service,
            b.role != "server",
            &b.host,
            b.pid,
            b.entity_id,
        ))
    });
    let mut services = Vec::new();
    let mut start = 0;
    while start < endpoints.len() {
        let name = endpoints[start].service.clone();
        let n = endpoints[start..].iter().take_while(|e| e.service == name).count();
        services.push(service_row(name, &endpoints[start..start + n]));
        start += n;
    }
    (services, endpoints)
}

/// A method's row, its call rate derived from the row before (`prev`) when a registration at least
/// [`MIN_RATE_SPAN_S`] later than the one the rate was last derived from arrived (`sent_at`: when this one was
/// sent).
fn method_row(m: &MethodInfo, sent_at: f64, prev: Option<&MethodRow>, interner: &mut Interner) -> MethodRow {
    let mut ty = |t: &shoal::TypeInfo| TypeRow {
        name: interner.get(&t.name),
        encoding: interner.get(&t.encoding),
        descriptor_bytes: t.descriptor.len(),
    };
    let (request, response) = (ty(&m.request), ty(&m.response));
    let (call_rate_hz, basis_calls, basis_time_s) = match prev {
        // First seen, or the count went down (a restart): nothing to derive a rate from yet.
        None => (None, m.call_count, sent_at),
        Some(p) if m.call_count < p.basis_calls => (None, m.call_count, sent_at),
        Some(p) => {
            let span = sent_at - p.basis_time_s;
            if span >= MIN_RATE_SPAN_S {
                // Counts from the network: a difference too large for f64 to matter is still a number.
                let delta = m.call_count.saturating_sub(p.basis_calls) as f64;
                (Some(delta / span), m.call_count, sent_at)
            } else {
                (p.call_rate_hz, p.basis_calls, p.basis_time_s)
            }
        }
    };
    MethodRow {
        name: interner.get(&m.name),
        request,
        response,
        calls: m.call_count,
        call_rate_hz,
        errors: None,
        basis_calls,
        basis_time_s,
    }
}

/// A service's row from its endpoints (servers first).
fn service_row(name: Arc<str>, eps: &[ServiceEndpointRow]) -> ServiceRow {
    let servers: Vec<&ServiceEndpointRow> = eps.iter().filter(|e| e.role == "server").collect();
    let mut method_names: Vec<&str> = servers.iter().flat_map(|e| e.methods.iter().map(|m| &*m.name)).collect();
    method_names.sort_unstable();
    method_names.dedup();
    let calls = servers.iter().flat_map(|e| &e.methods).fold(0u64, |n, m| n.saturating_add(m.calls.max(0) as u64));
    let rates: Vec<f64> = servers.iter().flat_map(|e| &e.methods).filter_map(|m| m.call_rate_hz).collect();
    let mut problems = Problems::default();
    if servers.is_empty() {
        problems.add(Problem::NoServer);
    }
    if eps.iter().any(|e| e.stale) {
        problems.add(Problem::Stale);
    }
    // Servers announcing one method with types that disagree (the topics' rule, on names and encodings).
    for m in &method_names {
        let announced = servers.iter().flat_map(|e| &e.methods).filter(|x| &*x.name == *m);
        let types = |f: fn(&MethodRow) -> &TypeRow| -> Vec<shoal::TypeInfo> {
            announced.clone().map(|x| shoal::TypeInfo::new(&*f(x).name, &*f(x).encoding, Vec::new())).collect()
        };
        if shoal::TypeInfo::disagree(&types(|x| &x.request)) || shoal::TypeInfo::disagree(&types(|x| &x.response)) {
            problems.add(Problem::TypeMismatch);
        }
    }
    ServiceRow {
        servers: servers.len(),
        clients: eps.len() - servers.len(),
        methods: method_names.len(),
        calls,
        call_rate_hz: (!rates.is_empty()).then(|| rates.iter().sum()),
        problems,
        name,
    }
}

/// When `snap` was taken, seconds since the epoch (0 when unknown).
fn view_time(snap: &Snapshot) -> f64 {
    snap.taken_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}

/// One row per process, sorted by host and pid, with its problems (stale, a bad state, kernel drops rising since
/// `prev`).
fn process_rows(snap: &Snapshot, prev: Option<&View>, interner: &mut Interner) -> Vec<ProcessRow> {
    let mut processes: Vec<ProcessRow> = snap
        .processes
        .iter()
        .map(|p| {
            let mut problems = Problems::default();
            if p.registration_age > STALE_AFTER && !p.is_self {
                problems.add(Problem::Stale);
            }
            if p.state.severity.is_problem() {
                problems.add(Problem::BadState);
            }
            // Counters from the network: summed saturating (a peer may announce anything).
            let kernel_drops = p.shoal.map(|s| s.udp_kernel_drops.saturating_add(s.registration_kernel_drops));
            let before = prev.and_then(|v| v.processes.iter().find(|r| (&*r.host, r.pid) == (&*p.host_name, p.pid)));
            if let (Some(now), Some(before)) = (kernel_drops, before.and_then(|r| r.kernel_drops))
                && now > before
            {
                problems.add(Problem::DropsRising);
            }
            ProcessRow {
                host: interner.get(&p.host_name),
                pid: p.pid,
                name: interner.get(file_name(&p.process_name)),
                path: interner.get(&p.process_name),
                command_line: interner.get(&p.command_line),
                unit: interner.get(&p.unit_name),
                kind: if p.is_shoal { "shoal" } else { "eCAL" },
                version: interner.get(&p.runtime_version),
                registration_age_s: p.registration_age.as_secs_f64(),
                severity: p.state.severity,
                state: interner.get(&p.state.to_string()),
                is_self: p.is_self,
                kernel_drops,
                memory_bytes: p.shoal.and_then(|s| s.memory_rss_bytes),
                cpu_load: p.shoal.and_then(|s| s.cpu_load()),
                problems,
            }
        })
        .collect();
    processes.sort_by(|a, b| (&a.host, a.pid).cmp(&(&b.host, b.pid)));
    processes
}

/// One row per host: its processes and its publishers + subscribers, by host name.
fn host_rows(snap: &Snapshot, interner: &mut Interner) -> Vec<HostRow> {
    let mut hosts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for p in &snap.processes {
        hosts.entry(&p.host_name).or_default().0 += 1;
    }
    for t in &snap.topics {
        hosts.entry(&t.host_name).or_default().1 += 1;
    }
    hosts.into_iter().map(|(h, (processes, entities))| HostRow { host: interner.get(h), processes, entities }).collect()
}

/// A topic's problems: the summary's, and drops rising since the view before (`drops_before`).
fn topic_problems(sum: &TopicSummary, drops_before: Option<u64>) -> Problems {
    let mut problems = Problems::default();
    for p in &sum.problems {
        problems.add(match p {
            TopicProblem::TypeMismatch => Problem::TypeMismatch,
            TopicProblem::NoSubscribers => Problem::NoSubscribers,
            TopicProblem::NoPublishers => Problem::NoPublishers,
            _ => Problem::Stale,
        });
    }
    if drops_before.is_some_and(|d| sum.drops > d) {
        problems.add(Problem::DropsRising);
    }
    problems
}

/// A topic's row from its summary.
fn topic_row(name: Arc<str>, sum: &TopicSummary, problems: Problems, interner: &mut Interner) -> TopicRow {
    let typed = sum.type_info();
    let (type_names, encodings) = sum.type_label();
    TopicRow {
        name,
        type_name: interner.get(typed.map_or("", |t| t.name.as_str())),
        encoding: interner.get(typed.map_or("", |t| t.encoding.as_str())),
        type_label: interner.get(&if type_names == "-" { type_names } else { format!("{type_names} ({encodings})") }),
        no_publisher: sum.publishers == 0,
        publishers: sum.publishers,
        subscribers: sum.subscribers,
        layers: interner.get(&sum.layers.join(",")),
        ring_page_kb: sum.ring_page_kb.clone(),
        rate_hz: sum.rate_hz,
        bandwidth_bps: sum.bandwidth_bps,
        size_bytes: sum.size_bytes,
        stale_figures_s: (sum.figures_age > STALE_AFTER).then(|| sum.figures_age.as_secs_f64().floor()),
        drops: sum.drops,
        latency: Percentiles::of(&sum.latency_histogram),
        latency_mean_us: (sum.latency.count > 0).then_some(sum.latency.mean_us),
        cross_host_connections: sum.cross_host_connections,
        problems,
        buckets: sum.latency_histogram.buckets().collect(),
    }
}

/// What a topic's connection and entity rows are built with besides the topic: the processes' labels, the
/// publishers by entity id and the connections' drops in the view before.
struct TopicContext<'a> {
    proc_label: HashMap<(&'a str, u32), Arc<str>>,
    kind_of: HashMap<(&'a str, u32), &'static str>,
    publisher_of: HashMap<u64, &'a TopicEntry>,
    prev_conn_drops: HashMap<ConnKey, u64>,
}

impl<'a> TopicContext<'a> {
    fn new(
        snap: &'a Snapshot,
        processes: &'a [ProcessRow],
        prev: Option<&View>,
        interner: &mut Interner,
    ) -> TopicContext<'a> {
        TopicContext {
            proc_label: processes.iter().map(|p| ((&*p.host, p.pid), interner.get(&p.label()))).collect(),
            kind_of: processes.iter().map(|p| ((&*p.host, p.pid), p.kind)).collect(),
            publisher_of: snap
                .topics
                .iter()
                .filter(|t| t.direction == TopicDirection::Publisher)
                .map(|t| (t.entity_id, t))
                .collect(),
            prev_conn_drops: prev
                .map(|v| v.connections.iter().map(|c| (c.key(), c.drops)).collect())
                .unwrap_or_default(),
        }
    }

    /// The label of the process `t` belongs to (`unit@host:pid` when that process is not known).
    fn label_of(&self, interner: &mut Interner, t: &TopicEntry) -> Arc<str> {
        self.proc_label
            .get(&(t.host_name.as_str(), t.pid))
            .cloned()
            .unwrap_or_else(|| interner.get(&format!("{}@{}:{}", t.unit_name, t.host_name, t.pid)))
    }

    /// The connections of subscriber `s` of `topic` (whose endpoints are `list`), added to `out`: those it measured
    /// (a shoal subscriber), or those the registrations imply (an eCAL subscriber).
    fn connections(
        &self,
        topic: &Arc<str>,
        s: &TopicEntry,
        list: &[&TopicEntry],
        interner: &mut Interner,
        out: &mut Vec<ConnectionRow>,
    ) {
        let Some(st) = &s.shoal else {
            self.announced_connections(topic, s, list, interner, out);
            return;
        };
        let conns = st.connections.as_slice();
        for c in conns {
            let publisher = self
                .publisher_of
                .get(&c.publisher_id)
                .map(|p| self.label_of(interner, p))
                .unwrap_or_else(|| interner.get(&format!("publisher {:x}", c.publisher_id)));
            let latency = if c.same_host { Percentiles::of(&c.latency) } else { None };
            let via = via_name(c.via);
            let key = ConnKey { publisher_id: c.publisher_id, subscriber_id: s.entity_id, via };
            let mut cp = Problems::default();
            if self.prev_conn_drops.get(&key).is_some_and(|&d| c.drops > d) {
                cp.add(Problem::DropsRising);
            }
            out.push(ConnectionRow {
                topic: topic.clone(),
                publisher_id: c.publisher_id,
                publisher,
                subscriber_id: s.entity_id,
                subscriber: self.label_of(interner, s),
                via,
                measured: true,
                shared_figures: false,
                same_host: c.same_host,
                rate_hz: c.rate_hz(),
                bandwidth_bps: c.bandwidth_bps(),
                messages: c.messages,
                bytes: c.bytes,
                drops: c.drops,
                last_size: c.last_size,
                latency,
                problems: cp,
                buckets: c.latency.buckets().collect(),
            });
        }
    }

    /// The connections of eCAL subscriber `s` (it announces totals only): one per publisher in `list` that shares
    /// a layer with it ([`shoal::monitor::announced_layer`]), with the subscriber's totals as figures.
    fn announced_connections(
        &self,
        topic: &Arc<str>,
        s: &TopicEntry,
        list: &[&TopicEntry],
        interner: &mut Interner,
        out: &mut Vec<ConnectionRow>,
    ) {
        let pubs: Vec<(&TopicEntry, Via)> =
            list.iter().filter_map(|p| shoal::monitor::announced_layer(p, s).map(|v| (*p, v))).collect();
        let rate_hz = f64::from(s.data_frequency_mhz.max(0)) / 1000.0;
        let size = u64::try_from(s.topic_size).unwrap_or(0);
        for &(p, via) in &pubs {
            let via = via_name(via);
            let key = ConnKey { publisher_id: p.entity_id, subscriber_id: s.entity_id, via };
            let drops = u64::try_from(s.message_drops).unwrap_or(0);
            let mut cp = Problems::default();
            if self.prev_conn_drops.get(&key).is_some_and(|&d| drops > d) {
                cp.add(Problem::DropsRising);
            }
            out.push(ConnectionRow {
                topic: topic.clone(),
                publisher_id: p.entity_id,
                publisher: self.label_of(interner, p),
                subscriber_id: s.entity_id,
                subscriber: self.label_of(interner, s),
                via,
                measured: false,
                shared_figures: pubs.len() > 1,
                same_host: p.host_name == s.host_name,
                rate_hz,
                bandwidth_bps: rate_hz * size as f64,
                messages: u64::try_from(s.data_clock).unwrap_or(0),
                bytes: 0,
                drops,
                last_size: size,
                latency: None,
                problems: cp,
                buckets: Buckets::default(),
            });
        }
    }

    /// The row of publisher or subscriber `t` of `topic`.
    fn entity(&self, topic: &Arc<str>, t: &TopicEntry, interner: &mut Interner) -> EntityRow {
        EntityRow {
            topic: topic.clone(),
            direction: match t.direction {
                TopicDirection::Publisher => "pub",
                TopicDirection::Subscriber => "sub",
            },
            process: self.label_of(interner, t),
            host: interner.get(&t.host_name),
            pid: t.pid,
            entity_id: t.entity_id,
            kind: self.kind_of.get(&(t.host_name.as_str(), t.pid)).copied(),
            type_name: interner.get(&t.type_info.name),
            encoding: interner.get(&t.type_info.encoding),
            descriptor_bytes: t.type_info.descriptor.len(),
            layers: interner.get(&t.layers.join(",")),
            messages: t.data_clock,
            rate_hz: f64::from(t.data_frequency_mhz.max(0)) / 1000.0,
            drops: t.message_drops.max(0) as u64,
            connections: (t.connections_local, t.connections_external),
            type_mismatch: t.type_mismatch,
            registration_age_s: t.registration_age.as_secs_f64(),
            stale: t.registration_age > STALE_AFTER,
        }
    }
}

/// `1.2 kHz`, `12.0 Hz`.
pub fn fmt_rate(hz: f64) -> String {
    if hz >= 1000.0 { format!("{:.1} kHz", hz / 1000.0) } else { format!("{hz:.1} Hz") }
}

/// `1.5 MB/s`, `12 kB/s`, `80 B/s`.
pub fn fmt_bandwidth(bps: f64) -> String {
    format!("{}/s", fmt_bytes(bps))
}

/// A CPU load (in cores) as shown: `12.5 %` of one core (above 100 % on several).
pub fn fmt_cpu(load: Option<f64>) -> String {
    load.map_or_else(|| "-".to_owned(), |l| format!("{:.1} %", l * 100.0))
}

/// Resident memory as shown.
pub fn fmt_memory(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| fmt_bytes(b as f64))
}

/// `1.5 MB`, `12.0 kB`, `80 B`.
pub fn fmt_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// `850 ns`, `12.3 µs`, `4.1 ms`, `2.0 s`.
pub fn fmt_us(us: f64) -> String {
    if us < 1.0 {
        format!("{:.0} ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.1} s", us / 1e6)
    }
}
