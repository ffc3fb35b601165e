//! The argument lists of the tests' scripted peers, built in one place: `shoal-peer pub` and `shoal-peer sub`, and
//! the eCAL 6.1.1 `pub.py` and `sub.py` of `tools/tests/ecal/`, spawned on this host or inside a namespace of a
//! [`NetnsPair`].
//!
//! A peer starts from the arguments every test gives it ([`Peer::publisher`], [`Peer::subscriber`],
//! [`Peer::ecal_publisher`], [`Peer::ecal_subscriber`]); each further option is one call, and an option given twice keeps the last value
//! (`shoal-peer` refuses a repeated option).

use std::process::Command;
use std::time::Duration;

use super::netns::{NetnsPair, ecal_network_dir};
use super::process::{Proc, ecal_python, script};

/// Which program a [`Peer`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    /// `shoal-peer` (`pub` or `sub`, the first argument).
    Shoal,
    /// The eCAL venv's python running this script of `tools/tests/ecal/`.
    Ecal(&'static str),
}

/// A scripted peer's command line, and the `ecal.ini` a shoal peer reads.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    program: Program,
    args: Vec<String>,
    ini: Option<String>,
}

impl Peer {
    /// `shoal-peer pub --topic <topic> --count <count> --size <size> --rate <rate> --wait-subs 1` (`rate` 0: as fast
    /// as it can).
    pub(crate) fn publisher(topic: &str, count: u64, size: usize, rate: impl ToString) -> Peer {
        Peer { program: Program::Shoal, args: vec!["pub".into()], ini: None }
            .arg("--topic", topic)
            .arg("--count", count)
            .arg("--size", size)
            .arg("--rate", rate.to_string())
            .arg("--wait-subs", 1)
    }

    /// `shoal-peer sub --topic <topic> --count <count>`.
    pub(crate) fn subscriber(topic: &str, count: u64) -> Peer {
        Peer { program: Program::Shoal, args: vec!["sub".into()], ini: None }
            .arg("--topic", topic)
            .arg("--count", count)
    }

    /// eCAL 6.1.1's `sub.py --topic <topic> --count <count> --layer <layer>` (`udp`, `tcp`, `shm`, ...).
    pub(crate) fn ecal_subscriber(topic: &str, count: u64, layer: &str) -> Peer {
        Peer { program: Program::Ecal("sub.py"), args: Vec::new(), ini: None }
            .arg("--topic", topic)
            .arg("--count", count)
            .arg("--layer", layer)
    }

    /// eCAL 6.1.1's `pub.py --topic <topic> --count <count> --size <size> --rate <rate> --wait-subs 1` (eCAL's
    /// default layers unless `--layer` is given).
    pub(crate) fn ecal_publisher(topic: &str, count: u64, size: usize, rate: impl ToString) -> Peer {
        Peer { program: Program::Ecal("pub.py"), args: Vec::new(), ini: None }
            .arg("--topic", topic)
            .arg("--count", count)
            .arg("--size", size)
            .arg("--rate", rate.to_string())
            .arg("--wait-subs", 1)
    }

    /// Option `name` set to `value` (replacing an earlier value of it).
    pub(crate) fn arg(mut self, name: &str, value: impl ToString) -> Peer {
        let value = value.to_string();
        match self.args.iter().position(|a| a == name) {
            Some(i) if i + 1 < self.args.len() => self.args[i + 1] = value,
            _ => self.args.extend([name.to_string(), value]),
        }
        self
    }

    /// A flag without a value (`--until-accounted`, `--pattern-only`).
    pub(crate) fn flag(mut self, name: &str) -> Peer {
        if !self.args.iter().any(|a| a == name) {
            self.args.push(name.to_string());
        }
        self
    }

    /// `--wait-subs`: the publisher waits for this many subscribers.
    pub(crate) fn wait_subs(self, n: u64) -> Peer {
        self.arg("--wait-subs", n)
    }

    /// `--start-delay-ms`: the publisher's wait between the match and its first send.
    pub(crate) fn start_delay_ms(self, ms: u64) -> Peer {
        self.arg("--start-delay-ms", ms)
    }

    /// `--linger-ms`: how long the peer stays after its last message (publisher) or summary (subscriber).
    pub(crate) fn linger_ms(self, ms: u64) -> Peer {
        self.arg("--linger-ms", ms)
    }

    /// `--idle-ms`: the subscriber gives up after this long without a message.
    pub(crate) fn idle_ms(self, ms: u64) -> Peer {
        self.arg("--idle-ms", ms)
    }

    /// `--first-ms`: the shoal subscriber's wait for the first message.
    pub(crate) fn first_ms(self, ms: u64) -> Peer {
        self.arg("--first-ms", ms)
    }

    /// `--timeout-ms`: the eCAL subscriber gives up this long after its start.
    pub(crate) fn timeout_ms(self, ms: u64) -> Peer {
        self.arg("--timeout-ms", ms)
    }

    /// The `ecal.ini` a shoal peer reads (`ECAL_INI`); without one, shoal's search order (which finds none here).
    pub(crate) fn ini(mut self, path: &str) -> Peer {
        self.ini = Some(path.to_string());
        self
    }

    /// The arguments after the program (for a shoal peer starting with `pub` or `sub`).
    pub(crate) fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    /// Spawns the peer on this host.
    pub(crate) fn spawn(&self, name: &str) -> Proc {
        let cmd = match self.program {
            Program::Shoal => {
                let mut cmd = Command::new(super::PEER);
                cmd.args(&self.args);
                cmd
            }
            Program::Ecal(name) => {
                let mut cmd = Command::new(ecal_python());
                cmd.arg(script(name)).args(&self.args);
                cmd
            }
        };
        self.spawn_command(name, cmd)
    }

    /// Spawns the peer in namespace `i` of `net`, as host `host` (an eCAL peer in network mode, from
    /// [`ecal_network_dir`]).
    pub(crate) fn spawn_in(&self, name: &str, net: &NetnsPair, i: usize, host: &str) -> Proc {
        let cmd = match self.program {
            Program::Shoal => net.command(i, host, super::PEER, &self.args()),
            Program::Ecal(name) => {
                let python = ecal_python();
                let path = script(name);
                let mut args = vec![path.as_str()];
                args.extend(self.args());
                let mut cmd = net.command(i, host, &python, &args);
                cmd.current_dir(ecal_network_dir());
                cmd
            }
        };
        self.spawn_command(name, cmd)
    }

    /// [`spawn`](Self::spawn), then waits for the peer's `ready` line (10 s for shoal, 15 s for eCAL's Python).
    pub(crate) fn spawn_ready(&self, name: &str) -> Proc {
        let p = self.spawn(name);
        p.expect("ready", self.ready_timeout());
        p
    }

    /// [`spawn_in`](Self::spawn_in), then waits for the peer's `ready` line as [`spawn_ready`](Self::spawn_ready).
    pub(crate) fn spawn_ready_in(&self, name: &str, net: &NetnsPair, i: usize, host: &str) -> Proc {
        let p = self.spawn_in(name, net, i, host);
        p.expect("ready", self.ready_timeout());
        p
    }

    fn ready_timeout(&self) -> Duration {
        match self.program {
            Program::Shoal => Duration::from_secs(10),
            Program::Ecal(_) => Duration::from_secs(15),
        }
    }

    fn spawn_command(&self, name: &str, mut cmd: Command) -> Proc {
        if let Some(ini) = &self.ini {
            cmd.env("ECAL_INI", ini);
        }
        Proc::spawn(name, cmd)
    }
}
