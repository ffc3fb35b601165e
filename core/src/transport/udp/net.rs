//! eCAL's UDP sockets: where data goes, the send socket, the receive socket, and the multicast interface they use.
//! The registration sockets of the I/O thread are made here too (on the registration port), so registration and
//! data use the same interface for the same configuration.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::NetworkConfig;

use super::codec::topic_group;

/// Socket buffer size asked for (the kernel caps it at `net.core.{r,w}mem_max`).
const SOCKET_BUFFER: usize = 4 << 20;

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
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
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

/// A receive socket: `0.0.0.0:port`, SO_REUSEADDR, non-blocking, large buffer. In network mode it joins the base
/// group on `iface`; the data layer's topic groups are joined by the caller.
pub(crate) fn open_recv_socket(net: &NetworkConfig, iface: Ipv4Addr, port: u16) -> io::Result<mio::net::UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into())?;
    if net.enabled {
        s.join_multicast_v4(&net.multicast_group, &iface)?;
    }
    Ok(mio::net::UdpSocket::from_std(s.into()))
}
