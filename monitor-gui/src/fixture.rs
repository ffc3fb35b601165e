//! A scripted network for the tests, the screenshots (`shoal-monitor --fixture`) and the scale measurement
//! (`--fixture-scale`): snapshots built by hand, one step per refresh, that show every view and every problem the
//! monitor knows — a shoal demo over the ring, a protobuf topic read across hosts, an eCAL camera over eCAL's
//! shared memory that starts losing frames, a stale eCAL logger nobody listens to, a subscriber without publisher
//! and a type mismatch; and services: a shoal calibration server called from both hosts, an eCAL camera control
//! server the teleop process calls while it runs, the stale logger's control server and a map client without a
//! server.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::Message as _;
use shoal::monitor::{
    ConnectionStats, LatencyHistogram, LatencySummary, MethodInfo, ProcessEntry, ServiceEntry, ServiceRole,
    ShoalProcessStats, ShoalStats, Snapshot, TopicDirection, TopicEntry, Via,
};
use shoal::{ProcessState, Severity, SeverityLevel, TypeInfo};

use crate::source::{Message, MessageSource, SnapshotSource};

/// Host of most fixture processes.
pub const HOST: &str = "lab-pc";
/// The other host.
pub const REMOTE_HOST: &str = "robot-2";
/// The fixture's protobuf topic.
pub const IMU_TOPIC: &str = "/imu";
/// The protobuf type of [`IMU_TOPIC`].
pub const IMU_TYPE: &str = "pb.sensors.Imu";
/// The fixture's shoal service (a server on this host, clients on both hosts).
pub const CALIB_SERVICE: &str = "calibration";
/// Calls per second the calibration server's `get` serves (its two clients' together).
pub const CALIB_GET_RATE: f64 = 5.0;
/// 2024-01-01T00:00:00Z: the fixture's clock starts here.
const EPOCH_S: u64 = 1_704_067_200;

/// Deterministic pseudo-random numbers (SplitMix64).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The scripted network.
#[derive(Debug, Clone)]
pub struct Fixture {
    step: u64,
    rng: Rng,
    /// Extra generated topics (scale), each with one publisher and one subscriber.
    extra_topics: usize,
    /// Extra generated processes the extra topics spread over.
    extra_processes: usize,
    /// Hold the network still from this step on.
    still_after: Option<u64>,
    /// The snapshot held.
    held: Option<Snapshot>,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

struct Proc {
    host: &'static str,
    pid: u32,
    unit: &'static str,
    shoal: bool,
}

const PROCS: &[Proc] = &[
    Proc { host: HOST, pid: 999, unit: "shoal_monitor", shoal: true },
    Proc { host: HOST, pid: 1001, unit: "demo_pub", shoal: true },
    Proc { host: HOST, pid: 1002, unit: "demo_sub_a", shoal: true },
    Proc { host: HOST, pid: 1003, unit: "demo_sub_b", shoal: true },
    Proc { host: HOST, pid: 1004, unit: "imu_driver", shoal: true },
    Proc { host: HOST, pid: 2001, unit: "ecal_camera", shoal: false },
    Proc { host: HOST, pid: 2002, unit: "legacy_logger", shoal: false },
    Proc { host: REMOTE_HOST, pid: 3001, unit: "navigation", shoal: true },
    Proc { host: HOST, pid: 1005, unit: "teleop", shoal: true },
    Proc { host: HOST, pid: 2003, unit: "ecal_recorder", shoal: false },
];

/// Each endpoint's announced connections, as eCAL counts them: the other side's endpoints of its topic on its host
/// and on other hosts (the scale topics, one publisher and one subscriber each, are left at 0).
fn count_connections(topics: &mut [TopicEntry]) {
    let peers: Vec<(String, TopicDirection, String)> =
        topics.iter().map(|t| (t.topic_name.clone(), t.direction, t.host_name.clone())).collect();
    for t in topics.iter_mut().filter(|t| !t.topic_name.starts_with("/fleet/")) {
        let others = peers.iter().filter(|(n, d, _)| *n == t.topic_name && *d != t.direction);
        let local = others.clone().filter(|(_, _, h)| *h == t.host_name).count();
        let external = others.count() - local;
        (t.connections_local, t.connections_external) = (local as i32, external as i32);
    }
}

/// What a scripted shoal process announces of its use: CPU load (thousandths of a core) and resident memory
/// (bytes), before a small wobble.
fn usage(unit: &str) -> (u32, u64) {
    match unit {
        "shoal_monitor" => (60, 48 << 20),
        "demo_pub" => (120, 14 << 20),
        "demo_sub_a" => (35, 9 << 20),
        "demo_sub_b" => (40, 9 << 20),
        "imu_driver" => (25, 11 << 20),
        "navigation" => (180, 96 << 20),
        _ => (5, 6 << 20),
    }
}

/// The teleop process runs during these steps (then it unregisters: unmatch, gone).
const TELEOP_STEPS: std::ops::Range<u64> = 30..60;
/// The eCAL recorder stops refreshing its registration at step 50 and expires at step 62.
const RECORDER_STALLS_AT: u64 = 50;
const RECORDER_EXPIRES_AT: u64 = 62;

impl Fixture {
    /// The small network.
    pub fn new() -> Fixture {
        Fixture { step: 0, rng: Rng(7), extra_topics: 0, extra_processes: 0, still_after: None, held: None }
    }

    /// The small network plus `topics` generated topics over `processes` generated processes (1000 and 200 for
    /// the scale target).
    pub fn with_scale(topics: usize, processes: usize) -> Fixture {
        Fixture { extra_topics: topics, extra_processes: processes.max(1), ..Fixture::new() }
    }

    /// From step `steps` on (at least 1), every snapshot is that step's again with only its time advanced: the
    /// processes stay, nothing changes (the idle measurement).
    pub fn hold_still_after(&mut self, steps: u64) {
        self.still_after = Some(steps.max(1));
    }

    /// Steps taken so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    fn latency(&mut self, n: u64, base_us: f64, spread: f64) -> LatencyHistogram {
        let mut h = LatencyHistogram::default();
        for _ in 0..n.min(2000) {
            let u = self.rng.unit();
            // A log-normal-ish body with a rare tail.
            let tail = if self.rng.unit() < 0.01 { 8.0 } else { 1.0 };
            let us = base_us * (1.0 + spread * (-(1.0 - u).ln())) * tail;
            h.record((us * 1000.0) as u64);
        }
        h
    }

    /// The next snapshot: the network one second after the previous one.
    pub fn next_snapshot(&mut self) -> Snapshot {
        if let Some(held) = &mut self.held {
            self.step += 1;
            held.taken_at = held.taken_at.map(|t| t + Duration::from_secs(1));
            return held.clone();
        }
        let snap = self.generate();
        if self.still_after.is_some_and(|n| self.step >= n) {
            self.held = Some(snap.clone());
        }
        snap
    }

    fn generate(&mut self) -> Snapshot {
        self.step += 1;
        let k = self.step;
        let taken_at = SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_S + k);
        let alive = |p: &&Proc| match p.pid {
            1005 => TELEOP_STEPS.contains(&k),
            2003 => k < RECORDER_EXPIRES_AT,
            _ => true,
        };
        let recorder_age = Duration::from_millis(300) + Duration::from_secs(k.saturating_sub(RECORDER_STALLS_AT));
        let mut processes: Vec<ProcessEntry> = PROCS
            .iter()
            .filter(alive)
            .map(|p| ProcessEntry {
                host_name: p.host.into(),
                pid: p.pid,
                process_name: format!("/usr/bin/{}", p.unit),
                unit_name: p.unit.into(),
                command_line: format!("/usr/bin/{} --config /etc/{}.yaml", p.unit, p.unit),
                runtime_version: if p.shoal { "shoal 0.1.0 (eCAL v6.1.1 compatible)".into() } else { "v6.1.1".into() },
                is_shoal: p.shoal,
                is_self: p.pid == 999,
                registration_age: if p.pid == 2002 {
                    Duration::from_millis(3500 + 500 * (k % 6))
                } else if p.pid == 2003 {
                    recorder_age
                } else {
                    Duration::from_millis(100 + (k * 137) % 800)
                },
                state: if p.pid == 2001 && k >= 4 {
                    ProcessState::new(Severity::Warning, SeverityLevel::Level1, "frames dropped")
                } else {
                    ProcessState::new(Severity::Healthy, SeverityLevel::Level1, "")
                },
                shoal: p.shoal.then(|| ShoalProcessStats {
                    // Memory and CPU as a shoal process announces them: the publisher busiest, each steady with a
                    // little wobble; the first refresh has no load yet (two measurements make one).
                    memory_rss_bytes: Some(usage(p.unit).1 + (k % 4) * (256 << 10)),
                    cpu_load_permille: (k > 0).then_some(usage(p.unit).0 + (k % 3) as u32 * 5),
                    ..ShoalProcessStats::default()
                }),
            })
            .collect();
        let mut topics = Vec::new();

        // shoal_demo/0: 1 kHz, 64 B, over the ring to two subscribers.
        let demo_pub =
            self.publisher(1001, 0x1001, "shoal_demo/0", TypeInfo::raw("shoal.demo.Bytes"), "shoal_ring", 1000.0, 64);
        for (pid, id, base) in [(1002, 0x2001, 3.0), (1003, 0x2002, 4.5)] {
            let c = self.connection(0x1001, Via::ShoalRing, true, k, 1000.0, 64, 0, base, 0.6);
            topics.push(self.subscriber(
                pid,
                id,
                "shoal_demo/0",
                TypeInfo::raw("shoal.demo.Bytes"),
                "shoal_ring",
                vec![c],
                0,
            ));
        }
        topics.push(demo_pub);

        // /imu: protobuf, 200 Hz; read over the ring on this host and over UDP from the other host.
        topics.push(self.publisher(1004, 0x1004, IMU_TOPIC, imu_type_info(), "shoal_ring,udp", 200.0, 58));
        let c = self.connection(0x1004, Via::ShoalRing, true, k, 200.0, 58, 0, 6.0, 0.8);
        topics.push(self.subscriber(1002, 0x2003, IMU_TOPIC, imu_type_info(), "shoal_ring", vec![c], 0));
        let c = self.connection(0x1004, Via::Udp, false, k, 200.0, 58, 0, 250.0, 0.5);
        let mut remote = self.subscriber(3001, 0x3001, IMU_TOPIC, imu_type_info(), "udp", vec![c], 0);
        remote.host_name = REMOTE_HOST.into();
        topics.push(remote);

        // /camera: an eCAL publisher, 30 Hz, 1 MB, read over eCAL's shm; from step 3 on it loses frames.
        let drops = k.saturating_sub(2) * 3 + (k / 7) * 5;
        let mut cam = self.publisher(2001, 0x5001, "/camera", TypeInfo::raw("sensor.Image"), "shm", 30.0, 1 << 20);
        cam.shoal = None;
        topics.push(cam);
        let c =
            self.connection(0x5001, Via::EcalShm, true, k, 30.0 - (drops.min(3) as f64), 1 << 20, drops, 180.0, 1.5);
        topics.push(self.subscriber(1003, 0x2004, "/camera", TypeInfo::raw("sensor.Image"), "shm", vec![c], drops));

        // /status: a stale eCAL logger nobody subscribes to.
        let mut status = self.publisher(2002, 0x5002, "/status", TypeInfo::raw("std.String"), "udp", 1.0, 12);
        status.shoal = None;
        status.registration_age =
            processes.iter().find(|p| p.pid == 2002).map_or(Duration::ZERO, |p| p.registration_age);
        topics.push(status);
        if k < RECORDER_EXPIRES_AT {
            let mut rec = self.subscriber(2003, 0x5003, "/status", TypeInfo::raw("std.String"), "udp", vec![], 0);
            rec.shoal = None;
            // eCAL's subscriber measures its own latency and announces a mean since it started (no histogram).
            rec.latency = shoal::monitor::LatencySummary { count: k + 1, mean_us: 111.0, ..Default::default() };
            rec.registration_age = recorder_age;
            topics.push(rec);
        }

        // /cmd_vel: a subscriber with no publisher.
        let mut cmd = self.subscriber(3001, 0x3002, "/cmd_vel", proto("pb.Twist"), "", vec![], 0);
        cmd.host_name = REMOTE_HOST.into();
        if TELEOP_STEPS.contains(&k) {
            let c = self.connection(0x1006, Via::Udp, false, k, 20.0, 48, 0, 300.0, 0.5);
            if let Some(s) = cmd.shoal.as_mut() {
                s.connections.push(c);
            }
            topics.push(self.publisher(1005, 0x1006, "/cmd_vel", proto("pb.Twist"), "udp", 20.0, 48));
        } else if k >= TELEOP_STEPS.end {
            // Teleop has ended: the subscriber still announces the last size it received and the mean latency
            // since it started (as eCAL's do), figures of data that no longer flows.
            cmd.topic_size = 48;
            cmd.latency = shoal::monitor::LatencySummary { count: 600, mean_us: 300.0, ..Default::default() };
        }
        topics.push(cmd);

        // /odom: the publisher sends pb.Odometry, the subscriber expects pb.Pose.
        topics.push(self.publisher(1004, 0x1005, "/odom", proto("pb.Odometry"), "shoal_ring", 50.0, 96));
        topics.push(self.subscriber(1002, 0x2005, "/odom", proto("pb.Pose"), "shoal_ring", vec![], 0));

        // Scale: generated processes and topics.
        for p in 0..self.extra_processes.min(self.extra_topics.max(1)) {
            processes.push(ProcessEntry {
                host_name: HOST.into(),
                pid: 10_000 + p as u32,
                process_name: format!("/opt/fleet/node_{p:03}"),
                unit_name: format!("node_{p:03}"),
                command_line: format!("/opt/fleet/node_{p:03} --id {p}"),
                runtime_version: "shoal 0.1.0 (eCAL v6.1.1 compatible)".into(),
                is_shoal: true,
                is_self: false,
                registration_age: Duration::from_millis(200),
                state: ProcessState::new(Severity::Healthy, SeverityLevel::Level1, ""),
                shoal: Some(ShoalProcessStats::default()),
            });
        }
        for i in 0..self.extra_topics {
            let procs = self.extra_processes.max(1);
            let pub_pid = 10_000 + (i % procs) as u32;
            let sub_pid = 10_000 + ((i + 1) % procs) as u32;
            let name = format!("/fleet/sensor_{i:04}");
            let rate = 10.0 + (i % 90) as f64;
            let (pub_id, sub_id, ti) = (0x10_0000 + i as u64, 0x20_0000 + i as u64, TypeInfo::raw("fleet.Reading"));
            topics.push(self.publisher(pub_pid, pub_id, &name, ti.clone(), "shoal_ring", rate, 128));
            let mut c = self.connection(pub_id, Via::ShoalRing, true, k, rate, 128, 0, 5.0, 0.5);
            c.latency = LatencyHistogram::default();
            c.latency.record(5_000 + (i as u64 % 7) * 300);
            topics.push(self.subscriber(sub_pid, sub_id, &name, ti, "shoal_ring", vec![c], 0));
        }
        count_connections(&mut topics);
        let logger_age = processes.iter().find(|p| p.pid == 2002).map_or(Duration::ZERO, |p| p.registration_age);
        let services = self.services(k, logger_age);
        Snapshot {
            taken_at: Some(taken_at),
            processes,
            topics,
            auth: Default::default(),
            socket_drops: Default::default(),
            registration: Default::default(),
            udp: Default::default(),
            tcp: Default::default(),
            services,
            service_counts: Default::default(),
        }
    }

    /// The services at step `k`. Each method's call count is its rate times the time its registration was sent
    /// (the step minus the registration's age), so the rates the monitor derives are the scripted ones.
    fn services(&self, k: u64, logger_age: Duration) -> Vec<ServiceEntry> {
        let calib_req = || proto("pb.calib.Request");
        let calib = || proto("pb.calib.Calibration");
        let ack = || proto("pb.calib.Ack");
        let mut out = vec![
            // calibration: a shoal server on this host; navigation (other host) and demo_sub_a call it.
            self.service(
                k,
                1004,
                0x6001,
                CALIB_SERVICE,
                ServiceRole::Server,
                None,
                &[("get", calib_req(), calib(), &|t| CALIB_GET_RATE * t), ("set", calib(), ack(), &|t| t)],
            ),
            self.service(
                k,
                3001,
                0x6002,
                CALIB_SERVICE,
                ServiceRole::Client,
                None,
                &[("get", calib_req(), calib(), &|t| 4.0 * t)],
            ),
            self.service(
                k,
                1002,
                0x6003,
                CALIB_SERVICE,
                ServiceRole::Client,
                None,
                &[("get", calib_req(), calib(), &|t| t), ("set", calib(), ack(), &|t| t)],
            ),
            // camera/control: an eCAL server; teleop calls it (2/s) while it runs.
            self.service(
                k,
                2001,
                0x6101,
                "camera/control",
                ServiceRole::Server,
                None,
                &[("set_exposure", TypeInfo::raw("exposure_req"), TypeInfo::raw("exposure_resp"), &|t| {
                    2.0 * (t - TELEOP_STEPS.start as f64).clamp(0.0, (TELEOP_STEPS.end - TELEOP_STEPS.start) as f64)
                })],
            ),
            // logger/control: the stale eCAL logger's server, its figures as old as its registration.
            self.service(
                k,
                2002,
                0x6201,
                "logger/control",
                ServiceRole::Server,
                Some(logger_age),
                &[("flush", TypeInfo::new("", "", Vec::new()), TypeInfo::new("", "", Vec::new()), &|t| 0.5 * t)],
            ),
            // map_server: navigation asks for a map nobody serves.
            self.service(
                k,
                3001,
                0x6301,
                "map_server",
                ServiceRole::Client,
                None,
                &[("get_map", proto("pb.nav.MapRequest"), proto("pb.nav.Map"), &|t| t)],
            ),
        ];
        if TELEOP_STEPS.contains(&k) {
            out.push(self.service(
                k,
                1005,
                0x6102,
                "camera/control",
                ServiceRole::Client,
                None,
                &[("set_exposure", TypeInfo::raw("exposure_req"), TypeInfo::raw("exposure_resp"), &|t| {
                    2.0 * (t - TELEOP_STEPS.start as f64).max(0.0)
                })],
            ));
        }
        out.sort_by(|a, b| {
            (&a.service_name, a.role, &a.host_name, a.pid).cmp(&(&b.service_name, b.role, &b.host_name, b.pid))
        });
        out
    }

    /// A server (with a port) or client of process `pid` at step `k`, its registration `age` old (default: a
    /// fresh one), with `methods` whose call counts are a function of the time the registration was sent (s).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn service(
        &self,
        k: u64,
        pid: u32,
        id: u64,
        name: &str,
        role: ServiceRole,
        age: Option<Duration>,
        methods: &[(&str, TypeInfo, TypeInfo, &dyn Fn(f64) -> f64)],
    ) -> ServiceEntry {
        let p = PROCS.iter().find(|p| p.pid == pid);
        let (host, unit) = p.map_or((HOST, "unknown"), |p| (p.host, p.unit));
        // One registration a second, each entity at its own phase: the time between two is exactly 1 s.
        let age = age.unwrap_or_else(|| Duration::from_millis(150 + (id % 7) * 100));
        let sent_at = k as f64 - age.as_secs_f64();
        ServiceEntry {
            host_name: host.into(),
            pid,
            process_name: format!("/usr/bin/{unit}"),
            unit_name: unit.into(),
            entity_id: id,
            service_name: name.into(),
            role,
            methods: methods
                .iter()
                .map(|(m, req, resp, calls)| MethodInfo {
                    name: (*m).into(),
                    request: req.clone(),
                    response: resp.clone(),
                    call_count: calls(sent_at).max(0.0) as i64,
                })
                .collect(),
            tcp_port: if role == ServiceRole::Server { 40_000 + (id % 1000) as u16 } else { 0 },
            version: 1,
            is_self: false,
            registration_age: age,
        }
    }

    fn entry(&self, pid: u32, id: u64, topic: &str, ti: TypeInfo, layers: &str, dir: TopicDirection) -> TopicEntry {
        let p = PROCS.iter().find(|p| p.pid == pid);
        let unit = p.map_or_else(|| format!("node_{:03}", pid.saturating_sub(10_000)), |p| p.unit.to_owned());
        TopicEntry {
            host_name: HOST.into(),
            pid,
            process_name: format!("/usr/bin/{unit}"),
            unit_name: unit,
            entity_id: id,
            topic_name: topic.into(),
            direction: dir,
            type_info: ti,
            layers: layers.split(',').filter(|l| !l.is_empty()).map(str::to_owned).collect(),
            // shoal's publishers announce their rings' pages; these are on normal 4 KiB ones.
            ring_page_kb: (dir == TopicDirection::Publisher && layers.contains("shoal_ring")).then_some(4),
            data_clock: 0,
            data_frequency_mhz: 0,
            message_drops: 0,
            topic_size: 0,
            latency: LatencySummary::default(),
            shoal: Some(ShoalStats::default()),
            registration_age: Duration::from_millis(100 + (self.step * 211 + id) % 700),
            connections_local: 0,
            connections_external: 0,
            type_mismatch: false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn publisher(
        &mut self,
        pid: u32,
        id: u64,
        topic: &str,
        ti: TypeInfo,
        layers: &str,
        rate: f64,
        size: u64,
    ) -> TopicEntry {
        let mut e = self.entry(pid, id, topic, ti, layers, TopicDirection::Publisher);
        let jitter = 1.0 + 0.02 * (self.rng.unit() - 0.5);
        e.data_clock = (rate * self.step as f64) as i64;
        e.data_frequency_mhz = (rate * jitter * 1000.0) as i32;
        e.topic_size = size as i32;
        e.shoal = Some(ShoalStats {
            bytes: e.data_clock as u64 * size,
            bandwidth_bps: rate * jitter * size as f64,
            connections: vec![],
            ..ShoalStats::default()
        });
        e
    }

    #[allow(clippy::too_many_arguments)]
    fn subscriber(
        &mut self,
        pid: u32,
        id: u64,
        topic: &str,
        ti: TypeInfo,
        layers: &str,
        conns: Vec<ConnectionStats>,
        drops: u64,
    ) -> TopicEntry {
        let mut e = self.entry(pid, id, topic, ti, layers, TopicDirection::Subscriber);
        let rate: f64 = conns.iter().map(|c| c.rate_hz()).sum();
        e.data_clock = conns.iter().map(|c| c.messages as i64).sum();
        e.data_frequency_mhz = (rate * 1000.0) as i32;
        e.message_drops = drops as i32;
        e.topic_size = conns.iter().map(|c| c.last_size).max().unwrap_or(0) as i32;
        for c in conns.iter().filter(|c| c.same_host) {
            if let (Some(p50), Some(n)) = (c.latency.percentile(0.5), Some(c.latency.count())) {
                let mut s = LatencySummary::default();
                s.record_us(p50 as f64 / 1000.0);
                s.count = n;
                e.latency.merge(&s);
            }
        }
        e.shoal = Some(ShoalStats {
            bytes: conns.iter().map(|c| c.bytes).sum(),
            bandwidth_bps: conns.iter().map(|c| c.bandwidth_bps()).sum(),
            connections: conns,
            ..ShoalStats::default()
        });
        e
    }

    #[allow(clippy::too_many_arguments)]
    fn connection(
        &mut self,
        publisher_id: u64,
        via: Via,
        same_host: bool,
        k: u64,
        rate: f64,
        size: u64,
        drops: u64,
        base_us: f64,
        spread: f64,
    ) -> ConnectionStats {
        // A latency bump between steps 20 and 25 makes the plots worth looking at.
        let bump = if (20..25).contains(&(k % 60)) { 3.0 } else { 1.0 };
        let window = rate as u64;
        ConnectionStats {
            publisher_id,
            via,
            same_host,
            messages: window * k,
            bytes: window * k * size,
            drops,
            window_ms: 1000,
            window_messages: window,
            window_bytes: window * size,
            last_size: size,
            latency: self.latency(window, base_us * bump, spread),
        }
    }
}

impl SnapshotSource for Fixture {
    fn snapshot(&mut self) -> Snapshot {
        self.next_snapshot()
    }
}

/// A protobuf type without descriptor.
fn proto(name: &str) -> TypeInfo {
    TypeInfo::new(name, "proto", Vec::new())
}

/// `pb.sensors.Imu`'s descriptor: a serialized `FileDescriptorSet`, as eCAL and shoal announce it.
pub fn imu_descriptor() -> Vec<u8> {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
    let field = |name: &str, number: i32, ty: Type, label: Label, type_name: Option<&str>| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(str::to_owned),
        ..Default::default()
    };
    let vec3 = DescriptorProto {
        name: Some("Vec3".into()),
        field: ["x", "y", "z"]
            .iter()
            .enumerate()
            .map(|(i, n)| field(n, i as i32 + 1, Type::Double, Label::Optional, None))
            .collect(),
        ..Default::default()
    };
    let imu = DescriptorProto {
        name: Some("Imu".into()),
        field: vec![
            field("stamp_us", 1, Type::Uint64, Label::Optional, None),
            field("frame_id", 2, Type::String, Label::Optional, None),
            field("accel", 3, Type::Message, Label::Optional, Some(".pb.sensors.Vec3")),
            field("gyro", 4, Type::Message, Label::Optional, Some(".pb.sensors.Vec3")),
            field("covariance", 5, Type::Float, Label::Repeated, None),
        ],
        ..Default::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("sensors/imu.proto".into()),
            package: Some("pb.sensors".into()),
            message_type: vec![vec3, imu],
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The type information of [`IMU_TOPIC`].
pub fn imu_type_info() -> TypeInfo {
    TypeInfo::new(IMU_TYPE, "proto", imu_descriptor())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_vec3(out: &mut Vec<u8>, field: u64, v: [f64; 3]) {
    let mut inner = Vec::new();
    for (i, x) in v.iter().enumerate() {
        put_varint(&mut inner, ((i as u64 + 1) << 3) | 1);
        inner.extend_from_slice(&x.to_le_bytes());
    }
    put_varint(out, (field << 3) | 2);
    put_varint(out, inner.len() as u64);
    out.extend_from_slice(&inner);
}

/// One `pb.sensors.Imu` payload (protobuf wire format, written by hand so the fixture needs no generated code).
pub fn imu_payload(stamp_us: u64, frame_id: &str, accel: [f64; 3], gyro: [f64; 3]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, 1 << 3);
    put_varint(&mut out, stamp_us);
    put_varint(&mut out, (2 << 3) | 2);
    put_varint(&mut out, frame_id.len() as u64);
    out.extend_from_slice(frame_id.as_bytes());
    put_vec3(&mut out, 3, accel);
    put_vec3(&mut out, 4, gyro);
    let cov = [0.01f32, 0.0, 0.02];
    put_varint(&mut out, (5 << 3) | 2);
    put_varint(&mut out, (cov.len() * 4) as u64);
    for c in cov {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

/// The fixture's odometry topic: the publisher sends `pb.Odometry` (a descriptor with it, so its messages decode),
/// the subscriber expects `pb.Pose` (a type mismatch).
pub const ODOM_TOPIC: &str = "/odom";

/// A message type of the fixture: `package.Name` with messages of (name, type, label, type name) fields.
fn descriptor_set(file: &str, package: &str, messages: Vec<prost_types::DescriptorProto>) -> Vec<u8> {
    use prost_types::{FileDescriptorProto, FileDescriptorSet};
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some(file.into()),
            package: Some(package.into()),
            message_type: messages,
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn message_type(
    name: &str,
    fields: &[(&str, prost_types::field_descriptor_proto::Type, bool, Option<&str>)],
) -> prost_types::DescriptorProto {
    use prost_types::field_descriptor_proto::Label;
    prost_types::DescriptorProto {
        name: Some(name.into()),
        field: fields
            .iter()
            .enumerate()
            .map(|(i, (n, ty, repeated, type_name))| prost_types::FieldDescriptorProto {
                name: Some((*n).into()),
                number: Some(i as i32 + 1),
                label: Some(if *repeated { Label::Repeated } else { Label::Optional } as i32),
                r#type: Some(*ty as i32),
                type_name: type_name.map(str::to_owned),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// `pb.Odometry` of [`ODOM_TOPIC`]: `stamp_us`, `pose {x, y, theta}`, `speed` (float), `ranges` (repeated double).
pub fn odometry_type_info() -> TypeInfo {
    use prost_types::field_descriptor_proto::Type;
    let pose = message_type(
        "Pose2",
        &[("x", Type::Double, false, None), ("y", Type::Double, false, None), ("theta", Type::Double, false, None)],
    );
    let odom = message_type(
        "Odometry",
        &[
            ("stamp_us", Type::Uint64, false, None),
            ("pose", Type::Message, false, Some(".pb.Pose2")),
            ("speed", Type::Float, false, None),
            ("ranges", Type::Double, true, None),
        ],
    );
    TypeInfo::new("pb.Odometry", "proto", descriptor_set("odometry.proto", "pb", vec![pose, odom]))
}

/// One `pb.Odometry` payload: the robot `n` steps along a circle of 2 m (a full turn in 40 steps), 0.3 m/s, four
/// ranges.
pub fn odometry_payload(n: u64) -> Vec<u8> {
    let a = n as f64 * std::f64::consts::TAU / 40.0;
    let mut out = Vec::new();
    put_varint(&mut out, 1 << 3);
    put_varint(&mut out, 1_700_000_000_000_000 + n * 20_000);
    put_vec3(&mut out, 2, [2.0 * a.cos(), 2.0 * a.sin(), a.rem_euclid(std::f64::consts::TAU)]);
    put_varint(&mut out, (3 << 3) | 5);
    out.extend_from_slice(&(0.3f32 + 0.05 * (a * 3.0).sin() as f32).to_le_bytes());
    let ranges = [1.5 + 0.5 * a.sin(), 2.0, 3.0 + a.cos(), 4.0];
    put_varint(&mut out, (4 << 3) | 2);
    put_varint(&mut out, (ranges.len() * 8) as u64);
    for r in ranges {
        out.extend_from_slice(&r.to_le_bytes());
    }
    out
}

/// `pb.Twist` of `/cmd_vel`: `linear_x`, `angular_z` (doubles).
pub fn twist_type_info() -> TypeInfo {
    use prost_types::field_descriptor_proto::Type;
    let twist =
        message_type("Twist", &[("linear_x", Type::Double, false, None), ("angular_z", Type::Double, false, None)]);
    TypeInfo::new("pb.Twist", "proto", descriptor_set("twist.proto", "pb", vec![twist]))
}

/// One `pb.Twist` payload of step `n`.
pub fn twist_payload(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (field, v) in [(1u64, 0.5 + 0.1 * (n as f64 * 0.3).sin()), (2, 0.2 * (n as f64 * 0.2).cos())] {
        put_varint(&mut out, (field << 3) | 1);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Scripted messages for the inspector and the field plot: every poll, one message of each followed topic —
/// `/imu` and `/odom` protobuf whose numbers follow sines and circles, `/cmd_vel` protobuf, `/status` text,
/// anything else bytes. Message `n` (the `n`th poll) is received `n` seconds after the fixture's epoch.
#[derive(Debug, Default)]
pub struct FixtureMessages {
    topics: Vec<Arc<str>>,
    clock: u64,
}

impl MessageSource for FixtureMessages {
    fn follow(&mut self, topics: &[Arc<str>]) {
        self.topics = topics.to_vec();
    }

    fn poll(&mut self, out: &mut Vec<Message>) {
        if self.topics.is_empty() {
            return;
        }
        self.clock += 1;
        let n = self.clock;
        for topic in &self.topics {
            let (type_info, payload) = match &**topic {
                IMU_TOPIC => {
                    let t = n as f64 * 0.1;
                    (
                        imu_type_info(),
                        imu_payload(
                            1_700_000_000_000_000 + n * 5000,
                            "imu_link",
                            [t.sin(), t.cos(), 9.81],
                            [0.01, -0.02, 0.1 * t.sin()],
                        ),
                    )
                }
                ODOM_TOPIC => (odometry_type_info(), odometry_payload(n)),
                "/cmd_vel" => (twist_type_info(), twist_payload(n)),
                "/status" => (TypeInfo::raw("std.String"), format!("ok, uptime {n} s").into_bytes()),
                _ => (TypeInfo::raw("shoal.demo.Bytes"), (0..64u64).map(|i| (i * 7 + n) as u8).collect()),
            };
            out.push(Message {
                topic: topic.clone(),
                payload: payload.into(),
                type_info: Arc::new(type_info),
                publisher_id: 0x1004,
                clock: n,
                send_time_us: 1_700_000_000_000_000 + n as i64 * 5000,
                received_at: SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_S + n),
            });
        }
    }
}

/// The scripted network's log messages (the Logs tab of the tests and screenshots): shoal's and eCAL's processes
/// of both hosts, every level, newest last; `t0_us` is the first one's time.
pub fn fixture_logs(t0_us: i64) -> Vec<shoal::logging::LogRecord> {
    use shoal::logging::{LogLevel, LogRecord};
    let rec = |dt_ms: i64, host: &str, pid: i32, unit: &str, level: LogLevel, content: &str| LogRecord {
        time_us: t0_us + dt_ms * 1000,
        host_name: host.into(),
        process_id: pid,
        process_name: format!("/opt/robot/bin/{unit}"),
        unit_name: unit.into(),
        level,
        content: content.into(),
    };
    vec![
        rec(0, REMOTE_HOST, 3001, "navigation", LogLevel::Info, "map loaded: 4096 x 4096 cells"),
        rec(400, HOST, 1005, "teleop", LogLevel::Info, "joystick connected"),
        rec(900, REMOTE_HOST, 3001, "navigation", LogLevel::Warning, "localisation drift 0.4 m, relocalising"),
        rec(1300, HOST, 2003, "ecal_recorder", LogLevel::Error, "disk /data 97% full"),
        rec(1800, REMOTE_HOST, 3001, "navigation", LogLevel::Debug1, "planner: 212 nodes expanded"),
        rec(2500, HOST, 2003, "ecal_recorder", LogLevel::Fatal, "cannot write /data/run_0042.hdf5: no space left"),
    ]
}
