//! The raw socket programs of `shoal_baseline::net` as links (`shoal perf --transport udp|tcp --baseline`).
//!
//! Raw UDP: each side receives on its own port (chosen by the OS) and sends to the other's: on one host to the
//! loopback broadcast address 127.255.255.255, the path shoal's UDP layer takes in local mode; to a peer in
//! another network namespace by unicast to its address (shoal sends to a multicast group there). The main
//! process passes its receive address to the peer as `--name ADDR:PORT`; the peer answers `ready PORT`.
//! Raw TCP: the main process listens, the peer connects to `--name ADDR:PORT`, one connection both ways.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use anyhow::Context;
use shoal_baseline::net::{self, TcpLink, UdpReceiver, UdpSender};

use super::args::WaitMode;
use super::link::{HEADER_LEN, Receiver, Sender, TimedOut};

/// The broadcast address shoal's UDP layer uses in local mode.
pub(crate) const LOOPBACK_BROADCAST: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 255);

/// How long the main process waits for the raw TCP peer to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

fn map_err(e: net::Error) -> anyhow::Error {
    match e {
        net::Error::TimedOut(t) => anyhow::Error::new(TimedOut(t)),
        e => anyhow::Error::new(e),
    }
}

/// Any address, port `port`.
pub(crate) fn any(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)
}

/// A raw UDP sender.
#[derive(Debug)]
pub(crate) struct RawUdpTx(pub(crate) UdpSender);

/// A raw UDP receiver.
#[derive(Debug)]
pub(crate) struct RawUdpRx(pub(crate) UdpReceiver);

impl RawUdpTx {
    pub(crate) fn new(dest: SocketAddrV4) -> anyhow::Result<RawUdpTx> {
        Ok(RawUdpTx(UdpSender::new(any(0), dest).with_context(|| format!("raw UDP sender to {dest}"))?))
    }
}

impl RawUdpRx {
    pub(crate) fn new(wait: WaitMode) -> anyhow::Result<RawUdpRx> {
        Ok(RawUdpRx(UdpReceiver::new(any(0), wait.into()).context("raw UDP receiver")?))
    }

    pub(crate) fn port(&self) -> anyhow::Result<u16> {
        self.0.port().map_err(map_err)
    }
}

impl Sender for RawUdpTx {
    /// A message of more than one datagram leaves at once, gathered from `payload` (no copy, as shoal's UDP layer
    /// sends large messages from the publisher's thread); smaller ones are copied into the batch.
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        if payload.len() > net::FRAGMENT_PAYLOAD {
            return self.0.send(payload).map_err(map_err);
        }
        self.0.send_with(payload.len(), |b| b.copy_from_slice(payload)).map_err(map_err)
    }

    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()> {
        self.0.send_with(len, |b| b[..HEADER_LEN].copy_from_slice(header)).map_err(map_err)
    }

    fn set_batching(&mut self, on: bool) -> anyhow::Result<()> {
        self.0.set_batching(on).map_err(map_err)
    }
}

impl Receiver for RawUdpRx {
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.0.recv(buf, timeout).map_err(map_err)
    }

    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)> {
        let mut buf = Vec::new();
        self.0.recv(&mut buf, timeout).map_err(map_err)?;
        Ok(header_of(&buf))
    }

    fn drops(&self) -> u64 {
        self.0.drops()
    }
}

/// One end of the raw TCP stream.
#[derive(Debug)]
pub(crate) struct RawTcp(pub(crate) TcpLink);

impl RawTcp {
    /// Listens on `bind` and returns the port and a function accepting the peer.
    pub(crate) fn listen(bind: SocketAddrV4) -> anyhow::Result<(u16, std::net::TcpListener)> {
        let l = TcpLink::listen(bind).map_err(map_err)?;
        let port = l.local_addr().context("getsockname")?.port();
        Ok((port, l))
    }

    /// Accepts the peer's connection: the sending and the receiving handle.
    pub(crate) fn accept(l: &std::net::TcpListener) -> anyhow::Result<(RawTcp, RawTcp)> {
        let a = TcpLink::accept(l, CONNECT_TIMEOUT).map_err(map_err).context("the raw TCP peer did not connect")?;
        Ok((RawTcp(a.try_clone().map_err(map_err)?), RawTcp(a)))
    }

    /// Connects to the main process: the receiving and the sending handle.
    pub(crate) fn connect(addr: SocketAddrV4) -> anyhow::Result<(RawTcp, RawTcp)> {
        let a = TcpLink::connect(addr).map_err(map_err)?;
        Ok((RawTcp(a.try_clone().map_err(map_err)?), RawTcp(a)))
    }
}

impl Sender for RawTcp {
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.0.send(payload).map_err(map_err)
    }

    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()> {
        let mut m = vec![0u8; len];
        m[..HEADER_LEN].copy_from_slice(header);
        self.0.send(&m).map_err(map_err)
    }
}

impl Receiver for RawTcp {
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.0.recv(buf, timeout).map_err(map_err)
    }

    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)> {
        let mut buf = Vec::new();
        self.0.recv(&mut buf, timeout).map_err(map_err)?;
        Ok(header_of(&buf))
    }

    fn drops(&self) -> u64 {
        0
    }
}

/// The perf header at the start of a received message (zero-padded if shorter) and the message's length.
fn header_of(buf: &[u8]) -> ([u8; HEADER_LEN], usize) {
    let mut h = [0u8; HEADER_LEN];
    let n = buf.len().min(HEADER_LEN);
    h[..n].copy_from_slice(&buf[..n]);
    (h, buf.len())
}
