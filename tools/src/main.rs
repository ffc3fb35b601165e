//! `shoal`: the command line of the shoal pub/sub framework.

mod perf;
mod play;
mod record;
mod topic;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// shoal command line tools.
#[derive(Debug, Parser)]
#[command(name = "shoal", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure latency, throughput, fan-out and memory of shoal (optionally against a raw ring).
    Perf(perf::PerfArgs),
    /// List, echo and publish topics (shoal's and eCAL's).
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Record topics into an MCAP file (with their protobuf schemas), until Ctrl-C, SIGTERM or --duration.
    Record(record::RecordArgs),
    /// Publish the messages of an MCAP file with their recorded timing and type information.
    Play(play::PlayArgs),
    /// Summarise an MCAP file: channels, types, message counts, time span, recording metadata, damage.
    Info(play::InfoArgs),
    /// Internal: the echo/sink process spawned by `shoal perf`.
    #[command(hide = true)]
    PerfPeer(perf::PeerArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Perf(args) => perf::run(args),
        Command::PerfPeer(args) => perf::run_peer(args),
        Command::Topic(cmd) => topic::run(cmd),
        Command::Record(args) => record::run(args),
        Command::Play(args) => play::run(args),
        Command::Info(args) => play::info(args),
    }
}
