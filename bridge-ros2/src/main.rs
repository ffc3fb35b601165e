//! `shoal-ros2-bridge`: bridges shoal (and eCAL) topics to and from ROS 2 over DDS.
//!
//! ```text
//! shoal-ros2-bridge --config bridge.toml
//! shoal-ros2-bridge --topic chatter=std_msgs/msg/String --topic camera=sensor_msgs/msg/Image,direction=shoal_to_ros
//! shoal-ros2-bridge --service arm_reset=std_srvs/srv/Trigger,server=shoal,ros=/arm/reset
//! ```
//!
//! Logs go to stderr (`RUST_LOG`, default `info`); machine-readable events (ready, stats, qos_mismatch,
//! type_mismatch, type_changed, not_bridged, warning, route_added, route_removed, route_refused; worker_started, worker_exited from the supervisor) are JSON lines on stdout. SIGINT /
//! SIGTERM stop it cleanly.
//!
//! The process started is a supervisor: it checks the configuration and runs this binary again as the worker that
//! does the bridging, under `[supervisor] memory_limit`, restarting it when it dies (see
//! `shoal_ros2_bridge::supervisor`).

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use shoal_ros2_bridge::config::{Config, Supervision};
use shoal_ros2_bridge::{bridge, supervisor};

/// Bridges shoal (and eCAL) topics to and from ROS 2 over DDS, with no ROS install.
#[derive(Parser, Debug)]
#[command(name = "shoal-ros2-bridge", version)]
struct Args {
    /// TOML configuration file (see bridge-ros2/etc/bridge.toml for every key).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// A bridged topic, added to the file's: SHOAL_TOPIC=TYPE[,ros=/name][,direction=shoal_to_ros|ros_to_shoal|both]
    /// [,reliability=reliable|best_effort][,durability=volatile|transient_local][,history_depth=N][,shoal_type=NAME]
    /// [,shoal_descriptor=FILE][,shoal_proto=FILE]. TYPE is e.g. sensor_msgs/msg/Image, or raw; any other ROS 2 type
    /// (its .msg found in --msg-path), or a built-in one with shoal_type, is a generic mapping of protobuf message
    /// shoal_type (defined by shoal_proto or shoal_descriptor) by field names. Defaults: ros=/SHOAL_TOPIC, both,
    /// reliable, volatile, 10.
    #[arg(long = "topic", short = 't')]
    topics: Vec<String>,
    /// A bridged service, added to the file's: SHOAL_SERVICE=pkg/srv/Type,server=shoal|ros[,ros=/name][,method=M]
    /// [,timeout_ms=N][,shoal_request=T,shoal_response=T,shoal_proto=FILE|shoal_descriptor=FILE]. server=shoal offers
    /// a shoal service to ROS 2 clients, server=ros a ROS 2 service to shoal clients. Built in:
    /// std_srvs/srv/Trigger, SetBool, Empty; another .srv (found in --msg-path as DIR/<pkg>/srv/<Type>.srv) needs its
    /// protobuf request and response. Defaults: ros=/SHOAL_SERVICE, method=call, timeout_ms=5000.
    #[arg(long = "service", short = 's')]
    services: Vec<String>,
    /// A directory of ROS 2 `.msg` files laid out as ROS does (DIR/<pkg>/msg/<Type>.msg), for generic mappings;
    /// repeatable, searched before the file's `msg_path` and the built-in definitions.
    #[arg(long = "msg-path")]
    msg_path: Vec<PathBuf>,
    /// ROS_DOMAIN_ID (0..=232); overrides the file and the environment.
    #[arg(long)]
    domain_id: Option<u16>,
    /// IP address of an interface DDS may use (repeatable); overrides the file's `interfaces`.
    #[arg(long = "interface")]
    interfaces: Vec<IpAddr>,
    /// The ROS 2 node name.
    #[arg(long)]
    node_name: Option<String>,
    /// SO_RCVBUF for the DDS sockets, bytes.
    #[arg(long)]
    socket_receive_buffer: Option<usize>,
    /// Statistics interval in milliseconds (0: none).
    #[arg(long)]
    stats_interval_ms: Option<u64>,
    /// The worker's memory limit (RLIMIT_DATA), bytes; overrides the file's `[supervisor] memory_limit`.
    #[arg(long)]
    memory_limit: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    shoal_bridge_common::process::init_tracing();
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => Config::from_file_with(path, &args.msg_path)?,
        None => Config { msg_path: args.msg_path.clone(), ..Config::default() },
    };
    let file_has_domain = args
        .config
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|t| t.lines().any(|l| l.trim_start().starts_with("domain_id")));
    if let Some(d) = args.domain_id {
        anyhow::ensure!(d <= 232, "--domain-id {d}: allowed 0..=232");
        config.domain_id = d;
    } else if !file_has_domain && let Ok(v) = std::env::var("ROS_DOMAIN_ID") {
        config.domain_id = v
            .trim()
            .parse()
            .ok()
            .filter(|d| *d <= 232)
            .with_context(|| format!("ROS_DOMAIN_ID={v:?}: allowed 0..=232"))?;
    }
    if !args.interfaces.is_empty() {
        config.interfaces = args.interfaces.clone();
    }
    if let Some(n) = args.node_name {
        config.node_name = n;
    }
    if let Some(b) = args.socket_receive_buffer {
        config.socket_receive_buffer = b;
    }
    if let Some(s) = args.stats_interval_ms {
        config.stats_interval_ms = s;
    }
    for t in &args.topics {
        config.routes.push(Config::parse_topic_flag(t, &config.msg_path)?);
    }
    for s in &args.services {
        config.services.push(Config::parse_service_flag(s, &config.msg_path)?);
    }
    if let Some(m) = args.memory_limit {
        let (lo, hi) = Supervision::MEMORY_LIMIT_RANGE;
        anyhow::ensure!(
            i64::try_from(m).is_ok_and(|m| (lo..=hi).contains(&m)),
            "--memory-limit {m}: allowed {lo}..={hi} bytes"
        );
        config.supervisor.memory_limit = m;
    }
    anyhow::ensure!(
        !config.routes.is_empty() || !config.services.is_empty() || config.auto.is_some(),
        "nothing to bridge: give --config FILE (with [[topic]], [[service]] or [auto]), --topic SHOAL=TYPE or \
         --service SHOAL=pkg/srv/Type,server=shoal|ros"
    );
    config.check_routes()?;

    let stop = shoal_bridge_common::process::stop_on_signals().context("installing the SIGTERM/SIGINT handlers")?;
    let Some(supervisor_pid) = supervisor::worker_of() else {
        let restarts = supervisor::run(&config.supervisor, &stop)?;
        tracing::info!(restarts, "stopped");
        return Ok(());
    };
    supervisor::enter_worker(&config.supervisor, supervisor_pid).context("setting up the worker process")?;
    bridge::run(&config, stop)?;
    Ok(())
}
