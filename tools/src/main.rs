//! `shoal`: the command line of the shoal pub/sub framework.

mod common;
mod config_cmd;
mod descriptors;
mod echo;
mod exit;
mod flatbuf;
mod inspect;
mod log;
mod perf;
mod play;
mod publish;
mod rates;
mod record;
mod service;
mod topic;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// shoal command line tools.
#[derive(Debug, Parser)]
#[command(name = "shoal", version, about, after_help = exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Processes and topics registration knows (shoal's and eCAL's), with type, layers, rate and drops.
    List(inspect::ListArgs),
    /// Processes registration knows.
    #[command(subcommand)]
    Process(ProcessCommand),
    /// List, inspect, echo, measure and publish topics (shoal's and eCAL's).
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// List and inspect service servers and clients (shoal's and eCAL's), call their methods.
    #[command(subcommand)]
    Service(service::ServiceCommand),
    /// Follow the log messages of every process (shoal's and eCAL's) on eCAL's log channel, filtered.
    Log(log::LogArgs),
    /// Record topics into an MCAP file (with their protobuf schemas), until Ctrl-C, SIGTERM or --duration.
    Record(record::RecordArgs),
    /// Publish the messages of an MCAP file with their recorded timing and type information.
    Play(play::PlayArgs),
    /// Summarise an MCAP file: channels, types, message counts, time span, recording metadata, damage.
    Info(play::InfoArgs),
    /// The configuration: effective values and their origin, checking a file, the documented default file.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Print a shell completion script (e.g. `shoal completions bash > /etc/bash_completion.d/shoal`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Measure latency, throughput, fan-out and memory of shoal (optionally against a raw ring).
    Perf(perf::PerfArgs),
    /// Internal: the echo/sink process spawned by `shoal perf`.
    #[command(hide = true)]
    PerfPeer(perf::PeerArgs),
}

/// `shoal process ...`
#[derive(Debug, Subcommand)]
enum ProcessCommand {
    /// Every process: host, pid, shoal or eCAL, unit, publishers, subscribers, state, version.
    List(inspect::ListArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::List(a) => inspect::list_all(&a),
        Command::Process(ProcessCommand::List(a)) => inspect::process_list(&a),
        Command::Topic(cmd) => topic::run(cmd),
        Command::Service(cmd) => service::run(cmd),
        Command::Config(cmd) => config_cmd::run(&cmd),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "shoal", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script).map_err(anyhow::Error::from)
        }
        Command::Perf(args) => perf::run(args),
        Command::PerfPeer(args) => perf::run_peer(args),
        Command::Log(args) => log::run(args),
        Command::Record(args) => record::run(args),
        Command::Play(args) => play::run(args),
        Command::Info(args) => play::info(args),
    };
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) if exit::is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            // Errors may quote names from the network or a file: every error is escaped here, once, whole (a newline
            // inside a name cannot start a line that looks like another message).
            eprintln!("shoal: error: {}", shoal::monitor::printable(&format!("{e:#}")));
            ExitCode::from(exit::code_of(&e))
        }
    }
}
