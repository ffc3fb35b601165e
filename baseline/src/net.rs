//! Raw socket programs doing the job of shoal's network layers with no middleware: the floor `shoal perf
//! --transport udp|tcp --baseline` compares shoal's UDP and TCP layers with.
//!
//! - [`UdpSender`] / [`UdpReceiver`]: one message in one or more datagrams of at most 65,507 bytes (the largest
//!   IPv4 UDP datagram, the size shoal's UDP layer fragments to as well), each with a 12-byte header (message
//!   number, fragment index, fragment count, little endian), sent with `sendmmsg`: all fragments of a message in
//!   one call, gathered from the caller's buffer ([`UdpSender::send`]) or from the sender's batch, into which
//!   [`UdpSender::send_with`] writes messages and which in batching mode (unpaced streams) holds up to [`BATCH`]
//!   datagrams of consecutive messages for one call. The receiver drains up to [`BATCH`] datagrams per `recvmmsg`; once a message's first fragment is in,
//!   the next `recvmmsg` scatters each datagram's payload straight to its place in the message (no copy but the
//!   kernel's, as shoal's UDP layer receives in place), and copies only what is not the expected fragment. It
//!   reassembles in order, and counts a
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
        let start = self.pending.len();
        self.pending.resize(start + len, 0);
        fill(&mut self.pending[start..]);
        let id = self.next_id();
        push_spans(&mut self.spans, id, start, len)?;
        if !self.batching || self.spans.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends `msg` at once, its datagrams gathered straight from it (no copy), after whatever batching holds.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        self.flush()?;
        let id = self.next_id();
        push_spans(&mut self.spans, id, 0, msg.len())?;
        let result = send_spans(&self.sock, &self.dest, msg, &self.spans);
        self.spans.clear();
        result
    }

    fn next_id(&mut self) -> u32 {
        let id = self.next_message;
        self.next_message = id.wrapping_add(1);
        id
    }

    /// Sends every pending datagram (`sendmmsg`, [`BATCH`] at a time; each datagram gathered from its header and
    /// its part of the message, no copy).
    pub fn flush(&mut self) -> Result<(), Error> {
        let result = send_spans(&self.sock, &self.dest, &self.pending, &self.spans);
        self.pending.clear();
        self.spans.clear();
        result
    }
}

/// Appends the datagrams of message `id`, `len` bytes at `start` of its buffer: each one's header, offset and length.
fn push_spans(
    spans: &mut Vec<([u8; DATAGRAM_HEADER], usize, usize)>,
    id: u32,
    start: usize,
    len: usize,
) -> Result<(), Error> {
    let count = len.div_ceil(FRAGMENT_PAYLOAD).max(1);
    let count32 = u32::try_from(count).map_err(|_| Error::Malformed(format!("a {len}-byte message")))?;
    for i in 0..count {
        let mut h = [0u8; DATAGRAM_HEADER];
        h[..4].copy_from_slice(&id.to_le_bytes());
        h[4..8].copy_from_slice(&(i as u32).to_le_bytes());
        h[8..].copy_from_slice(&count32.to_le_bytes());
        let off = i * FRAGMENT_PAYLOAD;
        spans.push((h, start + off, (len - off).min(FRAGMENT_PAYLOAD)));
    }
    Ok(())
}

/// Sends the datagrams `spans` describes (header, offset and length in `data`) to `dest`, `sendmmsg`, [`BATCH`] at
/// a time, each gathered from its header and its part of `data`.
fn send_spans(
    sock: &UdpSocket,
    dest: &libc::sockaddr_in,
    data: &[u8],
    spans: &[([u8; DATAGRAM_HEADER], usize, usize)],
) -> Result<(), Error> {
    let mut done = 0;
    while done < spans.len() {
        let chunk = &spans[done..(done + BATCH).min(spans.len())];
        let mut iov: Vec<[libc::iovec; 2]> = chunk
            .iter()
            .map(|(h, off, len)| {
                [
                    libc::iovec { iov_base: h.as_ptr() as *mut libc::c_void, iov_len: DATAGRAM_HEADER },
                    libc::iovec { iov_base: data[*off..*off + *len].as_ptr() as *mut libc::c_void, iov_len: *len },
                ]
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no control data).
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_name = (dest as *const libc::sockaddr_in).cast_mut().cast();
                h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                h.msg_iov = v.as_mut_ptr();
                h.msg_iovlen = 2;
                libc::mmsghdr { msg_hdr: h, msg_len: 0 }
            })
            .collect();
        // SAFETY: `msgs` holds `msgs.len()` valid headers whose name, iovecs and buffers (`dest`, `iov`, the headers
        // in `spans`, `data`) live and stay unmoved until the call returns; the kernel only reads them.
        let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io("sendmmsg")(e));
        }
        done += n as usize;
    }
    Ok(())
}

/// A datagram header's message number, fragment index and fragment count (`head` is [`DATAGRAM_HEADER`] bytes).
fn parse_head(head: &[u8]) -> (u32, u32, u32) {
    let u = |k: usize| u32::from_le_bytes([head[k], head[k + 1], head[k + 2], head[k + 3]]);
    (u(0), u(4), u(8))
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
    /// Fragments received straight into their message's buffer ([`UdpReceiver::fill_in_place`]).
    placed: u64,
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
            placed: 0,
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

    /// Fragments received straight into their message's buffer so far.
    pub fn placed(&self) -> u64 {
        self.placed
    }

    /// Receives the next complete message into `out` (cleared first). Once a message's first fragment is in, its
    /// remaining fragments are received straight into `out` ([`UdpReceiver::fill_in_place`]).
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
            if let Some(partial) = self.partial {
                if self.fill_in_place(partial, out, deadline, timeout)? {
                    return Ok(());
                }
            } else {
                self.fill(deadline, timeout)?;
            }
        }
    }

    /// Receives the remaining fragments of the message `partial` (number, fragment count, next fragment index),
    /// whose first fragments are in `out`, with one `recvmmsg` whose datagrams are scattered: each one's header into
    /// a header buffer, its payload straight to its place in `out`, as the next fragments would go. Fragments that
    /// are the expected ones stay there (no copy); from the first datagram that is not (a lost fragment, another
    /// message), it and the rest of the batch are moved to the datagram buffers and handled as usual. True when it
    /// completed the message.
    fn fill_in_place(
        &mut self,
        (id, count, next): (u32, u32, u32),
        out: &mut Vec<u8>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<bool, Error> {
        let k = ((count - next) as usize).min(BATCH);
        let at = out.len();
        debug_assert_eq!(at, next as usize * FRAGMENT_PAYLOAD);
        out.reserve(k * FRAGMENT_PAYLOAD);
        let base = out.as_mut_ptr();
        // Every iovec below is FRAGMENT_PAYLOAD long: an IPv4 UDP datagram carries at most MAX_DATAGRAM =
        // DATAGRAM_HEADER + FRAGMENT_PAYLOAD bytes, so nothing is ever truncated or spills into the next one's place.
        let mut heads = [[0u8; DATAGRAM_HEADER]; BATCH];
        let mut iov: Vec<[libc::iovec; 2]> = heads[..k]
            .iter_mut()
            .enumerate()
            .map(|(j, h)| {
                [
                    libc::iovec { iov_base: h.as_mut_ptr().cast(), iov_len: DATAGRAM_HEADER },
                    libc::iovec {
                        // SAFETY: `out` has room for k more fragments after `at`: the offset stays in its allocation.
                        iov_base: unsafe { base.add(at + j * FRAGMENT_PAYLOAD) }.cast(),
                        iov_len: FRAGMENT_PAYLOAD,
                    },
                ]
            })
            .collect();
        let n = self.recv_batch(&mut iov, deadline, timeout)?;
        let mut done = 0;
        for (j, h) in heads.iter().enumerate().take(n) {
            let len = self.lens[j].saturating_sub(DATAGRAM_HEADER);
            let index = next + j as u32;
            let last = index + 1 == count;
            let fits =
                self.lens[j] >= DATAGRAM_HEADER && if last { len <= FRAGMENT_PAYLOAD } else { len == FRAGMENT_PAYLOAD };
            if !(fits && parse_head(h) == (id, index, count)) {
                break;
            }
            // SAFETY: the kernel wrote `len` bytes at `at + j * FRAGMENT_PAYLOAD`, which is `out.len()` (every
            // fragment before the last is FRAGMENT_PAYLOAD long), within the reserved capacity.
            unsafe { out.set_len(out.len() + len) };
            self.placed += 1;
            done = j + 1;
            if last {
                self.partial = None;
                // Nothing can follow the last fragment in this batch (k fragments at most were asked for).
                return Ok(self.deliver(id));
            }
        }
        self.partial = Some((id, count, next + done as u32));
        // The rest of the batch, not where it belongs: back to the datagram buffers (a copy, after a loss only).
        for (j, h) in heads.iter().enumerate().take(n).skip(done) {
            let len = self.lens[j].min(MAX_DATAGRAM);
            let payload = len.saturating_sub(DATAGRAM_HEADER);
            let q = j - done;
            self.bufs[q][..DATAGRAM_HEADER].copy_from_slice(h);
            // SAFETY: the kernel wrote `payload` bytes (at most FRAGMENT_PAYLOAD) there, in reserved capacity
            // past `out.len()`, which nothing has touched since.
            let src = unsafe { std::slice::from_raw_parts(base.add(at + j * FRAGMENT_PAYLOAD), payload) };
            self.bufs[q][DATAGRAM_HEADER..DATAGRAM_HEADER + payload].copy_from_slice(src);
            self.lens[q] = len;
        }
        self.next = 0;
        self.filled = n - done;
        Ok(false)
    }

    /// Consumes datagram `i`; true when it completed a message in `out`.
    fn take(&mut self, i: usize, out: &mut Vec<u8>) -> Result<bool, Error> {
        let d = &self.bufs[i][..self.lens[i]];
        if d.len() < DATAGRAM_HEADER || d.len() > MAX_DATAGRAM {
            return Err(Error::Malformed(format!("a {}-byte datagram", d.len())));
        }
        let (id, index, count) = parse_head(&d[..DATAGRAM_HEADER]);
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
        Ok(self.deliver(id))
    }

    /// Message `id` is complete: true if it is delivered (counting the messages missing before it as drops), false
    /// if it is older than one already delivered.
    fn deliver(&mut self, id: u32) -> bool {
        let expected = self.expected.unwrap_or(id);
        let gap = id.wrapping_sub(expected);
        if gap >= 1 << 31 {
            // Older than one already delivered (reordered): not delivered twice, already counted as lost.
            return false;
        }
        self.drops += u64::from(gap);
        self.expected = Some(id.wrapping_add(1));
        true
    }

    /// Fills the datagram batch with one `recvmmsg`, waiting as the wait mode says until `deadline`.
    fn fill(&mut self, deadline: Instant, timeout: Duration) -> Result<(), Error> {
        let mut iov: Vec<[libc::iovec; 1]> =
            self.bufs.iter_mut().map(|b| [libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }]).collect();
        let n = self.recv_batch(&mut iov, deadline, timeout)?;
        self.next = 0;
        self.filled = n;
        Ok(())
    }

    /// One `recvmmsg` of up to `iov.len()` datagrams, each scattered over its iovecs, waiting as the wait mode says
    /// until `deadline`; the datagrams' lengths go to `self.lens`.
    fn recv_batch<const V: usize>(
        &mut self,
        iov: &mut [[libc::iovec; V]],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<usize, Error> {
        loop {
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no control data).
                    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                    h.msg_iov = v.as_mut_ptr();
                    h.msg_iovlen = V;
                    libc::mmsghdr { msg_hdr: h, msg_len: 0 }
                })
                .collect();
            // SAFETY: `msgs` holds valid headers whose iovecs point into buffers the caller keeps alive and unmoved
            // until the call returns; the kernel writes at most `iov_len` bytes into each.
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
                return Ok(n);
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

    /// Fragments after the first are received in place; a lost one ends its message (counted) and what came in
    /// its place is handled as usual: here the next message, whose fragments then go in place again.
    #[test]
    fn udp_fragments_land_in_place_and_a_lost_one_costs_its_message_only() {
        let mut rx = UdpReceiver::new(local(0), Wait::Block).unwrap();
        let to = local(rx.port().unwrap());
        let tx = UdpSocket::bind(local(0)).unwrap();
        let message = |id: u32| -> Vec<u8> { (0..200_000u32).map(|i| (i * 7 + id) as u8).collect() };
        let send = move |id: u32, index: u32| {
            let m = message(id);
            let count = m.len().div_ceil(FRAGMENT_PAYLOAD) as u32;
            let mut d = Vec::new();
            for v in [id, index, count] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            let off = index as usize * FRAGMENT_PAYLOAD;
            d.extend_from_slice(&m[off..(off + FRAGMENT_PAYLOAD).min(m.len())]);
            tx.send_to(&d, to).unwrap();
        };
        // Each message's first fragment alone, the rest a moment later: the receiver has begun the message then.
        let sender = std::thread::spawn(move || {
            send(0, 0);
            std::thread::sleep(Duration::from_millis(50));
            for i in 1..4 {
                send(0, i);
            }
            // Message 1 loses fragment 2; message 2 arrives whole right after it.
            send(1, 0);
            std::thread::sleep(Duration::from_millis(50));
            for (id, i) in [(1, 1), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)] {
                send(id, i);
            }
        });
        let mut out = Vec::new();
        rx.recv(&mut out, Duration::from_secs(5)).unwrap();
        assert!(out == message(0), "message 0 intact");
        assert_eq!(rx.placed(), 3, "its fragments 1-3 in place");
        rx.recv(&mut out, Duration::from_secs(5)).unwrap();
        assert!(out == message(2), "message 2 intact");
        assert_eq!(rx.drops(), 1);
        assert!(rx.placed() >= 4, "message 1's fragment 1 in place: {}", rx.placed());
        sender.join().unwrap();
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
