//! The one I/O thread: owns the registration sockets and timers and drives the sans-IO [`Registrar`].
//!
//! Everything that reaches the network goes through here, except UDP data that the publisher's thread sends itself
//! (every message in `send_mode = user_thread`, lone and large ones in the default `auto`) and the TCP layer's writes
//! (made by the publisher, flushed here); user threads talk to it through a command channel and a [`mio::Waker`], and
//! with UDP data they queue (`send_mode = auto` or `io_thread`) through the UDP layer's send queue, which this thread sends in `sendmmsg` batches first thing on every turn. It never blocks on a send (a
//! full socket buffer drops a registration datagram and counts it; queued data waits in its bounded queue).
//! Sockets are read with `recvmmsg`, a batch per call, at most `[shoal_limits] receive_batch` datagrams per socket
//! and turn; the kernel's count of datagrams it dropped for a full receive buffer (`SO_RXQ_OVFL`) is kept per
//! socket, shown in [`Snapshot::socket_drops`] (registration) and `Snapshot::udp` (the UDP data layer), and sent in
//! this process's registration (shoal's process statistics).
//!
//! Every process of a host receives every registration datagram of the host (a process and each of its entities
//! every second). On a busy host (at least [`REG_BUSY_RATE`] datagrams in the last second: some 150 processes or
//! more) the registration socket leaves the poll and is read on a timer instead, every [`REG_READ_PAUSE`]: what
//! arrived meanwhile is read in one wake-up (200 processes: one wake-up instead of about 40). The registrar's timer
//! (the refresh) takes the read along and restarts its pause, and so does any other wake-up less than half a pause
//! before the read: the reads keep in step with the refresh, which then costs no wake-up of its own. Below that rate the socket is back in the poll and read
//! as soon as it signals: what a peer announces is learnt at once (an eCAL publisher that re-creates its memory
//! file gives readers 5 ms to follow its new name), and an idle host wakes nobody.
//!
//! The thread only moves datagrams, timers and events: what a match means for local publishers and subscribers is
//! decided by the [`EventHandler`] it is started with (the runtime of `pubsub`), which it calls with every event.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::Config;
use crate::monitor::Snapshot;
use crate::registration::{Event, LocalService, LocalTopic, Registrar, ServerDirectory, TopicStats};
use crate::sys::mmsg::{OutMsg, send_mmsg};
use crate::transport::IoSource;
use crate::transport::udp::net as udp_net;

const RECV_TOKEN: Token = Token(0);
const WAKE_TOKEN: Token = Token(1);
/// Tokens of the layers' sockets ([`crate::transport::IoSource`]) start here.
const SOURCE_TOKEN_BASE: usize = 2;
/// Source `i` may also register sockets under its own tokens `(i + 1) * SOURCE_TOKEN_SPACE ..` (one per
/// connection, [`IoSource::on_token`]).
const SOURCE_TOKEN_SPACE: usize = 1 << 32;
/// Registration datagrams one `recvmmsg` takes at most (64 KiB of buffer each, of which the pages a datagram
/// touched are resident): the datagrams of one [`REG_READ_PAUSE`] of 200 processes in three calls. More slots save
/// calls but cost more: each datagram lands on a page of its own, and the kernel's copy into a page the last call
/// did not touch is what dominates (200 processes, one profile each: 64 slots 9 %, 128 slots 27 % more time in
/// `recvmmsg`).
const REG_RECV_SLOTS: usize = 32;
/// How often the registration socket is read on a busy host, out of the poll (see the module's doc): what a new
/// peer announces waits at most this long, a match at most twice (each side reads the other's).
const REG_READ_PAUSE: Duration = Duration::from_millis(200);
/// Registration datagrams per second from which the socket is read on a timer ([`REG_READ_PAUSE`]).
const REG_BUSY_RATE: usize = 300;
/// Registration datagrams one `sendmmsg` sends at most.
const REG_SEND_BATCH: usize = 64;

/// What the I/O thread hands to the owner of the local publishers and subscribers.
pub(crate) trait EventHandler: Send + Sync {
    /// A registration event about one local entity. Returns the entity's new registration when the event changed
    /// it (a layer started, the native ring became active), so that it is announced at once.
    fn on_event(&self, event: Event) -> Option<LocalTopic>;

    /// The statistics of every local entity, for the periodic registration.
    fn collect_stats(&self) -> Vec<(u64, TopicStats)>;

    /// The call counts of every local service server's and client's methods, for the periodic registration.
    fn collect_service_calls(&self) -> Vec<(u64, Vec<(String, i64)>)> {
        Vec::new()
    }
}

/// Requests from user threads to the I/O thread.
#[derive(Debug)]
pub(crate) enum Command {
    AddPublisher(LocalTopic),
    AddSubscriber(LocalTopic),
    Update(LocalTopic),
    Remove(u64),
    AddService(LocalService),
    RemoveService(u64),
    SetProcessState(crate::process::ProcessState),
    Snapshot(mpsc::Sender<Snapshot>),
    Shutdown,
}

/// Errors starting the I/O thread.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum IoStartError {
    /// The registration receive socket could not be opened.
    #[error("cannot open the registration socket on UDP port {port}: {source}")]
    Socket {
        /// The configured registration port.
        port: u16,
        /// What the OS said.
        source: io::Error,
    },
    /// The poller or the thread could not be created.
    #[error("cannot start the I/O thread: {0}")]
    Thread(io::Error),
}

/// The user-side handle of the I/O thread.
#[derive(Debug)]
pub(crate) struct IoHandle {
    tx: mpsc::Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl IoHandle {
    /// Sends a command and wakes the thread. Fails silently only when the thread is gone (shutdown).
    pub(crate) fn send(&self, cmd: Command) {
        if self.tx.send(cmd).is_ok()
            && let Err(e) = self.waker.wake()
        {
            tracing::warn!("cannot wake the I/O thread: {e}");
        }
    }

    /// Stops the thread after it sent the unregistration samples.
    pub(crate) fn shutdown(&mut self) {
        self.send(Command::Shutdown);
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

struct Sockets {
    recv: UdpSocket,
    send: UdpSocket,
    dest: SocketAddr,
}

/// The registration sockets: the same kind as the UDP data layer's (one interface for both), on the registration
/// port, sending to the local broadcast address or, in network mode, the multicast group.
fn open_sockets(cfg: &Config) -> io::Result<Sockets> {
    let port = cfg.registration.port;
    let net = &cfg.network;
    let iface = if net.enabled { udp_net::multicast_interface(net) } else { Ipv4Addr::UNSPECIFIED };
    let recv = udp_net::open_recv_socket(net, iface, port)?;
    let send = UdpSocket::from_std(udp_net::open_send_socket(net, iface)?.into());
    let to = if net.enabled { net.multicast_group } else { net.local_broadcast };
    Ok(Sockets { recv, send, dest: SocketAddr::V4(SocketAddrV4::new(to, port)) })
}

/// Hands the I/O thread [`start`] made its event handler, once that exists (the handler's owner holds the thread's
/// [`IoHandle`], so the thread is made first).
#[derive(Debug)]
pub(crate) struct Attach {
    tx: mpsc::SyncSender<Weak<dyn EventHandler>>,
}

impl Attach {
    /// Gives the thread `handler` (held weakly: the thread never keeps its owner alive); it starts its loop now.
    /// Dropping the `Attach` instead ends the thread.
    pub(crate) fn attach(self, handler: Weak<dyn EventHandler>) {
        // Fails only when the thread is gone already (nothing then to hand it to).
        let _ = self.tx.send(handler);
    }
}

/// Starts the I/O thread: registration on the sockets of `cfg`, the layers' `sources` polled beside them. The
/// thread waits for its event handler ([`Attach::attach`]) before it polls anything; commands sent meanwhile
/// wait in its queue.
pub(crate) fn start(
    cfg: &Config,
    registrar: Registrar,
    sources: Vec<Box<dyn IoSource>>,
    directory: Arc<ServerDirectory>,
) -> Result<(IoHandle, Attach), IoStartError> {
    let sockets = open_sockets(cfg).map_err(|source| IoStartError::Socket { port: cfg.registration.port, source })?;
    let poll = Poll::new().map_err(IoStartError::Thread)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN).map_err(IoStartError::Thread)?);
    let (tx, rx) = mpsc::channel();
    let (attach_tx, attach_rx) = mpsc::sync_channel::<Weak<dyn EventHandler>>(1);
    let thread_waker = Arc::clone(&waker);
    let affinity = cfg.io.cpu_affinity.clone();
    let receive_batch = cfg.limits.receive_batch.max(1);
    let thread = std::thread::Builder::new()
        .name("shoal-io".into())
        .spawn(move || {
            // The handler's owner was not made (its start failed after this one): nothing to run for.
            let Ok(handler) = attach_rx.recv() else { return };
            if let Err(e) = crate::sys::set_current_thread_affinity(&affinity) {
                tracing::warn!("cannot pin the I/O thread to CPUs {affinity:?}: {e}");
            }
            let mut io = IoThread {
                poll,
                sockets,
                registrar,
                rx,
                handler,
                send_drops: 0,
                sources,
                receive_batch,
                reg_batch: udp_net::RecvBatch::new(REG_RECV_SLOTS),
                reg_reads: RegReads::default(),
                reg_rate: (Instant::now(), 0),
                reg_busy: false,
                waker: thread_waker,
                directory,
                directory_generation: None,
                cpu_meter: crate::stats::CpuMeter::default(),
                rss: crate::sys::RssReader::default(),
                announced_use: (None, None),
            };
            if let Err(e) = io.run() {
                tracing::error!("shoal I/O thread stopped: {e}");
            }
        })
        .map_err(IoStartError::Thread)?;
    Ok((IoHandle { tx, waker, thread: Some(thread) }, Attach { tx: attach_tx }))
}

/// When the registration socket is read while it is out of the poll (a busy host, see the module's doc): every
/// [`REG_READ_PAUSE`], and also on a wake-up of the registrar's timer or any other wake-up less than half a pause
/// before the read, each read restarting the pause.
#[derive(Debug, Default)]
struct RegReads {
    /// The next read; `None`: the socket is in the poll.
    at: Option<Instant>,
}

impl RegReads {
    /// Reads on the timer from now on, the first a pause from `now`.
    fn start(&mut self, now: Instant) {
        self.at = Some(now + REG_READ_PAUSE);
    }

    /// Back to reads on readiness.
    fn stop(&mut self) {
        self.at = None;
    }

    fn on_timer(&self) -> bool {
        self.at.is_some()
    }

    /// The next read on the timer, for the poll's timeout.
    fn next(&self) -> Option<Instant> {
        self.at
    }

    /// Whether to read on this wake-up at `now` (`timer_due`: the registrar's timer woke the thread); if so, the
    /// next read is a pause from `now`.
    fn read_now(&mut self, now: Instant, timer_due: bool) -> bool {
        match self.at {
            Some(t) if timer_due || t.saturating_duration_since(now) < REG_READ_PAUSE / 2 => {
                self.at = Some(now + REG_READ_PAUSE);
                true
            }
            _ => false,
        }
    }
}

struct IoThread {
    poll: Poll,
    sockets: Sockets,
    registrar: Registrar,
    rx: mpsc::Receiver<Command>,
    handler: Weak<dyn EventHandler>,
    send_drops: u64,
    /// Sockets of the eCAL-facing layers (the UDP data socket), token `SOURCE_TOKEN_BASE + index`.
    sources: Vec<Box<dyn IoSource>>,
    /// Datagrams taken from one socket per loop turn.
    receive_batch: usize,
    /// `recvmmsg` buffers of the registration socket and its kernel drop count.
    reg_batch: udp_net::RecvBatch,
    /// When the registration socket is read on a busy host ([`RegReads`]).
    reg_reads: RegReads,
    /// Start of the current one-second window of registration datagrams, and how many it got so far.
    reg_rate: (Instant, usize),
    /// The last full window got at least [`REG_BUSY_RATE`] datagrams: the socket is read on a timer.
    reg_busy: bool,
    /// Handed to the sources, whose producers wake the thread with it.
    waker: Arc<Waker>,
    /// The remote servers and clients, published for the process's service clients and servers.
    directory: Arc<ServerDirectory>,
    /// The registrar's services generation last published.
    directory_generation: Option<u64>,
    /// This process's CPU load between stats updates, announced in its registration.
    cpu_meter: crate::stats::CpuMeter,
    /// This process's resident memory, announced in its registration.
    rss: crate::sys::RssReader,
    /// The resident memory and CPU load last announced ([`crate::stats::steady`]).
    announced_use: (Option<u64>, Option<u64>),
}

impl IoThread {
    fn run(&mut self) -> io::Result<()> {
        self.poll.registry().register(&mut self.sockets.recv, RECV_TOKEN, Interest::READABLE)?;
        let mut events = Events::with_capacity(64);
        // Sockets left with datagrams after their batch (`[shoal_limits] receive_batch`): mio reports readiness
        // only on changes, so they are drained again on the next turn, after timers and commands had theirs.
        let mut reg_pending = false;
        let mut sources_pending = vec![false; self.sources.len()];
        for (i, src) in self.sources.iter_mut().enumerate() {
            src.set_token_space((i + 1) * SOURCE_TOKEN_SPACE, SOURCE_TOKEN_SPACE);
            src.set_waker(Arc::clone(&self.waker));
        }
        // The earliest time a source asked to flush again (a flush delay or a retry after a full send buffer).
        let mut flush_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let timeout = self.registrar.poll_timeout().map(|t| t.saturating_duration_since(now));
            // Cap the sleep so stats and expiry never lag far behind even if the registrar asks for nothing; do not
            // sleep at all while a socket has datagrams left.
            let mut timeout = timeout.unwrap_or(Duration::from_millis(500)).min(Duration::from_millis(500));
            if let Some(t) = flush_at {
                timeout = timeout.min(t.saturating_duration_since(now));
            }
            if let Some(t) = self.reg_reads.next() {
                timeout = timeout.min(t.saturating_duration_since(now));
            }
            if reg_pending || sources_pending.iter().any(|p| *p) {
                timeout = Duration::ZERO;
            }
            // Last, so that a send queued after this mark wakes the thread (and one queued before it is seen).
            let mut queued = false;
            for src in self.sources.iter_mut() {
                queued |= src.before_sleep();
            }
            if queued {
                timeout = Duration::ZERO;
            }
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // Queued sends first: they are what a publisher waits on.
            flush_at = self.flush_sources();
            for ev in events.iter() {
                if ev.token() == RECV_TOKEN {
                    reg_pending = true;
                } else if ev.token().0 >= SOURCE_TOKEN_SPACE {
                    let i = ev.token().0 / SOURCE_TOKEN_SPACE - 1;
                    if let (Some(src), Some(p)) = (self.sources.get_mut(i), sources_pending.get_mut(i))
                        && src.on_token(self.poll.registry(), ev.token(), Instant::now())
                    {
                        *p = true;
                    }
                } else if let Some(p) =
                    ev.token().0.checked_sub(SOURCE_TOKEN_BASE).and_then(|i| sources_pending.get_mut(i))
                {
                    *p = true;
                }
            }
            let now = Instant::now();
            let timer_due = self.registrar.poll_timeout().is_some_and(|t| t <= now);
            if self.reg_reads.read_now(now, timer_due) {
                reg_pending = true;
            }
            if reg_pending {
                let got;
                (reg_pending, got) = self.drain_socket();
                self.count_registration_reads(got);
                self.follow_registration_rate();
            }
            for (src, pending) in self.sources.iter_mut().zip(sources_pending.iter_mut()) {
                if *pending {
                    *pending = src.on_readable(Instant::now(), self.receive_batch);
                }
            }
            if self.drain_commands() {
                self.flush();
                self.flush_before_exit();
                return Ok(());
            }
            // Before our registration goes out (flush), so a new subscriber's layers already listen.
            let now = Instant::now();
            for (i, src) in self.sources.iter_mut().enumerate() {
                src.maintain(self.poll.registry(), Token(SOURCE_TOKEN_BASE + i), now);
            }
            let now = Instant::now();
            if self.registrar.poll_timeout().is_some_and(|t| t <= now) {
                if self.registrar.refresh_due(now) {
                    self.update_stats();
                }
                self.registrar.handle_timeout(now);
            }
            self.process_events();
            self.publish_services();
            // Layers started or connections made by these events open their sockets now, not a poll later.
            let now = Instant::now();
            for (i, src) in self.sources.iter_mut().enumerate() {
                src.maintain(self.poll.registry(), Token(SOURCE_TOKEN_BASE + i), now);
            }
            self.flush();
        }
    }

    /// At shutdown: what publishers queued before it goes out, as far as the socket takes it within 100 ms
    /// (what is still queued then goes with the thread).
    fn flush_before_exit(&mut self) {
        let give_up = Instant::now() + Duration::from_millis(100);
        while let Some(t) = self.flush_sources() {
            if t >= give_up {
                break;
            }
            std::thread::sleep(t.saturating_duration_since(Instant::now()));
        }
    }

    /// Every source's queued sends; the earliest time one wants to be called again.
    fn flush_sources(&mut self) -> Option<Instant> {
        let now = Instant::now();
        self.sources.iter_mut().filter_map(|s| s.flush(now)).min()
    }

    /// Counts `got` registration datagrams into the rate that decides whether the socket is read on a timer.
    fn count_registration_reads(&mut self, got: usize) {
        let now = Instant::now();
        let (start, count) = &mut self.reg_rate;
        *count += got;
        let elapsed = now.saturating_duration_since(*start);
        if elapsed >= Duration::from_secs(1) {
            // Datagrams per second over the window (a window that took longer than a second is scaled down).
            let per_s = (*count as u128 * 1000 / elapsed.as_millis().max(1)) as usize;
            self.reg_busy = per_s >= REG_BUSY_RATE;
            *start = now;
            *count = 0;
        }
    }

    /// Reads the registration socket on a timer while the host is busy, on readiness otherwise (see the module's
    /// doc). If the poll refuses a change, the socket stays as it is (and is read on the timer while out of it).
    fn follow_registration_rate(&mut self) {
        match (self.reg_busy, self.reg_reads.on_timer()) {
            (true, false) => match self.poll.registry().deregister(&mut self.sockets.recv) {
                Ok(()) => self.reg_reads.start(Instant::now()),
                Err(e) => tracing::warn!("cannot take the registration socket out of the poll: {e}"),
            },
            // Back in the poll: what is already queued signals at once (readiness is checked as it is added).
            (false, true) => {
                match self.poll.registry().register(&mut self.sockets.recv, RECV_TOKEN, Interest::READABLE) {
                    Ok(()) => self.reg_reads.stop(),
                    Err(e) => tracing::warn!("cannot put the registration socket back into the poll: {e}"),
                }
            }
            _ => {}
        }
    }

    /// Takes up to `receive_batch` registration datagrams: whether the batch ended before the socket was empty, and
    /// how many it took.
    fn drain_socket(&mut self) -> (bool, usize) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.sockets.recv);
        let registrar = &mut self.registrar;
        let before = self.reg_batch.kernel_drops();
        let mut got = 0;
        // One clock read per batch: the datagrams of one batch arrived within a pause of each other.
        let now = Instant::now();
        let (drained, err) = self.reg_batch.recv(fd, self.receive_batch, |from, d| {
            got += 1;
            registrar.handle_datagram(now, from, d);
        });
        let dropped = self.reg_batch.kernel_drops() - before;
        if dropped > 0 {
            tracing::debug!("registration: the kernel dropped {dropped} datagrams (receive buffer full)");
        }
        if let Some(e) = err {
            tracing::warn!("registration receive failed: {e}");
        }
        (drained == udp_net::Drained::Budget, got)
    }

    /// Returns true when asked to shut down.
    fn drain_commands(&mut self) -> bool {
        while let Ok(cmd) = self.rx.try_recv() {
            let now = Instant::now();
            match cmd {
                Command::AddPublisher(t) => self.registrar.add_publisher(now, t),
                Command::AddSubscriber(t) => self.registrar.add_subscriber(now, t),
                Command::Update(t) => self.registrar.update_local(now, t),
                Command::Remove(id) => self.registrar.remove_local(now, id),
                Command::AddService(s) => self.registrar.add_service(s),
                Command::RemoveService(id) => self.registrar.remove_service(id),
                Command::SetProcessState(state) => self.registrar.set_process_state(state),
                Command::Snapshot(reply) => {
                    let mut snap = crate::monitor::build_snapshot(&self.registrar, Instant::now());
                    snap.socket_drops = crate::monitor::SocketDrops {
                        registration: self.reg_batch.kernel_drops(),
                        registration_send_failures: self.send_drops,
                    };
                    let _ = reply.send(snap);
                }
                Command::Shutdown => {
                    self.registrar.shutdown(now);
                    return true;
                }
            }
        }
        false
    }

    /// Sends the registrar's datagrams, up to 64 per `sendmmsg` (eCAL takes one sample per datagram, so the
    /// datagrams stay as many; the system calls do not). A datagram the socket refuses is dropped and counted.
    fn flush(&mut self) {
        let SocketAddr::V4(dest) = self.sockets.dest else { return };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.sockets.send);
        let mut out: Vec<Vec<u8>> = Vec::new();
        loop {
            out.clear();
            while out.len() < REG_SEND_BATCH {
                match self.registrar.poll_transmit() {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
            if out.is_empty() {
                return;
            }
            let slices: Vec<[io::IoSlice<'_>; 1]> = out.iter().map(|d| [io::IoSlice::new(d)]).collect();
            let msgs: Vec<OutMsg<'_>> = slices.iter().map(|s| OutMsg { dest, iov: s, segment: None }).collect();
            let mut at = 0;
            while at < msgs.len() {
                match send_mmsg(fd, &msgs[at..]) {
                    Ok(n) => at += n.max(1),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.send_drops += 1;
                        tracing::debug!("registration datagram of {} B not sent: {e}", out[at].len());
                        at += 1;
                    }
                }
            }
        }
    }

    fn update_stats(&mut self) {
        // What the OS says of this process (a failure leaves the figure out: announced as not measured), kept
        // steady so that an idle process's registration repeats.
        use crate::stats::{CPU_LOAD_STEP, RSS_STEP, steady};
        let load = crate::sys::process_cpu_time().ok().and_then(|t| self.cpu_meter.sample(Instant::now(), t));
        let (rss, cpu) = &mut self.announced_use;
        let memory_rss_bytes = steady(rss, self.rss.read().ok(), RSS_STEP);
        let cpu_load_permille =
            steady(cpu, load.map(u64::from), CPU_LOAD_STEP).map(|p| p.min(u64::from(u32::MAX)) as u32);
        self.registrar.set_process_stats(crate::stats::ShoalProcessStats {
            udp_kernel_drops: self.sources.iter().map(|s| s.kernel_drops()).sum(),
            registration_kernel_drops: self.reg_batch.kernel_drops(),
            memory_rss_bytes,
            cpu_load_permille,
        });
        let Some(handler) = self.handler.upgrade() else { return };
        for (id, stats) in handler.collect_stats() {
            self.registrar.set_stats(id, stats);
        }
        for (id, calls) in handler.collect_service_calls() {
            self.registrar.set_service_calls(id, &calls);
        }
    }

    /// Hands the service clients and servers the remote servers and clients, when they changed.
    fn publish_services(&mut self) {
        let generation = self.registrar.services_generation();
        if self.directory_generation != Some(generation) {
            self.directory_generation = Some(generation);
            self.directory.publish(self.registrar.services().cloned().collect());
        }
    }

    fn process_events(&mut self) {
        let handler = self.handler.upgrade();
        while let Some(ev) = self.registrar.poll_event() {
            if let Some(changed) = handler.as_ref().and_then(|h| h.on_event(ev)) {
                self.registrar.update_local(Instant::now(), changed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_reads_keep_in_step_with_the_registrar_timer() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut r = RegReads::default();
        // In the poll: nothing on a timer.
        assert!(!r.read_now(t0, true) && r.next().is_none() && !r.on_timer());
        r.start(t0);
        assert_eq!(r.next(), Some(ms(200)));
        // A wake-up more than half a pause early reads nothing; within half a pause it reads, and restarts the pause.
        assert!(!r.read_now(ms(90), false));
        assert!(r.read_now(ms(110), false));
        assert_eq!(r.next(), Some(ms(310)));
        assert!(r.read_now(ms(310), false));
        // The registrar's timer takes the read along however early, so that the refresh needs no wake-up of its
        // own: the reads follow it from there.
        assert!(r.read_now(ms(320), true));
        assert_eq!(r.next(), Some(ms(520)));
        assert!(r.read_now(ms(520), false));
        assert_eq!(r.next(), Some(ms(720)));
        r.stop();
        assert!(!r.read_now(ms(720), true) && r.next().is_none());
    }
}
