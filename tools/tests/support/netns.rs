//! "Hosts" in network namespaces for the network-mode tests: two joined directly by a veth pair
//! ([`NetnsPair::create`]), or through a middle namespace where the impairment relay carries every frame with loss,
//! delay and reordering ([`NetnsPair::create_impaired`]), or two or more on a bridge in a middle namespace
//! ([`NetnsPair::create_bridged`]). Namespaces are deleted on drop, also when a test panics.

use std::process::Command;

use super::impair::{Impairment, Relay, offloads_off};
use super::root::run;
pub(crate) use super::root::{is_root, root_or_skip};

/// A directory with an `ecal.yaml` that puts eCAL in network mode (eCAL reads `ecal.yaml` from its working dir).
pub(crate) fn ecal_network_dir() -> String {
    let dir = format!("{}/ecal_net_{}", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(format!("{dir}/ecal.yaml"), "communication_mode: network\n").expect("write ecal.yaml");
    dir
}

/// Two network namespaces ("hosts" a and b), 10.231.`subnet`.1 and .2 (addresses that exist only inside them), each
/// with `lo` up and the multicast route `224.0.0.0/4` on its veth, so multicast stays between the two. Joined by one
/// veth pair, or by two into a middle namespace bridged by the impairment relay. Or three or more such hosts (.1,
/// .2, .3, ...), each joined by a veth pair to a Linux bridge in a middle namespace, as on a switch: multicast from
/// one reaches all the others. Deleted on drop (also when a test panics).
#[derive(Debug)]
pub(crate) struct NetnsPair {
    /// The hosts a, b (, c, ...), then the middle namespace when impaired or bridged.
    names: Vec<String>,
    /// The hosts' ends, in the order of `names`.
    veths: Vec<String>,
    addrs: Vec<String>,
    /// Stopped before the namespaces go.
    relay: Option<Relay>,
}

/// How the hosts of a [`NetnsPair`] are joined.
enum Link {
    /// One veth pair between the two.
    Direct,
    /// Through the impairment relay in the middle namespace.
    Impaired(Impairment),
    /// Through a bridge in the middle namespace.
    Bridge,
}

impl NetnsPair {
    /// Creates the pair joined by one veth pair; `tag` (≤ 3 chars) keeps names of parallel tests apart.
    pub(crate) fn create(tag: &str, subnet: u8) -> NetnsPair {
        Self::build(tag, subnet, 2, Link::Direct)
    }

    /// Creates the pair joined through a middle namespace whose relay applies `impairment` to every frame in both
    /// directions (the hosts' veth offloads switched off, see `impair.rs`).
    pub(crate) fn create_impaired(tag: &str, subnet: u8, impairment: Impairment) -> NetnsPair {
        Self::build(tag, subnet, 2, Link::Impaired(impairment))
    }

    /// Creates `hosts` hosts (2 to 8) on one bridge of a middle namespace (IGMP snooping at the kernel's default).
    pub(crate) fn create_bridged(tag: &str, subnet: u8, hosts: usize) -> NetnsPair {
        assert!((2..=8).contains(&hosts), "2 to 8 hosts on a bridge");
        Self::build(tag, subnet, hosts, Link::Bridge)
    }

    fn build(tag: &str, subnet: u8, hosts: usize, link: Link) -> NetnsPair {
        let pid = std::process::id();
        let p = pid % 100_000;
        let letters: Vec<char> = ('a'..='h').take(hosts).collect();
        let mut names: Vec<String> = letters.iter().map(|l| format!("shoal_{tag}_{l}_{pid}")).collect();
        if !matches!(link, Link::Direct) {
            names.push(format!("shoal_{tag}_m_{pid}"));
        }
        let veths: Vec<String> = letters.iter().map(|l| format!("v{tag}{l}{p}")).collect();
        let legs: Vec<String> = letters.iter().map(|l| format!("v{tag}m{l}{p}")).collect();
        let addrs = (1..=hosts).map(|i| format!("10.231.{subnet}.{i}")).collect();
        let mut pair = NetnsPair { names, veths: veths.clone(), addrs, relay: None };
        let setup = |pair: &mut NetnsPair| -> Result<(), String> {
            for n in &pair.names {
                run(&["ip", "netns", "add", n])?;
            }
            let hosts = &pair.names[..hosts];
            match pair.names.get(hosts.len()) {
                None => run(&[
                    "ip", "link", "add", &veths[0], "netns", &hosts[0], "type", "veth", "peer", "name", &veths[1],
                    "netns", &hosts[1],
                ])?,
                Some(m) => {
                    if matches!(link, Link::Bridge) {
                        run(&["ip", "-n", m, "link", "add", "br0", "type", "bridge"])?;
                        run(&["ip", "-n", m, "link", "set", "br0", "up"])?;
                    }
                    for (i, host) in hosts.iter().enumerate() {
                        let (v, leg) = (&veths[i], &legs[i]);
                        run(&["ip", "link", "add", v, "netns", host, "type", "veth", "peer", "name", leg, "netns", m])?;
                        if matches!(link, Link::Bridge) {
                            run(&["ip", "-n", m, "link", "set", leg, "master", "br0"])?;
                        }
                        run(&["ip", "-n", m, "link", "set", leg, "up"])?;
                    }
                }
            }
            for ((ns, dev), addr) in hosts.iter().zip(&veths).zip(&pair.addrs) {
                run(&["ip", "-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
                run(&["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
            }
            if let (Some(m), Link::Impaired(imp)) = (pair.names.get(hosts.len()), &link) {
                for (ns, dev) in hosts.iter().zip(&veths) {
                    offloads_off(ns, dev)?;
                    // A lost IP fragment leaves the kernel holding the rest of its datagram for ipfrag_time (30 s),
                    // within ipfrag_high_thresh (4 MB per namespace), beyond which it refuses new fragments. So that
                    // the phases of a test do not share that budget, it lets go after 3 s and may hold 32 MB.
                    let sysctl = "echo 33554432 > /proc/sys/net/ipv4/ipfrag_high_thresh && \
                                  echo 3 > /proc/sys/net/ipv4/ipfrag_time";
                    run(&["ip", "netns", "exec", ns, "sh", "-c", sysctl])?;
                }
                pair.relay = Some(Relay::start(m, [&legs[0], &legs[1]], *imp)?);
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

    /// Makes the host names resolve inside every host's namespace: `ip netns exec` mounts `/etc/netns/<name>/hosts`
    /// over `/etc/hosts` (removed on drop). `names[i]` is the host name of namespace `i`.
    pub(crate) fn hosts<const N: usize>(&self, names: [&str; N]) {
        assert_eq!(N, self.addrs.len(), "a name for every host");
        let mut text = String::from("127.0.0.1 localhost\n");
        for (addr, name) in self.addrs.iter().zip(names) {
            text.push_str(&format!("{addr} {name}\n"));
        }
        for n in &self.names[..N] {
            let dir = format!("/etc/netns/{n}");
            std::fs::create_dir_all(&dir).expect("mkdir /etc/netns/<name>");
            std::fs::write(format!("{dir}/hosts"), &text).expect("write the namespace's hosts file");
        }
    }

    /// The namespace of host `i` (for [`enter_netns`](super::impair::enter_netns)).
    pub(crate) fn namespace(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The address of host `i` (0 = a, 1 = b, ...).
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
