//! Raw socket programs doing the job of shoal's network layers with no middleware: the floor `shoal perf
//! --transport udp|tcp --baseline` compares shoal's UDP and TCP layers with.
//!
//! - [`UdpSender`] / [`UdpReceiver`]: one message in one or more datagrams of at most 65,507 bytes (the largest
//!   IPv4 UDP datagram, the size shoal's UDP layer fragments to as well), each with a 12-byte header (message
//!   number, fragment index, fragment count, little endian), sent with `sendmmsg`: all fragments of a message in
//!   one call, and in batching mode (unpaced streams) up to [`BATCH`] datagrams of consecutive messages in one
//!   call. The receiver drains up to [`BATCH`] datagrams per `recvmmsg`, reassembles in order, and counts a
//!   message with a missing fragment (or never seen) as dropped from the gaps in the message numbers. The sender's
//!   socket blocks when its send buffer is full (a datagram the receiver's buffer cannot take is lost, as for
//!   shoal). Both ask for the socket buffers shoal's UDP layer asks for.
//! - [`TcpLink`]: a length-prefixed stream (`u32` little-endian length, then the bytes), `TCP_NODELAY`, one
//!   connection carrying both directions.

use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::spsc::Wait;

/// Largest IPv4 UDP payload.
pub const MAX_DATAGRAM: usize = 65_507;

/// Bytes of the raw datagram header: message number, fragment index, fragment count (`u32` each).
pub const DATAGRAM_HEADER: usize = 12;

/// Message bytes per datagram.
pub const FRAGMENT_PAYLOAD: usize = MAX_DATAGRAM - DATAGRAM_HEADER;

/// Most datagrams one `sendmmsg` / `recvmmsg` call moves.
pub const BATCH: usize = 64;

/// Socket buffers asked for (shoal's UDP layer default, eCAL 6's).
pub const SOCKET_BUFFER: usize = 5 << 20;

/// Largest message a [`TcpLink`] accepts.
pub const MAX_TCP_MESSAGE: usize = 1 << 30;

/// Errors of the raw links.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing arrived within the timeout.
    #[error("no message within {0:?}")]
    TimedOut(Duration),
    /// The other end sent something this protocol does not allow.
    #[error("bad data from the other end: {0}")]
    Malformed(String),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

fn udp_socket(bind: SocketAddrV4) -> Result<UdpSocket, Error> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(io("creating a UDP socket"))?;
    s.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    s.set_broadcast(true).map_err(io("SO_BROADCAST"))?;
    // The kernel caps these at net.core.{r,w}mem_max, as it does shoal's.
    s.set_recv_buffer_size(SOCKET_BUFFER).map_err(io("SO_RCVBUF"))?;
    s.set_send_buffer_size(SOCKET_BUFFER).map_err(io("SO_SNDBUF"))?;
    s.bind(&SocketAddr::V4(bind).into()).map_err(io(format!("binding UDP {bind}")))?;
    Ok(s.into())
}

/// The sending end of a raw UDP link.
#[derive(Debug)]
pub struct UdpSender {
    sock: UdpSocket,
    dest: libc::sockaddr_in,
    /// Messages waiting for the next `sendmmsg`, back to back.
    pending: Vec<u8>,
    /// Each pending datagram: its header, and the offset and length of its part of `pending`.
    spans: Vec<([u8; DATAGRAM_HEADER], usize, usize)>,
    batching: bool,
    next_message: u32,
}

impl UdpSender {
    /// A sender to `dest` (unicast or broadcast), its socket bound to `bind` (port 0: any).
    pub fn new(bind: SocketAddrV4, dest: SocketAddrV4) -> Result<UdpSender, Error> {
        let sock = udp_socket(bind)?;
        let dest = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: dest.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*dest.ip()).to_be() },
            sin_zero: [0; 8],
        };
        Ok(UdpSender { sock, dest, pending: Vec::new(), spans: Vec::new(), batching: false, next_message: 0 })
    }

    /// Batching on: messages wait until [`BATCH`] datagrams are pending (or [`UdpSender::flush`]); off: every
    /// message leaves in its own `sendmmsg` call.
    pub fn set_batching(&mut self, on: bool) -> Result<(), Error> {
        self.batching = on;
        if on { Ok(()) } else { self.flush() }
    }

    /// Queues a `len`-byte message that `fill` writes, and sends unless batching holds it.
    pub fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), Error> {
        let count = len.div_ceil(FRAGMENT_PAYLOAD).max(1);
        let count32 = u32::try_from(count).map_err(|_| Error::Malformed(format!("a {len}-byte message")))?;
        let id = self.next_message;
        self.next_message = id.wrapping_add(1);
        let start = self.pending.len();
        self.pending.resize(start + len, 0);
        fill(&mut self.pending[start..]);
        for i in 0..count {
            let mut h = [0u8; DATAGRAM_HEADER];
            h[..4].copy_from_slice(&id.to_le_bytes());
            h[4..8].copy_from_slice(&(i as u32).to_le_bytes());
            h[8..].copy_from_slice(&count32.to_le_bytes());
            let off = i * FRAGMENT_PAYLOAD;
            self.spans.push((h, start + off, (len - off).min(FRAGMENT_PAYLOAD)));
        }
        if !self.batching || self.spans.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends every pending datagram (`sendmmsg`, [`BATCH`] at a time; each datagram gathered from its header and
    /// its part of the message, no copy).
    pub fn flush(&mut self) -> Result<(), Error> {
        let mut done = 0;
        let result = loop {
            if done >= self.spans.len() {
                break Ok(());
            }
            let chunk = &self.spans[done..(done + BATCH).min(self.spans.len())];
            let mut iov: Vec<[libc::iovec; 2]> = chunk
                .iter()
                .map(|(h, off, len)| {
                    [
                        libc::iovec { iov_base: h.as_ptr() as *mut libc::c_void, iov_len: DATAGRAM_HEADER },
                        libc::iovec {
                            iov_base: self.pending[*off..*off + *len].as_ptr() as *mut libc::c_void,
                            iov_len: *len,
                        },
                    ]
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no control data).
                    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                    h.msg_name = (&raw const self.dest).cast_mut().cast();
                    h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                    h.msg_iov = v.as_mut_ptr();
                    h.msg_iovlen = 2;
                    libc::mmsghdr { msg_hdr: h, msg_len: 0 }
                })
                .collect();
            // SAFETY: `msgs` holds `msgs.len()` valid headers whose name, iovecs and buffers (`self.dest`, `iov`,
            // the headers in `self.spans`, `self.pending`) live and stay unmoved until the call returns; the
            // kernel only reads them.
            let n = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break Err(io("sendmmsg")(e));
            }
            done += n as usize;
        };
        self.pending.clear();
        self.spans.clear();
        result
    }
}

/// The receiving end of a raw UDP link.
#[derive(Debug)]
pub struct UdpReceiver {
    sock: UdpSocket,
    wait: Wait,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    /// Datagrams of the last `recvmmsg` not consumed yet: `next..filled`.
    next: usize,
    filled: usize,
    /// The message being reassembled: (number, fragment count, next fragment index).
    partial: Option<(u32, u32, u32)>,
    /// The message number expected next (`None` before the first).
    expected: Option<u32>,
    drops: u64,
}

impl UdpReceiver {
    /// A receiver bound to `bind` (port 0: any; see [`UdpReceiver::port`]).
    pub fn new(bind: SocketAddrV4, wait: Wait) -> Result<UdpReceiver, Error> {
        let sock = udp_socket(bind)?;
        sock.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
        Ok(UdpReceiver {
            sock,
            wait,
            bufs: vec![vec![0u8; MAX_DATAGRAM + 1]; BATCH],
            lens: vec![0; BATCH],
            next: 0,
            filled: 0,
            partial: None,
            expected: None,
            drops: 0,
        })
    }

    /// The port the socket is bound to.
    pub fn port(&self) -> Result<u16, Error> {
        Ok(self.sock.local_addr().map_err(io("getsockname"))?.port())
    }

    /// Messages lost so far (gaps in the message numbers, incomplete messages).
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Receives the next complete message into `out` (cleared first).
    pub fn recv(&mut self, out: &mut Vec<u8>, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            while self.next < self.filled {
                let i = self.next;
                self.next += 1;
                if self.take(i, out)? {
                    return Ok(());
                }
            }
            self.fill(deadline, timeout)?;
        }
    }

    /// Consumes datagram `i`; true when it completed a message in `out`.
    fn take(&mut self, i: usize, out: &mut Vec<u8>) -> Result<bool, Error> {
        let d = &self.bufs[i][..self.lens[i]];
        if d.len() < DATAGRAM_HEADER || d.len() > MAX_DATAGRAM {
            return Err(Error::Malformed(format!("a {}-byte datagram", d.len())));
        }
        let u = |k: usize| u32::from_le_bytes([d[k], d[k + 1], d[k + 2], d[k + 3]]);
        let (id, index, count) = (u(0), u(4), u(8));
        let body = &d[DATAGRAM_HEADER..];
        if index == 0 {
            // A message left incomplete is counted from the gap when a later one completes.
            out.clear();
            self.partial = Some((id, count, 0));
        }
        match self.partial {
            Some((pid, pcount, pnext)) if pid == id && pnext == index && pcount == count => {
                out.extend_from_slice(body);
                if index + 1 < count {
                    self.partial = Some((id, count, index + 1));
                    return Ok(false);
                }
                self.partial = None;
            }
            _ => {
                self.partial = None;
                return Ok(false);
            }
        }
        let expected = self.expected.unwrap_or(id);
        let gap = id.wrapping_sub(expected);
        if gap >= 1 << 31 {
            // Older than one already delivered (reordered): not delivered twice, already counted as lost.
            return Ok(false);
        }
        self.drops += u64::from(gap);
        self.expected = Some(id.wrapping_add(1));
        Ok(true)
    }

    /// Fills the datagram batch with one `recvmmsg`, waiting as the wait mode says until `deadline`.
    fn fill(&mut self, deadline: Instant, timeout: Duration) -> Result<(), Error> {
        loop {
            let mut iov: Vec<libc::iovec> = self
                .bufs
                .iter_mut()
                .map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no control data).
                    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                    h.msg_iov = v;
                    h.msg_iovlen = 1;
                    libc::mmsghdr { msg_hdr: h, msg_len: 0 }
                })
                .collect();
            // SAFETY: `msgs` holds BATCH valid headers whose iovecs point into `self.bufs`, which live and stay
            // unmoved until the call returns; the kernel writes at most `iov_len` bytes into each.
            let n = unsafe {
                libc::recvmmsg(
                    self.sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n > 0 {
                let n = n as usize;
                for (len, m) in self.lens.iter_mut().zip(&msgs[..n]) {
                    *len = m.msg_len as usize;
                }
                self.next = 0;
                self.filled = n;
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if n < 0 && !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                return Err(io("recvmmsg")(e));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::TimedOut(timeout));
            }
            if self.wait == Wait::Block {
                let ms = deadline.saturating_duration_since(now).as_millis().clamp(1, i32::MAX as u128) as i32;
                let mut p = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd, alive for the call.
                unsafe { libc::poll(&mut p, 1, ms) };
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// One end of a raw length-prefixed TCP stream (both directions over one connection).
#[derive(Debug)]
pub struct TcpLink {
    stream: TcpStream,
}

impl TcpLink {
    /// A listener on `bind` (port 0: any) for [`TcpLink::accept`].
    pub fn listen(bind: SocketAddrV4) -> Result<TcpListener, Error> {
        TcpListener::bind(bind).map_err(io(format!("listening on TCP {bind}")))
    }

    /// Accepts one connection within `timeout`.
    pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<TcpLink, Error> {
        listener.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
        let deadline = Instant::now() + timeout;
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).map_err(io("blocking mode"))?;
                    return TcpLink::new(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::TimedOut(timeout));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(io("accept")(e)),
            }
        }
    }

    /// Connects to `addr`.
    pub fn connect(addr: SocketAddrV4) -> Result<TcpLink, Error> {
        TcpLink::new(TcpStream::connect(addr).map_err(io(format!("connecting to TCP {addr}")))?)
    }

    fn new(stream: TcpStream) -> Result<TcpLink, Error> {
        stream.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
        Ok(TcpLink { stream })
    }

    /// A second handle on the same connection (one end sends while the other receives).
    pub fn try_clone(&self) -> Result<TcpLink, Error> {
        Ok(TcpLink { stream: self.stream.try_clone().map_err(io("dup of the TCP socket"))? })
    }

    /// Sends one message: its length, then its bytes.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        let len = u32::try_from(msg.len()).map_err(|_| Error::Malformed(format!("a {}-byte message", msg.len())))?;
        let head = len.to_le_bytes();
        let mut bufs = [IoSlice::new(&head), IoSlice::new(msg)];
        let mut slices: &mut [IoSlice<'_>] = &mut bufs;
        while !slices.is_empty() {
            match self.stream.write_vectored(slices) {
                Ok(0) => return Err(io("TCP send")(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("TCP send")(e)),
            }
        }
        Ok(())
    }

    /// Receives one message into `out` (cleared first) within `timeout` for its first byte.
    pub fn recv(&mut self, out: &mut Vec<u8>, timeout: Duration) -> Result<(), Error> {
        self.stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io("SO_RCVTIMEO"))?;
        let mut head = [0u8; 4];
        match self.stream.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(Error::TimedOut(timeout));
            }
            Err(e) => return Err(io("TCP receive")(e)),
        }
        let len = u32::from_le_bytes(head) as usize;
        if len > MAX_TCP_MESSAGE {
            return Err(Error::Malformed(format!("a {len}-byte message (at most {MAX_TCP_MESSAGE})")));
        }
        out.clear();
        out.reserve(len);
        let got = (&mut self.stream).take(len as u64).read_to_end(out).map_err(io("TCP receive"))?;
        if got != len {
            return Err(Error::Malformed(format!("the stream ended inside a {len}-byte message")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn local(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
    }

    #[test]
    fn udp_messages_of_every_size_arrive_whole_and_gaps_count_as_drops() {
        let mut rx = UdpReceiver::new(local(0), Wait::Block).unwrap();
        let mut tx = UdpSender::new(local(0), local(rx.port().unwrap())).unwrap();
        let sizes = [1usize, FRAGMENT_PAYLOAD, FRAGMENT_PAYLOAD + 1, 200_000];
        tx.set_batching(true).unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            tx.send_with(n, |b| b.iter_mut().enumerate().for_each(|(i, x)| *x = (i + k) as u8)).unwrap();
        }
        let mut out = Vec::new();
        assert!(matches!(rx.recv(&mut out, Duration::from_millis(20)), Err(Error::TimedOut(_))), "batched: held back");
        tx.set_batching(false).unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            rx.recv(&mut out, Duration::from_secs(5)).unwrap();
            assert_eq!(out.len(), n);
            assert!(out.iter().enumerate().all(|(i, x)| *x == (i + k) as u8), "message {k} corrupted");
        }
        // Message 4 never reaches the receiver: the receiver sees 5 after 3 and counts one drop.
        tx.next_message += 1;
        tx.send_with(10, |b| b.fill(9)).unwrap();
        rx.recv(&mut out, Duration::from_secs(5)).unwrap();
        assert_eq!(out, [9; 10]);
        assert_eq!(rx.drops(), 1);
        assert!(matches!(rx.recv(&mut out, Duration::from_millis(20)), Err(Error::TimedOut(_))));
    }

    #[test]
    fn tcp_messages_arrive_in_both_directions() {
        let l = TcpLink::listen(local(0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut c = TcpLink::connect(local(port)).unwrap();
            let mut out = Vec::new();
            c.recv(&mut out, Duration::from_secs(5)).unwrap();
            c.send(&out).unwrap();
        });
        let mut a = TcpLink::accept(&l, Duration::from_secs(5)).unwrap();
        let msg: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        a.send(&msg).unwrap();
        let mut back = Vec::new();
        a.recv(&mut back, Duration::from_secs(5)).unwrap();
        assert_eq!(back, msg);
        t.join().unwrap();
        assert!(a.recv(&mut back, Duration::from_millis(20)).is_err(), "the peer closed the connection");
    }
}
