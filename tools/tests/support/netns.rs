//! Two "hosts" in network namespaces for the network-mode tests: joined directly by a veth pair
//! ([`NetnsPair::create`]), or through a middle namespace where the impairment relay carries every frame with loss,
//! delay and reordering ([`NetnsPair::create_impaired`]). Namespaces are deleted on drop, also when a test panics.

use std::process::Command;

use super::impair::{Impairment, Relay, offloads_off};

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether this process runs as root (network namespaces need it).
pub(crate) fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// True when root; otherwise prints `SKIPPED <test>` with the reason, and the test returns without running.
pub(crate) fn root_or_skip(test: &str) -> bool {
    let root = is_root();
    if !root {
        eprintln!("SKIPPED {test}: creating network namespaces needs root");
    }
    root
}

/// A directory with an `ecal.yaml` that puts eCAL in network mode (eCAL reads `ecal.yaml` from its working dir).
pub(crate) fn ecal_network_dir() -> String {
    let dir = format!("{}/ecal_net_{}", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(format!("{dir}/ecal.yaml"), "communication_mode: network\n").expect("write ecal.yaml");
    dir
}

/// Two network namespaces ("hosts" a and b), 10.231.`subnet`.1 and .2 (addresses that exist only inside them), each
/// with `lo` up and the multicast route `224.0.0.0/4` on its veth, so multicast stays between the two. Joined by one
/// veth pair, or by two into a middle namespace bridged by the impairment relay. Deleted on drop (also when a test
/// panics).
#[derive(Debug)]
pub(crate) struct NetnsPair {
    /// a, b, and the middle namespace when impaired.
    names: Vec<String>,
    /// The hosts' ends: a's and b's.
    veths: [String; 2],
    addrs: [String; 2],
    /// Stopped before the namespaces go.
    relay: Option<Relay>,
}

impl NetnsPair {
    /// Creates the pair joined by one veth pair; `tag` (≤ 3 chars) keeps names of parallel tests apart.
    pub(crate) fn create(tag: &str, subnet: u8) -> NetnsPair {
        Self::build(tag, subnet, None)
    }

    /// Creates the pair joined through a middle namespace whose relay applies `impairment` to every frame in both
    /// directions (the hosts' veth offloads switched off, see `impair.rs`).
    pub(crate) fn create_impaired(tag: &str, subnet: u8, impairment: Impairment) -> NetnsPair {
        Self::build(tag, subnet, Some(impairment))
    }

    fn build(tag: &str, subnet: u8, impairment: Option<Impairment>) -> NetnsPair {
        let pid = std::process::id();
        let p = pid % 100_000;
        let mut names = vec![format!("shoal_{tag}_a_{pid}"), format!("shoal_{tag}_b_{pid}")];
        if impairment.is_some() {
            names.push(format!("shoal_{tag}_m_{pid}"));
        }
        let veths = [format!("v{tag}a{p}"), format!("v{tag}b{p}")];
        let legs = [format!("v{tag}ma{p}"), format!("v{tag}mb{p}")];
        let addrs = [format!("10.231.{subnet}.1"), format!("10.231.{subnet}.2")];
        let mut pair = NetnsPair { names, veths: veths.clone(), addrs, relay: None };
        let setup = |pair: &mut NetnsPair| -> Result<(), String> {
            for n in &pair.names {
                run(&["ip", "netns", "add", n])?;
            }
            let (a, b) = (&pair.names[0], &pair.names[1]);
            match pair.names.get(2) {
                None => run(&[
                    "ip", "link", "add", &veths[0], "netns", a, "type", "veth", "peer", "name", &veths[1], "netns", b,
                ])?,
                Some(m) => {
                    for (i, host) in [a, b].into_iter().enumerate() {
                        let (v, leg) = (&veths[i], &legs[i]);
                        run(&["ip", "link", "add", v, "netns", host, "type", "veth", "peer", "name", leg, "netns", m])?;
                        run(&["ip", "-n", m, "link", "set", leg, "up"])?;
                    }
                }
            }
            for ((ns, dev), addr) in pair.names.iter().zip(&veths).zip(&pair.addrs) {
                run(&["ip", "-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
                run(&["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
            }
            if let (Some(m), Some(imp)) = (pair.names.get(2), impairment) {
                for (ns, dev) in pair.names.iter().zip(&veths) {
                    offloads_off(ns, dev)?;
                    // A lost IP fragment leaves the kernel holding the rest of its datagram for ipfrag_time (30 s),
                    // within ipfrag_high_thresh (4 MB per namespace), beyond which it refuses new fragments. So that
                    // the phases of a test do not share that budget, it lets go after 3 s and may hold 32 MB.
                    let sysctl = "echo 33554432 > /proc/sys/net/ipv4/ipfrag_high_thresh && \
                                  echo 3 > /proc/sys/net/ipv4/ipfrag_time";
                    run(&["ip", "netns", "exec", ns, "sh", "-c", sysctl])?;
                }
                pair.relay = Some(Relay::start(m, [&legs[0], &legs[1]], imp)?);
            }
            Ok(())
        };
        if let Err(e) = setup(&mut pair) {
            drop(pair);
            panic!("cannot set up the network namespaces: {e}");
        }
        pair
    }

    /// The relay of an impaired pair (its counters).
    pub(crate) fn relay(&self) -> Option<&Relay> {
        self.relay.as_ref()
    }

    /// Makes the host names resolve inside both namespaces: `ip netns exec` mounts `/etc/netns/<name>/hosts` over
    /// `/etc/hosts` (removed on drop). `names[i]` is the host name of namespace `i`.
    pub(crate) fn hosts(&self, names: [&str; 2]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (addr, name) in self.addrs.iter().zip(names) {
            text.push_str(&format!("{addr} {name}\n"));
        }
        for n in &self.names[..2] {
            let dir = format!("/etc/netns/{n}");
            std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/<name>");
            std::fs::write(format!("{dir}/hosts"), &text).expect("write the namespace's hosts file");
        }
    }

    /// The address of host `i` (0 = a, 1 = b).
    pub(crate) fn addr(&self, i: usize) -> &str {
        &self.addrs[i]
    }

    /// A command that runs `program args` inside namespace `i` with its own UTS namespace and host name
    /// `hostname`, so that both sides look like different hosts to eCAL and shoal.
    pub(crate) fn command(&self, i: usize, hostname: &str, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i], "unshare", "-u", "sh", "-c", "hostname \"$0\" && exec \"$@\""]);
        cmd.arg(hostname).arg(program).args(args);
        cmd
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // The relay's threads live in the middle namespace: stop them first.
        drop(self.relay.take());
        for n in &self.names {
            // Deleting a namespace also deletes its ends of the veth pairs (and so the pairs).
            let _ = run(&["ip", "netns", "del", n]);
            let _ = std::fs::remove_dir_all(format!("/etc/netns/{n}"));
        }
    }
}
