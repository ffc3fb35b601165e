//! eCAL's UDP sockets: where data goes (a topic's multicast group, [`topic_group`]), the send socket, the receive socket, and the multicast interface they use.
//! The registration sockets of the I/O thread are made here too (on the registration port), so registration and
//! data use the same interface for the same configuration.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::NetworkConfig;

/// eCAL's FNV-1 hash of a topic name (`fnv_hash` in `ecal_udp_topic2mcast.h`), truncated to 32 bits.
pub(crate) fn fnv1_32(topic: &str) -> u32 {
    topic.bytes().fold(2_166_136_261u32, |h, b| h.wrapping_mul(16_777_619) ^ u32::from(b))
}

/// The V2 multicast group of `topic` (`topic2mcast`): `(group & mask) | (fnv1(topic) & !mask)`, moved up by one
/// inside the mask when that equals `group` (which carries registration).
pub(crate) fn topic_group(topic: &str, group: Ipv4Addr, mask: Ipv4Addr) -> Ipv4Addr {
    let (g, m) = (u32::from(group), u32::from(mask));
    let mut a = (g & m) | (fnv1_32(topic) & !m);
    if a == g {
        a = (g & m) | (g.wrapping_add(1) & !m);
    }
    Ipv4Addr::from(a)
}

/// Which buffer of a socket [`size_buffer`] sets.
#[derive(Debug, Clone, Copy)]
enum Buffer {
    Receive,
    Send,
}

/// Capped buffer requests already warned about (receive, send): once per process each.
static CAPPED_WARNED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// Asks for a `wanted`-byte buffer; if the kernel caps it (`net.core.{r,w}mem_max`), tries the privileged
/// `SO_{RCV,SND}BUFFORCE` (root), and warns once per process with the limit when the buffer stays smaller.
/// Returns the size the kernel reports (Linux reports twice what it grants for bookkeeping; halved here).
fn size_buffer(s: &Socket, which: Buffer, wanted: usize) -> usize {
    let _ = match which {
        Buffer::Receive => s.set_recv_buffer_size(wanted),
        Buffer::Send => s.set_send_buffer_size(wanted),
    };
    let granted = |s: &Socket| {
        let size = match which {
            Buffer::Receive => s.recv_buffer_size(),
            Buffer::Send => s.send_buffer_size(),
        };
        size.map(|n| n / 2).unwrap_or(0)
    };
    if granted(s) >= wanted {
        return granted(s);
    }
    let forced =
        crate::sys::force_socket_buffer(std::os::fd::AsRawFd::as_raw_fd(s), matches!(which, Buffer::Receive), wanted)
            .is_ok();
    let got = granted(s);
    if got < wanted {
        let (index, name, sysctl, key) = match which {
            Buffer::Receive => (0, "receive", "net.core.rmem_max", "receive_buffer"),
            Buffer::Send => (1, "send", "net.core.wmem_max", "send_buffer"),
        };
        let limit = std::fs::read_to_string(format!("/proc/sys/{}", sysctl.replace('.', "/")))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        if !CAPPED_WARNED[index].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "UDP {name} buffer is {got} bytes, not the {wanted} asked for: the kernel caps it at {sysctl} = \
                 {limit}{}; bursts beyond it are lost. Raise it (sysctl -w {sysctl}={wanted}) or set \
                 [shoal_network] {key} lower to silence this",
                if forced { "" } else { " and this process may not exceed it (not root)" }
            );
        }
    }
    got
}

/// The interface address multicast sockets use: the configured one, else the source address of the route to the
/// multicast group (the default route's interface unless a multicast route says otherwise), else 127.0.0.1.
pub(crate) fn multicast_interface(net: &NetworkConfig) -> Ipv4Addr {
    if !net.multicast_interface.is_unspecified() {
        return net.multicast_interface;
    }
    match route_source(net.multicast_group) {
        Ok(addr) => {
            tracing::debug!(
                "UDP data layer: multicast_interface is 0.0.0.0; using {addr}, the interface of the route to {}",
                net.multicast_group
            );
            addr
        }
        Err(e) => {
            tracing::debug!(
                "UDP data layer: multicast_interface is 0.0.0.0 and there is no route to {} ({e}); using 127.0.0.1",
                net.multicast_group
            );
            Ipv4Addr::LOCALHOST
        }
    }
}

/// The source address the kernel picks for datagrams to `dest` (a `connect` on a UDP socket sends nothing).
fn route_source(dest: Ipv4Addr) -> io::Result<Ipv4Addr> {
    let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
    s.connect(SocketAddrV4::new(dest, 9))?;
    match s.local_addr()? {
        std::net::SocketAddr::V4(a) if !a.ip().is_unspecified() => Ok(*a.ip()),
        other => Err(io::Error::new(io::ErrorKind::AddrNotAvailable, format!("no IPv4 source address ({other})"))),
    }
}

/// Where a publisher of `topic` sends: the local broadcast address, or in network mode the topic's V2 group.
pub(crate) fn destination(net: &NetworkConfig, topic: &str) -> SocketAddrV4 {
    let ip =
        if net.enabled { topic_group(topic, net.multicast_group, net.multicast_mask) } else { net.local_broadcast };
    SocketAddrV4::new(ip, net.data_port)
}

/// The process-wide, non-blocking send socket (broadcast allowed, TTL 1 locally; in network mode the multicast
/// TTL, loopback on and the interface set explicitly).
pub(crate) fn open_send_socket(net: &NetworkConfig, iface: Ipv4Addr) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_nonblocking(true)?;
    size_buffer(&s, Buffer::Send, net.send_buffer);
    if net.enabled {
        s.set_multicast_ttl_v4(net.multicast_ttl)?;
        s.set_multicast_loop_v4(true)?;
        s.set_multicast_if_v4(&iface)?;
    } else {
        s.set_broadcast(true)?;
        s.set_ttl_v4(1)?;
    }
    Ok(s)
}

/// A receive socket: `0.0.0.0:port`, SO_REUSEADDR, non-blocking, `[shoal_network] receive_buffer` large. In network mode it joins the base
/// group on `iface`; the data layer's topic groups are joined by the caller.
pub(crate) fn open_recv_socket(net: &NetworkConfig, iface: Ipv4Addr, port: u16) -> io::Result<mio::net::UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    size_buffer(&s, Buffer::Receive, net.receive_buffer);
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())?;
    if let Err(e) = crate::sys::mmsg::enable_rxq_ovfl(std::os::fd::AsRawFd::as_raw_fd(&s)) {
        tracing::debug!("UDP port {port}: the kernel's drop counter (SO_RXQ_OVFL) is not available: {e}");
    }
    if net.enabled {
        s.join_multicast_v4(&net.multicast_group, &iface)?;
    }
    Ok(mio::net::UdpSocket::from_std(s.into()))
}

/// The loopback broadcast address: in local mode with it as `local_broadcast`, every socket bound to the data port
/// on this host, the sending process's own included, gets every datagram sent there.
pub(crate) const LOOPBACK_BROADCAST: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 255);

/// Whether this configuration sends data where the process's own receive socket gets all of it back (local mode to
/// the loopback broadcast address), so that the receive socket can drop its own datagrams ([`drop_own_datagrams`]).
pub(crate) fn own_datagrams_loop_back(net: &NetworkConfig) -> bool {
    !net.enabled && net.local_broadcast == LOOPBACK_BROADCAST
}

/// A classic BPF program for a UDP socket that drops datagrams from `source` and keeps every other one. A UDP
/// socket's filter sees the packet from the UDP header on (source port at offset 0); the source address is read
/// relative to the IPv4 header (`SKF_NET_OFF` + 12).
pub(crate) fn own_datagram_filter(source: SocketAddrV4) -> [socket2::SockFilter; 6] {
    use socket2::SockFilter;
    // Opcodes of `linux/filter.h`: BPF_LD|BPF_H|BPF_ABS, BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K.
    const LDH_ABS: u16 = 0x28;
    const LDW_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    /// `SKF_NET_OFF`: offsets from -0x100000 count from the network header.
    const SKF_NET_OFF: i32 = -0x10_0000;
    let source_ip_offset = (SKF_NET_OFF + 12).cast_unsigned();
    [
        SockFilter::new(LDH_ABS, 0, 0, 0),
        // The source port: not ours -> keep (jump 3 ahead to the last instruction).
        SockFilter::new(JEQ_K, 0, 3, u32::from(source.port())),
        SockFilter::new(LDW_ABS, 0, 0, source_ip_offset),
        SockFilter::new(JEQ_K, 0, 1, u32::from(*source.ip())),
        // Ours: drop (keep 0 bytes).
        SockFilter::new(RET_K, 0, 0, 0),
        // Keep the whole datagram.
        SockFilter::new(RET_K, 0, 0, u32::MAX),
    ]
}

/// Attaches [`own_datagram_filter`] for the send socket `sender` to the receive socket `socket`: the kernel then
/// drops the process's own broadcasts before they are queued or copied (they would be discarded as the same
/// process's duplicates anyway). The kernel counts each in the socket's drop count, which `SO_RXQ_OVFL` reports
/// too: the receiver subtracts the ones it sent ([`Counters::own_broadcasts`](super::Counters)).
pub(crate) fn drop_own_datagrams(socket: &mio::net::UdpSocket, sender: &Socket) -> io::Result<SocketAddrV4> {
    let local = sender
        .local_addr()?
        .as_socket_ipv4()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the send socket is not IPv4"))?;
    // The send socket is bound to 0.0.0.0: a broadcast on the loopback leaves from 127.0.0.1.
    let source = SocketAddrV4::new(Ipv4Addr::LOCALHOST, local.port());
    socket2::SockRef::from(socket).attach_filter(&own_datagram_filter(source))?;
    Ok(source)
}

/// Bytes of one receive slot: the largest UDP datagram fits.
pub(crate) const SLOT: usize = 65_536;

/// Receives datagrams `slots` at a time with `recvmmsg` and keeps the socket's kernel drop count.
#[derive(Debug)]
pub(crate) struct RecvBatch {
    /// `slots` buffers of 64 KiB, allocated on the first receive.
    storage: Vec<u8>,
    slots: usize,
    infos: Vec<crate::sys::mmsg::RecvInfo>,
    /// The socket's `SO_RXQ_OVFL` count last seen (it starts at zero when the socket opens).
    last_overflow: u32,
    /// Datagrams the kernel dropped for a full receive buffer, seen so far.
    kernel_drops: u64,
    /// Datagrams longer than a slot, dropped.
    truncated: u64,
}

/// What [`RecvBatch::recv`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// The socket has nothing more now.
    Empty,
    /// `max` datagrams were taken; more may wait.
    Budget,
    /// A receive error other than "would block" (logged by the caller).
    Failed,
}

impl Drained {
    /// What a failed single receive means: nothing more now (would block), more may wait (interrupted), or an
    /// error the caller logs.
    pub(crate) fn of_error(e: io::Error) -> (Drained, Option<io::Error>) {
        match e.kind() {
            io::ErrorKind::WouldBlock => (Drained::Empty, None),
            io::ErrorKind::Interrupted => (Drained::Budget, None),
            _ => (Drained::Failed, Some(e)),
        }
    }
}

impl RecvBatch {
    pub(crate) fn new(slots: usize) -> RecvBatch {
        RecvBatch {
            storage: Vec::new(),
            slots: slots.max(1),
            infos: Vec::new(),
            last_overflow: 0,
            kernel_drops: 0,
            truncated: 0,
        }
    }

    /// Datagrams the kernel dropped on this socket so far (learnt from the datagrams queued after them).
    pub(crate) fn kernel_drops(&self) -> u64 {
        self.kernel_drops
    }

    /// Forgets the drop count of a closed socket (a new socket's counter starts at zero).
    pub(crate) fn reset_socket(&mut self) {
        self.last_overflow = 0;
    }

    /// Whether the socket dropped datagrams between the last one seen and one that carried `dropped_total`.
    pub(crate) fn dropped_before(&self, dropped_total: Option<u32>) -> bool {
        dropped_total.is_some_and(|total| (1..1 << 31).contains(&total.wrapping_sub(self.last_overflow)))
    }

    /// Takes in the socket's drop count a received datagram carried (`SO_RXQ_OVFL`).
    pub(crate) fn note_overflow(&mut self, dropped_total: Option<u32>) {
        if let Some(total) = dropped_total {
            let new = total.wrapping_sub(self.last_overflow);
            // The counter only grows; a smaller value is a reordering of cmsgs, not a drop.
            if new < (1 << 31) {
                self.kernel_drops += u64::from(new);
                self.last_overflow = total;
            }
        }
    }

    /// Counts a datagram longer than the buffers it was received into (dropped).
    pub(crate) fn note_truncated(&mut self, from: std::net::SocketAddr) {
        self.truncated += 1;
        tracing::debug!("UDP datagram from {from} longer than its 64 KiB buffer, dropped ({} so far)", self.truncated);
    }

    /// Receives up to `max` datagrams from `fd`, handing each to `f`, in `recvmmsg` calls of up to `slots`.
    pub(crate) fn recv(
        &mut self,
        fd: std::os::fd::RawFd,
        max: usize,
        mut f: impl FnMut(std::net::SocketAddr, &[u8]),
    ) -> (Drained, Option<io::Error>) {
        if self.storage.is_empty() {
            self.storage = vec![0u8; self.slots * SLOT];
        }
        let mut left = max;
        while left > 0 {
            let n = left.min(self.slots);
            let mut bufs: Vec<&mut [u8]> = self.storage.chunks_mut(SLOT).take(n).collect();
            match crate::sys::mmsg::recv_mmsg(fd, &mut bufs, &mut self.infos) {
                Ok(got) => {
                    drop(bufs);
                    for i in 0..self.infos.len() {
                        let info = self.infos[i];
                        self.note_overflow(info.dropped_total);
                        if info.truncated {
                            // Cannot happen with 64 KiB slots (UDP carries at most 65,507 bytes); never half-read.
                            self.note_truncated(info.from);
                            continue;
                        }
                        f(info.from, &self.storage[i * SLOT..i * SLOT + info.len]);
                    }
                    left -= got;
                    if got < n {
                        return (Drained::Empty, None);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (Drained::Empty, None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return (Drained::Failed, Some(e)),
            }
        }
        (Drained::Budget, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rmem_max() -> usize {
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap()
    }

    #[test]
    fn the_receive_buffer_is_what_was_asked_for_or_the_kernel_limit() {
        let wanted = rmem_max() * 2;
        let net = NetworkConfig { receive_buffer: wanted, ..crate::Config::default().network };
        let s = open_recv_socket(&net, Ipv4Addr::UNSPECIFIED, 0).unwrap();
        let got = socket2::SockRef::from(&s).recv_buffer_size().unwrap() / 2;
        // Root (CAP_NET_ADMIN) may exceed rmem_max; others are capped at it.
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
        if root {
            assert!(got >= wanted, "root gets {wanted} above rmem_max: {got}");
        } else {
            assert_eq!(got, rmem_max(), "capped at rmem_max");
        }
    }
}
