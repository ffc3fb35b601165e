//! `shoal topic list|info|echo|hz|bw|pub`: look at and talk to any topic, shoal's or eCAL's.

use anyhow::Result;
use clap::Subcommand;

use crate::echo::EchoArgs;
use crate::inspect::{InfoArgs, ListArgs};
use crate::publish::PubArgs;
use crate::rates::{Figure, RateArgs};

/// `shoal topic ...`
#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// List the publishers and subscribers registration knows (this host; the network in network mode).
    List(ListArgs),
    /// Every publisher and subscriber of a topic: host, pid, unit, layers, type and descriptor, statistics.
    Info(InfoArgs),
    /// Print the messages published on a topic, decoded through their announced type.
    Echo(EchoArgs),
    /// Message rate over a rolling window (average, min/max/std dev of the interval), like `ros2 topic hz`.
    Hz(RateArgs),
    /// Bandwidth and message sizes over a rolling window, like `ros2 topic bw`.
    Bw(RateArgs),
    /// Publish a text message, or a protobuf message from JSON (--type NAME --data '{json}').
    Pub(PubArgs),
}

/// Runs a `shoal topic` command.
pub(crate) fn run(cmd: TopicCommand) -> Result<()> {
    match cmd {
        TopicCommand::List(a) => crate::inspect::topic_list(&a),
        TopicCommand::Info(a) => crate::inspect::topic_info(&a),
        TopicCommand::Echo(a) => crate::echo::run(&a),
        TopicCommand::Hz(a) => crate::rates::run(&a, Figure::Rate),
        TopicCommand::Bw(a) => crate::rates::run(&a, Figure::Bandwidth),
        TopicCommand::Pub(a) => crate::publish::run(&a),
    }
}
