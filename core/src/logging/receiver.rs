//! [`LogReceiver`]: every process's eCAL log messages from the log port, decoded and filtered.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::wire::{LogDecodeCounters, LogDecoder};
use super::{LogFilter, LogRecord};
use crate::config::Config;
use crate::transport::udp::net as udp_net;

/// Why a [`LogReceiver`] could not be made or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogReceiveError {
    /// Opening, binding or joining the log port.
    #[error("cannot receive on log port {port}: {source}")]
    Socket {
        /// The port.
        port: u16,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Reading the socket.
    #[error("reading the log port: {0}")]
    Read(#[source] io::Error),
}

/// Receives the log messages of every process of the host (local mode) or of the network (network mode) on eCAL's
/// log port; several receivers (and eCAL's) on one host each get every message.
#[derive(Debug)]
pub struct LogReceiver {
    socket: UdpSocket,
    decoder: LogDecoder,
    filter: LogFilter,
    filtered: u64,
    buf: Vec<u8>,
}

impl LogReceiver {
    /// Binds `0.0.0.0:[shoal_logging] port` with `SO_REUSEADDR` and, in network mode, joins `[network]
    /// multicast_group` (eCAL's log receiver does the same).
    pub fn bind(cfg: &Config) -> Result<LogReceiver, LogReceiveError> {
        let port = cfg.logging.port;
        let socket = open(cfg).map_err(|source| LogReceiveError::Socket { port, source })?;
        Ok(LogReceiver {
            socket,
            decoder: LogDecoder::new(!cfg.network.enabled),
            filter: LogFilter::default(),
            filtered: 0,
            buf: vec![0; 65_536],
        })
    }

    /// Yields only records `filter` passes (the others are counted in [`LogReceiver::filtered`]).
    pub fn set_filter(&mut self, filter: LogFilter) {
        self.filter = filter;
    }

    /// The next record that passes the filter, waiting at most `timeout`; `None` when none came in time.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<LogRecord>, LogReceiveError> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            let Some(left) = deadline.checked_duration_since(now).filter(|d| !d.is_zero()) else {
                self.decoder.expire(now);
                return Ok(None);
            };
            self.socket.set_read_timeout(Some(left)).map_err(LogReceiveError::Read)?;
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(v) => v,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LogReceiveError::Read(e)),
            };
            let Some(datagram) = self.buf.get(..n) else { continue };
            // Refused datagrams are counted by the decoder.
            if let Ok(Some(record)) = self.decoder.push(Instant::now(), from, datagram) {
                if self.filter.matches(&record) {
                    return Ok(Some(record));
                }
                self.filtered += 1;
            }
        }
    }

    /// What the decoder took and dropped.
    pub fn counters(&self) -> LogDecodeCounters {
        self.decoder.counters()
    }

    /// Records decoded but not passed by the filter.
    pub fn filtered(&self) -> u64 {
        self.filtered
    }
}

fn open(cfg: &Config) -> io::Result<UdpSocket> {
    let net = &cfg.network;
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    // Best effort: the kernel may cap it; log bursts beyond are lost (counted by the kernel only).
    let _ = s.set_recv_buffer_size(net.receive_buffer);
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, cfg.logging.port).into())?;
    if net.enabled {
        s.join_multicast_v4(&net.multicast_group, &udp_net::multicast_interface(net))?;
    }
    Ok(s.into())
}
