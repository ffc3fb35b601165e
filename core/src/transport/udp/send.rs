//! `[shoal_network] send_mode = io_thread` (and `auto`, for the messages of a stream): publishers frame their messages
//! on their own thread and queue them; the I/O thread sends the queue in `sendmmsg` batches.
//!
//! - The queue ([`SendQueue`]) is a bounded lock-free MPSC array (`crossbeam_queue::ArrayQueue`) shared by all
//!   publishers of the runtime. A send that finds it full sleeps (a condition variable the I/O thread notifies
//!   when it made room while a send waits) for up to `send_queue_wait_us` (default 10 ms) until there is room,
//!   which slows a sender faster than the socket to the socket's pace; after that it drops its message and counts
//!   it as a drop of its publisher. With 0 it never waits.
//! - Waking: the I/O thread marks the queue idle just before it sleeps; the first push after that wakes it
//!   (one `eventfd` write), every other push costs no system call. With `send_flush_delay_us` above zero the thread
//!   holds the first message up to that long, or until a whole batch is queued.
//! - Batches: consecutive datagrams to one address of one size (the last of a run may be shorter) leave as one
//!   message with a `UDP_SEGMENT` control message (GSO: the kernel cuts it into those datagrams), up to 64
//!   datagrams and 65,507 bytes a run; a kernel or route that refuses GSO (EIO, EINVAL) turns it off for the
//!   process and the datagrams go one per message. GSO segments must fit the link's MTU: a run refused with
//!   EMSGSIZE (datagrams longer than 1,472 bytes on Ethernet; loopback takes 64 KB) is sent again one datagram per
//!   message, which the kernel IP-fragments, and datagrams that long are not put in runs again. Small messages of a
//!   topic (same size) are therefore one GSO run; eCAL's fragments of a large message are 65,507-byte datagrams
//!   already, one per message of the batch.
//! - Packing: a message queued as a packed datagram (`Outgoing::pack_key`) is appended, when the I/O thread takes it
//!   from the queue, to the packed datagram of the same publisher at the back of what it holds unsent, up to
//!   `send_pack_bytes` and `wire::packed::MAX_RECORDS` samples; so only neighbours in the queue merge and no
//!   publisher's messages are reordered. Nothing waits to be packed: what is queued when the thread wakes (or when
//!   `send_flush_delay_us` ends) leaves; a burst packs because it queues up while the thread sends.
//! - A full send buffer (EAGAIN, ENOBUFS) keeps the rest queued and retries after 100 µs; any other error drops the
//!   messages of the failing run, counted as drops of their publishers.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::sync::lock;
use crate::wire::packed;

use crate::sys::mmsg::{MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD, OutMsg, is_gso_unsupported, send_mmsg};

use super::Shared;

/// Datagram runs per `sendmmsg`.
const RUNS_PER_CALL: usize = 64;
/// Messages taken from the queue into the sender's own list at most (a bound on what waits for the socket).
const MAX_PENDING: usize = 1024;
/// Queued messages that end a flush delay at once (and wake the thread while it holds them).
pub(crate) const FULL_BATCH: usize = 64;
/// Retry delay after the socket's send buffer was full.
const RETRY_AFTER: Duration = Duration::from_micros(100);

/// One framed message: its datagrams back to back.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) dest: SocketAddrV4,
    pub(crate) data: Vec<u8>,
    /// Where each of its datagrams ends in `data` when it has more than one; empty: `data` is one datagram.
    pub(crate) ends: Vec<u32>,
    /// The publisher's count of messages lost after they were queued.
    pub(crate) drops: Arc<AtomicU64>,
    /// A packed datagram (`wire::packed`, one datagram): the publisher id, so that the next packed message of the
    /// same publisher queued right behind it is appended to it. `None`: eCAL's format.
    pub(crate) pack_key: Option<u64>,
    /// Messages this entry carries (1 but for packed datagrams).
    pub(crate) messages: u64,
    /// Counts the entry in its writer's messages not yet sent or dropped, until it is dropped.
    pub(crate) _queued: Queued,
}

/// One entry in a writer's count of its queued messages (`UdpWriter::queued`): taken off when the entry is dropped,
/// which is after the I/O thread sent it, dropped it, or merged it into the packed datagram before it (which holds
/// its own count until it is sent). Release: the sends happen before a writer sees the count fall.
#[derive(Debug)]
pub(crate) struct Queued(Arc<AtomicUsize>);

impl Queued {
    pub(crate) fn new(count: &Arc<AtomicUsize>) -> Queued {
        count.fetch_add(1, Ordering::Relaxed);
        Queued(Arc::clone(count))
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Outgoing {
    fn datagram_count(&self) -> usize {
        if self.ends.is_empty() { 1 } else { self.ends.len() }
    }

    /// Datagram `i` of the message.
    fn datagram(&self, i: usize) -> &[u8] {
        if self.ends.is_empty() {
            return &self.data;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }
}

/// The queue from the publishers to the I/O thread.
#[derive(Debug)]
pub(crate) struct SendQueue {
    queue: ArrayQueue<Outgoing>,
    /// Set by the I/O thread just before it sleeps; the push that clears it wakes the thread.
    idle: AtomicBool,
    waker: OnceLock<Arc<mio::Waker>>,
    flush_delay: Duration,
    /// `send_queue_wait_us`: how long a push that finds the queue full waits for room.
    full_wait: Duration,
    /// Bytes of datagrams queued or held by the I/O thread unsent, and `send_queue_bytes`, their bound.
    bytes: AtomicUsize,
    max_bytes: usize,
    /// `send_pack_bytes`: a packed datagram's size at most.
    pack_bytes: usize,
    /// Sends waiting for room ([`Self::push_waiting`]), and what they sleep on: the I/O thread notifies it when it
    /// made room while one waits ([`Self::notify_room`]).
    waiters: AtomicUsize,
    room: std::sync::Mutex<()>,
    room_cv: std::sync::Condvar,
}

impl SendQueue {
    pub(crate) fn new(
        depth: usize,
        max_bytes: usize,
        full_wait: Duration,
        flush_delay: Duration,
        pack_bytes: usize,
    ) -> SendQueue {
        SendQueue {
            queue: ArrayQueue::new(depth.max(1)),
            bytes: AtomicUsize::new(0),
            max_bytes,
            idle: AtomicBool::new(false),
            waker: OnceLock::new(),
            flush_delay,
            full_wait,
            pack_bytes: pack_bytes.min(MAX_UDP_PAYLOAD),
            waiters: AtomicUsize::new(0),
            room: std::sync::Mutex::new(()),
            room_cv: std::sync::Condvar::new(),
        }
    }

    /// A packed datagram's size at most.
    pub(crate) fn pack_bytes(&self) -> usize {
        self.pack_bytes
    }

    /// Queues `m`; gives it back when the queue is full: `send_queue` messages, or `m` would take the bytes held
    /// beyond `send_queue_bytes` (unless nothing is held).
    pub(crate) fn push(&self, m: Outgoing) -> Result<(), Outgoing> {
        let len = m.data.len();
        let before = self.bytes.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > self.max_bytes {
            self.release(len);
            return Err(m);
        }
        if let Err(m) = self.queue.push(m) {
            self.release(len);
            return Err(m);
        }
        let wake =
            self.idle.swap(false, Ordering::SeqCst) || (!self.flush_delay.is_zero() && self.queue.len() == FULL_BATCH);
        if wake
            && let Some(w) = self.waker.get()
            && let Err(e) = w.wake()
        {
            tracing::warn!("UDP data layer: cannot wake the I/O thread: {e}");
        }
        Ok(())
    }

    /// Bytes of datagrams that left the queue and the I/O thread (sent or dropped), or merged into another.
    fn release(&self, len: usize) {
        self.bytes.fetch_sub(len, Ordering::AcqRel);
    }

    /// How long [`push_waiting`](Self::push_waiting) waits for room.
    pub(crate) fn full_wait(&self) -> Duration {
        self.full_wait
    }

    /// [`push`](Self::push), but a full queue is waited on for up to `send_queue_wait_us` (asleep until the I/O
    /// thread, which empties the queue at the socket's pace, made room) before `m` is given back. The I/O thread is
    /// awake while the queue is full (a push that found it idle woke it); should it have just marked itself idle,
    /// the wait wakes it.
    pub(crate) fn push_waiting(&self, m: Outgoing) -> Result<(), Outgoing> {
        let mut m = match self.push(m) {
            Ok(()) => return Ok(()),
            Err(m) if self.full_wait.is_zero() => return Err(m),
            Err(m) => m,
        };
        let deadline = Instant::now() + self.full_wait;
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            if self.idle.swap(false, Ordering::SeqCst)
                && let Some(w) = self.waker.get()
                && let Err(e) = w.wake()
            {
                tracing::warn!("UDP data layer: cannot wake the I/O thread: {e}");
            }
            // Tried again under the lock the I/O thread takes to notify: room made after this attempt wakes the
            // wait below (a notification missed otherwise costs at most the rest of the wait, then one more try).
            let guard = lock(&self.room);
            m = match self.push(m) {
                Ok(()) => break Ok(()),
                Err(m) => m,
            };
            let now = Instant::now();
            if now >= deadline {
                break Err(m);
            }
            drop(self.room_cv.wait_timeout(guard, deadline - now).unwrap_or_else(|e| e.into_inner()));
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Wakes the sends waiting for room, if any (the I/O thread, after it took messages off the queue or sent
    /// some).
    fn notify_room(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.room);
            self.room_cv.notify_all();
        }
    }
}

/// The I/O thread's side: takes the queue and sends it.
pub(crate) struct UdpSender {
    shared: Arc<Shared>,
    queue: Arc<SendQueue>,
    /// Taken from the queue, not yet sent; the front may be partly sent (`front_sent` datagrams).
    pending: VecDeque<Outgoing>,
    front_sent: usize,
    /// When the thread first saw the messages it now holds for the flush delay.
    held_since: Option<Instant>,
    retry_at: Option<Instant>,
    gso: bool,
    /// The longest datagram sent in GSO runs: a run of longer ones goes as single datagrams. The kernel refuses a
    /// GSO run whose segments do not fit the link's MTU (EMSGSIZE; 1,500 bytes on Ethernet, where a longer datagram
    /// is sent in IP fragments instead), so a refusal lowers it below that segment size and to at most 1,472 bytes.
    gso_max_segment: usize,
}

impl UdpSender {
    pub(crate) fn new(shared: Arc<Shared>, queue: Arc<SendQueue>) -> UdpSender {
        UdpSender {
            shared,
            queue,
            pending: VecDeque::new(),
            front_sent: 0,
            held_since: None,
            retry_at: None,
            gso: true,
            gso_max_segment: usize::MAX,
        }
    }

    pub(crate) fn set_waker(&mut self, waker: Arc<mio::Waker>) {
        let _ = self.queue.waker.set(waker);
    }

    fn waiting(&self) -> usize {
        self.pending.len() + self.queue.queue.len()
    }

    /// Sends what is queued; returns when it wants to be called again (flush delay, retry).
    pub(crate) fn flush(&mut self, now: Instant) -> Option<Instant> {
        self.queue.idle.store(false, Ordering::SeqCst);
        if self.waiting() == 0 {
            self.held_since = None;
            return None;
        }
        if let Some(t) = self.retry_at {
            if now < t {
                return Some(t);
            }
            self.retry_at = None;
        }
        let delay = self.queue.flush_delay;
        if !delay.is_zero() && self.waiting() < FULL_BATCH {
            let since = *self.held_since.get_or_insert(now);
            if now < since + delay {
                return Some(since + delay);
            }
        }
        self.held_since = None;
        loop {
            while self.pending.len() < MAX_PENDING {
                match self.queue.queue.pop() {
                    Some(m) => self.take(m),
                    None => break,
                }
            }
            if self.pending.is_empty() {
                self.queue.notify_room();
                return None;
            }
            let sent = self.send_some();
            self.queue.notify_room();
            if !sent {
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                return self.retry_at;
            }
        }
    }

    /// Adds a message taken from the queue to `pending`: a packed one is appended to the packed datagram of the
    /// same publisher at the back when that is still unsent and the result stays within `send_pack_bytes` (so
    /// packing never reorders a publisher's messages: only neighbours in the queue merge).
    fn take(&mut self, m: Outgoing) {
        if let Some(key) = m.pack_key {
            let front_busy = self.pending.len() == 1 && self.front_sent > 0;
            if let Some(tail) = self.pending.back_mut()
                && tail.pack_key == Some(key)
                && !front_busy
            {
                let records = packed::records_of(&m.data);
                let n = packed::count_of(&m.data);
                if tail.data.len() + records.len() <= self.queue.pack_bytes
                    && packed::append_records(&mut tail.data, records, n)
                {
                    tail.messages += m.messages;
                    // Its records now count as part of the tail's bytes; its own header is gone.
                    self.queue.release(m.data.len() - records.len());
                    return;
                }
            }
        }
        self.pending.push_back(m);
    }

    /// Marks the queue idle before the I/O thread sleeps; true when messages already wait (then it must not
    /// sleep). While a flush delay holds messages, or a full socket buffer is retried, the queue stays marked busy
    /// and this is false: pushes do not wake the thread, the flush deadline it sleeps to does.
    pub(crate) fn before_sleep(&mut self) -> bool {
        if self.held_since.is_some() || self.retry_at.is_some() {
            return false;
        }
        self.queue.idle.store(true, Ordering::SeqCst);
        if self.waiting() > 0 {
            self.queue.idle.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// One `sendmmsg` over the front of `pending`. False when the socket's buffer is full (retry later).
    fn send_some(&mut self) -> bool {
        let Some(sock) = self.shared.sender() else {
            // No socket: every queued message is lost (the writer warned when it failed to open).
            for m in self.pending.drain(..) {
                self.queue.release(m.data.len());
                m.drops.fetch_add(m.messages, Ordering::Relaxed);
                self.shared.counters.send_drops.fetch_add(m.messages, Ordering::Relaxed);
            }
            self.front_sent = 0;
            return true;
        };
        let fd = sock.as_raw_fd();
        // Flatten the front into datagrams (message index, datagram), then cut runs.
        let mut iovs: Vec<IoSlice<'_>> = Vec::new();
        // (dest, first iov, iov count, segment size when GSO, last message index touched)
        let mut runs: Vec<(SocketAddrV4, usize, usize, Option<u16>, usize)> = Vec::new();
        let mut run_bytes = 0usize;
        let mut run_seg = 0usize;
        let mut run_closed = true;
        'outer: for (mi, m) in self.pending.iter().enumerate() {
            let skip = if mi == 0 { self.front_sent } else { 0 };
            for di in skip..m.datagram_count() {
                let d = m.datagram(di);
                let extend = self.gso
                    && !run_closed
                    && runs.last().is_some_and(|r| r.0 == m.dest && r.2 < MAX_GSO_SEGMENTS)
                    && d.len() <= run_seg
                    && run_bytes + d.len() <= MAX_UDP_PAYLOAD;
                if extend {
                    let r = runs.last_mut().expect("checked above");
                    r.2 += 1;
                    r.4 = mi;
                    run_bytes += d.len();
                    if d.len() < run_seg {
                        // A shorter datagram ends a GSO run.
                        run_closed = true;
                    }
                } else {
                    if runs.len() == RUNS_PER_CALL {
                        break 'outer;
                    }
                    runs.push((m.dest, iovs.len(), 1, None, mi));
                    run_bytes = d.len();
                    run_seg = d.len();
                    run_closed = d.is_empty() || d.len() > u16::MAX as usize || d.len() > self.gso_max_segment;
                }
                iovs.push(IoSlice::new(d));
            }
        }
        for r in &mut runs {
            if r.2 > 1 {
                r.3 = Some(run_seg_of(&iovs[r.1]));
            }
        }
        let msgs: Vec<OutMsg<'_>> =
            runs.iter().map(|r| OutMsg { dest: r.0, iov: &iovs[r.1..r.1 + r.2], segment: r.3 }).collect();
        let batch_datagrams: usize = runs.iter().map(|r| r.2).sum();
        self.shared.count_own(batch_datagrams, true);
        let result = send_mmsg(fd, &msgs);
        // Datagrams the kernel took, and the run that failed (if any).
        let (sent_runs, failed) = match result {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        let sent_datagrams: usize = runs[..sent_runs].iter().map(|r| r.2).sum();
        self.shared.count_own(batch_datagrams - sent_datagrams, false);
        let c = &self.shared.counters;
        c.send_calls.fetch_add(1, Ordering::Relaxed);
        c.gso_runs.fetch_add(runs[..sent_runs].iter().filter(|r| r.3.is_some()).count() as u64, Ordering::Relaxed);
        let failed_run = failed.as_ref().map(|_| (runs[0].2, runs[0].4, runs[0].3));
        drop(msgs);
        drop(iovs);
        self.advance(sent_datagrams);
        match (failed, failed_run) {
            (None, _) => true,
            (Some(e), Some((count, _, Some(segment)))) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                // The segments do not fit the link's MTU: the run is sent again as single datagrams (IP fragments
                // them), and so are later runs of datagrams this long.
                // Below Ethernet's 1,472 payload bytes (MTU 1,500) at once, so that a stream of varying sizes does
                // not find the limit one refusal at a time; a smaller MTU lowers it further.
                self.gso_max_segment = usize::from(segment).saturating_sub(1).min(ETHERNET_UDP_PAYLOAD);
                tracing::debug!(
                    "UDP data layer: the kernel refused a GSO run of {count} datagrams of {segment} bytes ({e}); \
                     datagrams longer than {} bytes are sent one by one",
                    self.gso_max_segment
                );
                true
            }
            (Some(e), Some((_, _, Some(_)))) if is_gso_unsupported(&e) => {
                tracing::warn!("UDP data layer: the kernel refused a UDP GSO send ({e}); sending without GSO");
                self.gso = false;
                true
            }
            (Some(e), _) if e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) => {
                false
            }
            (Some(e), _) if e.kind() == std::io::ErrorKind::Interrupted => true,
            (Some(e), Some((count, last_msg, _))) => {
                // Drop every message the failing run touched.
                self.shared.note_send_failure(false, &format_args!("a send of {count} datagrams failed: {e}"));
                for _ in 0..=last_msg {
                    if let Some(m) = self.pending.pop_front() {
                        self.queue.release(m.data.len());
                        m.drops.fetch_add(m.messages, Ordering::Relaxed);
                        self.shared.counters.send_drops.fetch_add(m.messages, Ordering::Relaxed);
                    }
                }
                self.front_sent = 0;
                true
            }
            (Some(_), None) => true,
        }
    }

    /// Takes `n` sent datagrams off the front of `pending`.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.pending.front() else { break };
            let left = front.datagram_count() - self.front_sent;
            if n >= left {
                n -= left;
                self.front_sent = 0;
                let Some(m) = self.pending.pop_front() else { break };
                self.queue.release(m.data.len());
                let c = &self.shared.counters;
                c.sent.fetch_add(m.messages, Ordering::Relaxed);
                if m.pack_key.is_some() {
                    c.packed_sent.fetch_add(1, Ordering::Relaxed);
                    c.packed_sent_messages.fetch_add(m.messages, Ordering::Relaxed);
                }
            } else {
                self.front_sent += n;
                n = 0;
            }
        }
    }
}

/// The longest UDP payload in one Ethernet frame (MTU 1,500 less the IPv4 and UDP headers).
const ETHERNET_UDP_PAYLOAD: usize = 1500 - 20 - 8;

fn run_seg_of(first: &IoSlice<'_>) -> u16 {
    // Runs are cut so that their first datagram is the longest and fits in a u16.
    u16::try_from(first.len()).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Outgoing {
        Outgoing {
            dest: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9),
            data: vec![0; 8],
            ends: Vec::new(),
            drops: Arc::default(),
            pack_key: None,
            messages: 1,
            _queued: Queued::new(&Arc::default()),
        }
    }

    /// `send_queue_wait_us`: a push that finds the queue full sleeps until the I/O thread makes room (and wakes it),
    /// up to the configured time, then gives the message back; with zero it gives it back at once.
    #[test]
    fn a_full_queue_is_waited_on_up_to_send_queue_wait() {
        let q = Arc::new(SendQueue::new(2, 1 << 20, Duration::from_secs(5), Duration::ZERO, 1472));
        q.push(message()).expect("room");
        q.push(message()).expect("room");
        let drainer = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                let popped = q.queue.pop().is_some();
                // As the I/O thread does after it took messages off the queue.
                q.notify_room();
                popped
            })
        };
        let t0 = Instant::now();
        assert!(q.push_waiting(message()).is_ok(), "room made within the wait");
        assert!(t0.elapsed() >= Duration::from_millis(15), "it waited for the room: {:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(2), "woken when the room was made: {:?}", t0.elapsed());
        assert!(drainer.join().expect("drainer"));
        assert_eq!(q.queue.len(), 2);

        let nobody_drains = SendQueue::new(1, 1 << 20, Duration::from_millis(30), Duration::ZERO, 1472);
        nobody_drains.push(message()).expect("room");
        let t0 = Instant::now();
        assert!(nobody_drains.push_waiting(message()).is_err(), "given back after the wait");
        assert!(t0.elapsed() >= Duration::from_millis(30), "{:?}", t0.elapsed());

        let no_wait = SendQueue::new(1, 1 << 20, Duration::ZERO, Duration::ZERO, 1472);
        no_wait.push(message()).expect("room");
        assert!(no_wait.push_waiting(message()).is_err(), "zero: given back at once");
    }

    /// `send_queue_bytes`: a message that would take the bytes held beyond the bound finds the queue full, unless
    /// nothing is held; bytes leave the count when the message is taken off again.
    #[test]
    fn the_bytes_held_are_bounded() {
        let big = |n: usize| Outgoing { data: vec![0; n], ..message() };
        let q = SendQueue::new(64, 100, Duration::ZERO, Duration::ZERO, 1472);
        q.push(big(60)).expect("room");
        assert!(q.push(big(60)).is_err(), "60 + 60 > 100");
        q.push(big(40)).expect("60 + 40 fits");
        assert_eq!(q.bytes.load(Ordering::Relaxed), 100);
        for _ in 0..2 {
            let m = q.queue.pop().expect("queued");
            q.release(m.data.len());
        }
        assert_eq!(q.bytes.load(Ordering::Relaxed), 0);
        q.push(big(1000)).expect("one message larger than the bound is taken when nothing is held");
        assert!(q.push(big(1)).is_err());
    }
}
