//! Batched UDP system calls: `sendmmsg(2)` (with UDP GSO, the `UDP_SEGMENT` control message) and `recvmmsg(2)`
//! (with `SO_RXQ_OVFL`, the socket's count of datagrams the kernel dropped because its receive buffer was full).
//!
//! The callers own every buffer; nothing here keeps a raw pointer beyond one call.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;

/// `SO_RXQ_OVFL` of the asm-generic socket options (x86, ARM, RISC-V, LoongArch); the libc crate lacks it for glibc.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64"
))]
const SO_RXQ_OVFL: libc::c_int = 40;

/// `UDP_SEGMENT` (`linux/udp.h`), the same on every architecture.
const UDP_SEGMENT: libc::c_int = 103;

/// Most segments one GSO send may carry (`UDP_MAX_SEGMENTS` of kernels before 6.9; newer ones take 128).
pub(crate) const MAX_GSO_SEGMENTS: usize = 64;
/// Most UDP payload bytes of one send, GSO or not (65,535 minus the IPv4 and UDP headers).
pub(crate) const MAX_UDP_PAYLOAD: usize = 65_507;

/// Control-message space per message, in u64 words (aligned for `cmsghdr`): enough for one u16 or u32 option.
const CMSG_WORDS: usize = 4;

/// One message of a [`send_mmsg`] batch: the bytes `iov` to `dest`, split by the kernel into datagrams of
/// `segment` bytes each (the last may be shorter) when `segment` is set (UDP GSO).
#[derive(Debug)]
pub(crate) struct OutMsg<'a> {
    /// Destination.
    pub(crate) dest: SocketAddrV4,
    /// The bytes, gathered.
    pub(crate) iov: &'a [IoSlice<'a>],
    /// GSO segment size, or `None` for one datagram.
    pub(crate) segment: Option<u16>,
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Sends `msgs` with one `sendmmsg(2)` (non-blocking). Returns how many messages the kernel took, from the
/// first; an error means the first message failed (the caller decides whether to retry it, drop it, or stop).
pub(crate) fn send_mmsg(fd: RawFd, msgs: &[OutMsg<'_>]) -> io::Result<usize> {
    if msgs.is_empty() {
        return Ok(0);
    }
    let n = msgs.len().min(1024);
    let mut addrs: Vec<libc::sockaddr_in> = msgs[..n].iter().map(|m| sockaddr_in(m.dest)).collect();
    let mut cmsgs = vec![[0u64; CMSG_WORDS]; n];
    let mut hdrs = Vec::with_capacity(n);
    for (i, m) in msgs[..n].iter().enumerate() {
        // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths); the fields are set below.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = (&raw mut addrs[i]).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // IoSlice is ABI compatible with iovec on Unix (std's documented guarantee); sendmmsg only reads it.
        h.msg_iov = m.iov.as_ptr() as *mut libc::iovec;
        h.msg_iovlen = m.iov.len() as _;
        if let Some(seg) = m.segment {
            let buf = &mut cmsgs[i];
            h.msg_control = buf.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic on its argument.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
            // SAFETY: msg_control points at CMSG_WORDS * 8 = 32 bytes, 8-aligned, more than CMSG_SPACE(2) = 24;
            // CMSG_FIRSTHDR therefore returns a pointer into it, and CMSG_DATA one 16 bytes further, with room for
            // the u16 written unaligned.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
        hdrs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
    }
    // SAFETY: `hdrs` holds `n` initialised mmsghdr whose name, iovec and control pointers point into `addrs`,
    // `msgs[..n]` (borrowed for this call) and `cmsgs`, all alive until the call returns; the kernel writes only
    // `msg_len`.
    let rc = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc as usize) }
}

/// What [`recv_mmsg`] learnt about one received datagram.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvInfo {
    /// Bytes in the buffer.
    pub(crate) len: usize,
    /// Sender.
    pub(crate) from: SocketAddr,
    /// The datagram was longer than its buffer (the rest is lost).
    pub(crate) truncated: bool,
    /// The socket's count of datagrams dropped so far for a full receive buffer (`SO_RXQ_OVFL`), when enabled.
    pub(crate) dropped_total: Option<u32>,
}

fn from_sockaddr(a: &libc::sockaddr_storage) -> SocketAddr {
    if i32::from(a.ss_family) == libc::AF_INET {
        // SAFETY: the family says the storage holds a sockaddr_in; sockaddr_storage is larger and suitably aligned.
        let sin = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)), u16::from_be(sin.sin_port)))
    } else {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
    }
}

/// The `SO_RXQ_OVFL` count among the control messages the kernel put in `h` (by `recvmmsg` or `recvmsg`).
fn overflow_count(h: &libc::msghdr) -> Option<u32> {
    #[allow(unused_mut)]
    let mut dropped_total = None;
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    ))]
    // SAFETY: the kernel filled msg_control up to msg_controllen (at most the 32 bytes given); CMSG_FIRSTHDR
    // and CMSG_NXTHDR stay within it and return null at its end; the option's data is read unaligned and only
    // when its length says it holds a u32.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == SO_RXQ_OVFL
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize
            {
                dropped_total = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    dropped_total
}

/// What [`recv_split`] received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitInfo {
    /// The datagram's bytes (in the head, the target and the spill together).
    pub(crate) len: usize,
    /// Of them, the bytes appended to the target.
    pub(crate) in_target: usize,
    /// Sender.
    pub(crate) from: SocketAddr,
    /// The datagram was longer than the three buffers (the rest is lost).
    pub(crate) truncated: bool,
    /// As in [`RecvInfo`].
    pub(crate) dropped_total: Option<u32>,
}

/// Receives one datagram with a non-blocking `recvmsg(2)`, scattered: its first `head.len()` bytes into `head`, the
/// next (up to `target_max`) appended to `target`, the rest into `spill`. `target` grows by the bytes that landed
/// in it (written by the kernel into its spare capacity, reserved here): the caller truncates it back when they
/// belong elsewhere. `WouldBlock` when nothing was waiting.
pub(crate) fn recv_split(
    fd: RawFd,
    head: &mut [u8],
    target: &mut Vec<u8>,
    target_max: usize,
    spill: &mut [u8],
) -> io::Result<SplitInfo> {
    target.reserve(target_max);
    let spare = &mut target.spare_capacity_mut()[..target_max];
    let mut iovs = [
        libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() },
        libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() },
        libc::iovec { iov_base: spill.as_mut_ptr().cast(), iov_len: spill.len() },
    ];
    // SAFETY: all-zero sockaddr_storage and msghdr are valid; the fields are set below.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut cmsg = [0u64; CMSG_WORDS];
    // SAFETY: as above.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = (&raw mut addr).cast();
    h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    h.msg_iov = iovs.as_mut_ptr();
    h.msg_iovlen = iovs.len() as _;
    h.msg_control = cmsg.as_mut_ptr().cast();
    h.msg_controllen = (CMSG_WORDS * 8) as _;
    // SAFETY: `h` points into `addr`, `iovs` (which point into `head`, the spare capacity of `target` and `spill`,
    // all borrowed mutably for this call) and `cmsg`, alive until the call returns; the kernel writes within the
    // lengths given.
    let rc = unsafe { libc::recvmsg(fd, &raw mut h, libc::MSG_DONTWAIT) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = rc as usize;
    let in_target = len.saturating_sub(head.len()).min(target_max);
    let new_len = target.len() + in_target;
    // SAFETY: the kernel wrote the datagram's bytes after the head's into the first `in_target` bytes of the spare
    // capacity (recvmsg fills the iovecs in order), so the vector's first `new_len` bytes are initialised; `new_len`
    // is within the capacity reserved above.
    unsafe { target.set_len(new_len) };
    Ok(SplitInfo {
        len,
        in_target,
        from: from_sockaddr(&addr),
        truncated: h.msg_flags & libc::MSG_TRUNC != 0,
        dropped_total: overflow_count(&h),
    })
}

/// Receives the next datagram's first `head.len()` bytes with one non-blocking `recvmsg(2)` with `flags` besides
/// `MSG_DONTWAIT`: with `MSG_PEEK` the datagram stays queued; with an empty `head` and no flags it is dropped
/// without its bytes being copied. [`RecvInfo::len`] is the bytes copied, `truncated` says it was longer.
/// `WouldBlock` when nothing was waiting.
pub(crate) fn recv_head(fd: RawFd, head: &mut [u8], flags: libc::c_int) -> io::Result<RecvInfo> {
    let mut iov = libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() };
    // SAFETY: all-zero sockaddr_storage and msghdr are valid; the fields are set below.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut cmsg = [0u64; CMSG_WORDS];
    // SAFETY: as above.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = (&raw mut addr).cast();
    h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    h.msg_iov = &raw mut iov;
    h.msg_iovlen = 1;
    h.msg_control = cmsg.as_mut_ptr().cast();
    h.msg_controllen = (CMSG_WORDS * 8) as _;
    // SAFETY: `h` points into `addr`, `iov` (which points into `head`, borrowed mutably for this call) and `cmsg`,
    // alive until the call returns; the kernel writes within the lengths given.
    let rc = unsafe { libc::recvmsg(fd, &raw mut h, libc::MSG_DONTWAIT | flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(RecvInfo {
        len: rc as usize,
        from: from_sockaddr(&addr),
        truncated: h.msg_flags & libc::MSG_TRUNC != 0,
        dropped_total: overflow_count(&h),
    })
}

/// Receives up to `bufs.len()` datagrams with one non-blocking `recvmmsg(2)`, datagram `i` into `bufs[i]`;
/// `out` is replaced by one entry per datagram received. `WouldBlock` when none was waiting.
pub(crate) fn recv_mmsg(fd: RawFd, bufs: &mut [&mut [u8]], out: &mut Vec<RecvInfo>) -> io::Result<usize> {
    out.clear();
    let n = bufs.len().min(1024);
    if n == 0 {
        return Ok(0);
    }
    let mut iovs: Vec<libc::iovec> =
        bufs[..n].iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
    // SAFETY: all-zero sockaddr_storage is valid.
    let mut addrs: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; n];
    let mut cmsgs = vec![[0u64; CMSG_WORDS]; n];
    let mut hdrs = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: an all-zero msghdr is valid; the fields are set below.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = (&raw mut addrs[i]).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &raw mut iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = cmsgs[i].as_mut_ptr().cast();
        h.msg_controllen = (CMSG_WORDS * 8) as _;
        hdrs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
    }
    // SAFETY: `hdrs` holds `n` initialised mmsghdr pointing into `addrs`, `iovs` (which point into `bufs`, borrowed
    // mutably for this call) and `cmsgs`, all alive until the call returns; the kernel writes within the lengths
    // given. A null timeout with MSG_DONTWAIT returns what is queued.
    let rc =
        unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for (h, addr) in hdrs[..got].iter().zip(&addrs) {
        let dropped_total = overflow_count(&h.msg_hdr);
        out.push(RecvInfo {
            len: h.msg_len as usize,
            from: from_sockaddr(addr),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            dropped_total,
        });
    }
    Ok(got)
}

/// Asks the kernel to attach the socket's overflow drop count to every received datagram (`SO_RXQ_OVFL`).
pub(crate) fn enable_rxq_ovfl(fd: RawFd) -> io::Result<()> {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    ))]
    {
        let one: libc::c_int = 1;
        // SAFETY: a valid pointer to a c_int of the stated size; an invalid fd is reported as EBADF.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_RXQ_OVFL,
                (&raw const one).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    )))]
    {
        let _ = fd;
        Err(io::Error::new(io::ErrorKind::Unsupported, "SO_RXQ_OVFL is not known for this architecture"))
    }
}

/// Whether `e` from a GSO send means the kernel or the route cannot segment (then send without GSO).
pub(crate) fn is_gso_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    fn pair() -> (UdpSocket, UdpSocket, SocketAddrV4) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(to) = rx.local_addr().unwrap() else { unreachable!() };
        (tx, rx, to)
    }

    fn recv_all(rx: &UdpSocket, want: usize) -> Vec<(Vec<u8>, RecvInfo)> {
        let mut got = Vec::new();
        let mut storage = vec![vec![0u8; 2048]; 8];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < want && std::time::Instant::now() < deadline {
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| b.as_mut_slice()).collect();
            let mut info = Vec::new();
            match recv_mmsg(rx.as_raw_fd(), &mut bufs, &mut info) {
                Ok(n) => {
                    assert!(n <= 8);
                    for (i, inf) in info.iter().enumerate() {
                        got.push((storage[i][..inf.len].to_vec(), *inf));
                    }
                }
                // Loopback sends are queued when send returns: an empty socket after the first datagrams is all.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !got.is_empty() => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("recvmmsg: {e}"),
            }
        }
        got
    }

    #[test]
    fn a_batch_of_datagrams_arrives_in_order_from_the_sender() {
        let (tx, rx, to) = pair();
        let data: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let slices: Vec<[IoSlice<'_>; 1]> = data.iter().map(|d| [IoSlice::new(d)]).collect();
        let msgs: Vec<OutMsg<'_>> = slices.iter().map(|s| OutMsg { dest: to, iov: s, segment: None }).collect();
        assert_eq!(send_mmsg(tx.as_raw_fd(), &msgs).unwrap(), 20);
        let got = recv_all(&rx, 20);
        assert_eq!(got.len(), 20);
        for (i, (bytes, info)) in got.iter().enumerate() {
            assert_eq!(bytes, &data[i]);
            assert!(!info.truncated);
            assert_eq!(info.from, tx.local_addr().unwrap());
        }
    }

    #[test]
    fn gso_splits_one_send_into_equal_datagrams_and_a_shorter_last() {
        let (tx, rx, to) = pair();
        // 10 segments of 1000 bytes and one of 300, gathered from two slices that do not end on a segment.
        let a: Vec<u8> = (0..4500u32).map(|i| (i / 1000) as u8).collect();
        let b: Vec<u8> = (4500..10_300u32).map(|i| (i / 1000) as u8).collect();
        let iov = [IoSlice::new(&a), IoSlice::new(&b)];
        let msg = OutMsg { dest: to, iov: &iov, segment: Some(1000) };
        // Linux has UDP GSO since 4.18; the runtime falls back without it, this test needs it.
        assert_eq!(send_mmsg(tx.as_raw_fd(), &[msg]).expect("a GSO send on loopback"), 1);
        let got = recv_all(&rx, 11);
        assert_eq!(got.len(), 11, "one datagram per segment");
        for (i, (bytes, _)) in got.iter().enumerate() {
            assert_eq!(bytes.len(), if i < 10 { 1000 } else { 300 });
            assert!(bytes.iter().all(|&x| usize::from(x) == i), "segment {i} holds its own bytes");
        }
    }

    #[test]
    fn the_overflow_counter_reports_datagrams_the_full_buffer_dropped() {
        let (tx, rx, to) = pair();
        socket2::SockRef::from(&rx).set_recv_buffer_size(4096).unwrap();
        enable_rxq_ovfl(rx.as_raw_fd()).unwrap();
        let d = [7u8; 1000];
        for _ in 0..200 {
            let _ = tx.send_to(&d, to);
        }
        // The count travels with datagrams queued after the drops: drain, then send one more.
        let queued = recv_all(&rx, 200);
        assert!(!queued.is_empty() && queued.len() < 200, "some datagrams fit, not all: {}", queued.len());
        tx.send_to(&d, to).unwrap();
        let next = recv_all(&rx, 1);
        let dropped = next.first().expect("the last datagram").1.dropped_total.expect("SO_RXQ_OVFL attached");
        assert_eq!(dropped as usize, 200 - queued.len(), "every datagram the full buffer dropped is counted");
    }

    /// A peek at a datagram's head leaves it queued; an empty receive drops it; the next one is then at the head.
    #[test]
    fn a_peeked_datagram_stays_and_an_empty_receive_drops_it() {
        let (tx, rx, to) = pair();
        rx.set_nonblocking(true).unwrap();
        tx.send_to(&[1u8; 3000], to).unwrap();
        tx.send_to(&[2u8; 10], to).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut head = [0u8; 4];
        for _ in 0..2 {
            let p = recv_head(rx.as_raw_fd(), &mut head, libc::MSG_PEEK).unwrap();
            assert_eq!((p.len, p.truncated, head), (4, true, [1; 4]));
        }
        let dropped = recv_head(rx.as_raw_fd(), &mut [], 0).unwrap();
        assert_eq!((dropped.len, dropped.truncated), (0, true));
        let p = recv_head(rx.as_raw_fd(), &mut head, 0).unwrap();
        assert_eq!((p.len, p.truncated, head), (4, true, [2; 4]));
        let e = recv_head(rx.as_raw_fd(), &mut head, libc::MSG_PEEK).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_datagram_longer_than_its_buffer_is_flagged_truncated() {
        let (tx, rx, to) = pair();
        tx.send_to(&[1u8; 4000], to).unwrap();
        let got = recv_all(&rx, 1);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.truncated);
        assert_eq!(got[0].0.len(), 2048);
    }
}
