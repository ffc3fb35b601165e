//! `shoal topic pub TOPIC`: publishes a text message, or with `--type NAME --data JSON` a protobuf message built
//! from JSON through the type's descriptor — found in registration (a running publisher's or subscriber's) or
//! compiled from `--proto FILE`. The publisher announces the type and its descriptor, so typed subscribers, eCAL
//! and the monitor see it as what it is. It waits for subscribers first.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use shoal::TypeInfo;

use crate::common::start_node;
use crate::descriptors::{self, DescriptorError};
use crate::exit;

/// Arguments of `shoal topic pub`.
#[derive(Debug, Args)]
pub(crate) struct PubArgs {
    /// The topic name.
    topic: String,
    /// A text message (sent as UTF-8 bytes, without a trailing NUL); give --data instead for a protobuf message.
    text: Option<String>,
    /// The message as protobuf JSON (needs --type): e.g. '{"header": {"seq": 1}, "status": "STATUS_OK"}'.
    #[arg(long, conflicts_with = "text")]
    data: Option<String>,
    /// Type name announced in registration; with --data the protobuf message type (e.g. `pb.Imu`).
    #[arg(long = "type")]
    type_name: Option<String>,
    /// Encoding announced in registration (text messages; --data is always `proto`).
    #[arg(long)]
    encoding: Option<String>,
    /// Compile the type from this .proto file (no protoc needed) instead of taking its descriptor from
    /// registration.
    #[arg(long, requires = "data")]
    proto: Option<PathBuf>,
    /// Where --proto's imports are found (repeatable; default: the file's directory).
    #[arg(long = "include", short = 'I', requires = "proto")]
    includes: Vec<PathBuf>,
    /// How long to look for the type in registration, in ms (without --proto).
    #[arg(long, default_value_t = 3000)]
    type_wait_ms: u64,
    /// How many times to send it.
    #[arg(long, short = 'n', default_value_t = 1)]
    count: u64,
    /// Messages per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Wait for this many matching subscribers before the first message.
    #[arg(long, default_value_t = 1)]
    wait_subs: usize,
    /// How long to wait for them, in seconds; then publish anyway (and say so).
    #[arg(long, default_value_t = 5.0)]
    wait_timeout: f64,
    /// After the subscribers matched, wait this long (ms) before the first message: an eCAL shared-memory
    /// subscriber attaches to our memfile when our registration reaches it, a few ms after the match.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
}

/// Runs `shoal topic pub`.
pub(crate) fn run(a: &PubArgs) -> Result<()> {
    let period = match Duration::try_from_secs_f64(1.0 / a.rate) {
        Ok(p) if a.rate > 0.0 && a.rate.is_finite() => p,
        _ => return Err(exit::usage("--rate must be a positive number of messages per second")),
    };
    let wait = Duration::try_from_secs_f64(a.wait_timeout)
        .map_err(|_| exit::usage("--wait-timeout must be a number of seconds ≥ 0"))?;
    let node = start_node("shoal_topic")?;
    let (type_info, payload) = match (&a.data, &a.text) {
        (Some(json), _) => {
            let Some(name) = &a.type_name else {
                return Err(exit::usage("--data needs --type NAME, the protobuf message type (e.g. --type pb.Imu)"));
            };
            if a.encoding.as_deref().is_some_and(|e| e != "proto") {
                return Err(exit::usage("--data builds a protobuf message: its encoding is `proto`; drop --encoding"));
            }
            let t = match &a.proto {
                Some(file) => descriptors::from_proto_file(file, &a.includes, name),
                None => descriptors::find_in_system(&node, name, Some(&a.topic), Duration::from_millis(a.type_wait_ms)),
            }
            .map_err(|e| match e {
                DescriptorError::NotInSystem { .. } => exit::not_found(e.to_string()),
                other => exit::usage(other.to_string()),
            })?;
            let bytes = descriptors::encode_json(&t.message, json).map_err(|e| exit::usage(e.to_string()))?;
            tracing::info!(origin = %t.origin, "type {name}");
            (t.type_info, bytes)
        }
        (None, Some(text)) => {
            let ti = TypeInfo::new(
                a.type_name.clone().unwrap_or_else(|| "std::string".into()),
                a.encoding.clone().unwrap_or_else(|| "base".into()),
                Vec::new(),
            );
            (ti, text.as_bytes().to_vec())
        }
        (None, None) => {
            return Err(exit::usage("give the message: a text argument, or --type NAME --data '{json}'"));
        }
    };
    let mut publ = node.publisher(&a.topic).type_info(type_info).create()?;
    if a.wait_subs > 0 && publ.wait_for_subscribers(a.wait_subs, wait).is_err() {
        eprintln!(
            "shoal topic pub: {} of {} subscribers matched within {wait:?}; publishing anyway",
            publ.subscriber_count(),
            a.wait_subs
        );
    }
    if publ.subscriber_count() > 0 {
        std::thread::sleep(Duration::from_millis(a.settle_ms));
    }
    let mut due = Instant::now();
    for i in 0..a.count {
        publ.send(&payload)?;
        if i + 1 < a.count {
            due = due.checked_add(period).unwrap_or(due);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
    // Let the last message reach readers that are not polling right now before the ring goes away.
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}
