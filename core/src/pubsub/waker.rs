//! The waker thread: rings subscriber processes' doorbells for this process's publishers when a send finds several
//! of them asleep, so that the cost of `send()` does not grow with the number of sleeping subscriber processes.
//!
//! Waking a sleeping process is one `FUTEX_WAKE`, most of it the kernel's wake-up of another CPU (about 9 µs of the
//! caller's CPU on the 2-core VM this project is measured on, whose idle vCPUs halt); ringing N processes from
//! `send()` would cost N of them. Instead, [`ring_after_publish`] wakes a
//! single sleeping process directly (the lowest-latency path, e.g. ping-pong) and, once it finds a second one asleep,
//! stops looking, marks the publisher's doorbells handed over (its [`WakeSet`]'s bit in a word on the thread's bell's
//! cache line: one line transfer for the mark and the ring together) and rings this thread's [`LocalBell`]: one
//! private wake-up, or none while the thread is still busy with an earlier send. The thread takes the marks, and for
//! each set marked fences and rings every doorbell that needs it, exactly as the publisher would have
//! ([`Ringers::wake_sleepers`]: taking the mark with `Acquire` orders the publish before the thread's fence, which
//! pairs with each sleeper's fence as the publisher's own does). The cost moves off the publishing thread and no
//! longer grows with the number of sleeping processes; their wake-up takes one hop more.
//!
//! Started by the first publisher that serves two or more subscriber processes over the native ring; one per
//! process, whatever the number of publishers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::lock;
use crate::transport::shm_ring::{LocalBell, Ringers};

/// How long the thread sleeps without work before it drops doorbells no publisher uses any more.
const IDLE_REFRESH: Duration = Duration::from_secs(1);

/// What a publishing thread touches to hand its doorbells over, on one cache line: the marks, the thread's bell and
/// whether the thread runs.
#[derive(Default)]
#[repr(C, align(64))]
struct HandOver {
    /// The [`WakeSet`] bits of the sets handed over and not taken yet.
    pending: AtomicU64,
    bell: LocalBell,
    /// Set once the thread runs: handing over is pointless before.
    running: AtomicBool,
}

#[derive(Default)]
struct Shared {
    hand: HandOver,
    stop: AtomicBool,
    /// The sets of this process's publishers that may be handed over.
    watched: Mutex<Vec<Weak<WakeSet>>>,
    /// Bumped when `watched` changes.
    watched_version: AtomicU64,
    /// Sets given a bit so far: the next one gets bit `given % 64`.
    given: AtomicU64,
}

/// A publisher's doorbells as the waker thread knows them: the [`Ringers`] and, for two or more doorbells, the bit
/// that marks them handed over (sets share a bit beyond 64 of them: the thread then checks each set with that bit).
#[derive(Debug, Default)]
pub(crate) struct WakeSet {
    ringers: Ringers,
    /// `1 << k`; 0 for a set of fewer than two doorbells, never handed over.
    bit: u64,
}

impl std::ops::Deref for WakeSet {
    type Target = Ringers;
    fn deref(&self) -> &Ringers {
        &self.ringers
    }
}

impl Drop for WakeSet {
    /// A set handed over may be dropped before the thread took it (its publisher's connections changed right after
    /// the send), and the thread then no longer finds it: its sleepers are rung here, after every hand-over of it
    /// (once more than needed at worst, when connections change).
    fn drop(&mut self) {
        if self.bit != 0 {
            self.ringers.wake_sleepers();
        }
    }
}

/// Owner of the waker thread.
#[derive(Default)]
pub(crate) struct Waker {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").field("running", &self.shared.hand.running.load(Ordering::Relaxed)).finish()
    }
}

impl Waker {
    /// The set of `ringers` (a publisher's doorbells) that [`ring_after_publish`] takes: with two or more doorbells,
    /// known to the thread, which rings them when the set is handed over. Call before the publisher uses it; cheap (a
    /// lock and a push), so the publisher calls it when its connections change.
    pub(crate) fn watch(&self, ringers: Ringers) -> Arc<WakeSet> {
        if ringers.bells().len() < 2 {
            return Arc::new(WakeSet { ringers, bit: 0 });
        }
        let bit = 1u64 << (self.shared.given.fetch_add(1, Ordering::Relaxed) % 64);
        let set = Arc::new(WakeSet { ringers, bit });
        let mut w = lock(&self.shared.watched);
        w.retain(|r| r.strong_count() > 0);
        w.push(Arc::downgrade(&set));
        self.shared.watched_version.fetch_add(1, Ordering::Release);
        set
    }

    /// Starts the thread if it does not run yet. Call when a publisher gets its second subscriber process, from a
    /// thread whose CPU affinity the waker may inherit (the I/O thread; not a publishing thread that may be pinned).
    pub(crate) fn start(&self) {
        let mut t = lock(&self.thread);
        if t.is_some() || self.shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let shared = Arc::clone(&self.shared);
        match std::thread::Builder::new().name("shoal-waker".into()).spawn(move || run(&shared)) {
            Ok(h) => {
                *t = Some(h);
                self.shared.hand.running.store(true, Ordering::SeqCst);
            }
            Err(e) => tracing::warn!("cannot start the shoal waker thread, publishers ring every subscriber: {e}"),
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.hand.running.store(false, Ordering::SeqCst);
        self.shared.hand.bell.ring();
        let t = lock(&self.thread).take();
        if let Some(t) = t
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

/// A message at least this large wakes the sleeping subscriber processes when its write starts
/// ([`ring_before_copy`]), not only once it is published.
pub(crate) const EARLY_WAKE_BYTES: usize = 256 << 10;

/// Rings the doorbells of `ringers` whose process sleeps once the slot of a large message is marked as being written,
/// before its copy: a sleeping thread's wake-up (about 30 µs on a VM whose idle vCPU halts, tens of µs from a deep
/// C-state) then overlaps the copy (25 µs for 1 MiB) instead of following it, and the woken receiver polls until
/// the message is published (`Subscriber::recv_with`). When the message is published, [`ring_after_publish`] finds
/// the doorbells rung already (or the receivers polling) and makes no second wake-up. Returns what
/// [`ring_after_publish`] does.
pub(crate) fn ring_before_copy(waker: &Waker, ringers: &WakeSet) -> usize {
    // The same protocol: the "being written" mark is the store the waiter checks are ordered after.
    ring_after_publish(waker, ringers)
}

/// Rings the doorbells of `ringers` whose process sleeps, after the caller published (and before it returns to the
/// user): one sleeping process directly, two or more through the waker thread. Returns how many it found asleep,
/// where 2 means two or more (it stops looking at the second when it hands them over).
#[inline]
pub(crate) fn ring_after_publish(waker: &Waker, ringers: &WakeSet) -> usize {
    // Processes none of whose threads ever slept need neither the fence nor the waiter checks (the doorbells'
    // `spin_only`, asked through our own doorbell's `spin_ends`: `Ringers`): a stream to busy-spinning receivers then
    // makes its publisher wait for no store on any send, and call nothing.
    if ringers.all_spin_only() {
        return 0;
    }
    ring_sleepers(waker, ringers)
}

/// [`ring_after_publish`] past the spin-only check: out of line.
#[inline(never)]
fn ring_sleepers(waker: &Waker, set: &WakeSet) -> usize {
    let bells = set.bells();
    // StoreLoad between the publish and the waiter checks (see the doorbell protocol).
    fence(Ordering::SeqCst);
    let hand = &waker.shared.hand;
    if set.bit != 0 && hand.running.load(Ordering::Relaxed) {
        let mut sleepers = bells.iter().filter(|b| b.needs_wake());
        let Some(first) = sleepers.next() else { return 0 };
        if sleepers.next().is_none() {
            let _ = first.wake();
            return 1;
        }
        // Two or more: the thread checks them all (the rest unread here). A mark still set (not taken yet) serves:
        // this load is before the thread's taking in the word's order, so the thread's fence comes after ours. The
        // mark is stored before `ring`'s fence: either the thread sees it in its re-check or `ring` sees the thread
        // registered and wakes it.
        if hand.pending.load(Ordering::Relaxed) & set.bit == 0 {
            hand.pending.fetch_or(set.bit, Ordering::Release);
        }
        hand.bell.ring();
        return 2;
    }
    set.wake_needing()
}

fn run(shared: &Shared) {
    let hand = &shared.hand;
    let mut version = u64::MAX;
    let mut watched: Vec<Arc<WakeSet>> = Vec::new();
    let mut idle = false;
    loop {
        let taken = if hand.pending.load(Ordering::Relaxed) == 0 { 0 } else { hand.pending.swap(0, Ordering::Acquire) };
        if taken != 0 {
            // After the marks, before the version read and the waiter checks: every publisher that set a mark taken
            // here, or found it set and left it (its load is before the taking in the word's order), fenced after its
            // publish and after registering its set, so this fence comes after theirs and both are seen.
            fence(Ordering::SeqCst);
        }
        let v = shared.watched_version.load(Ordering::Acquire);
        if v != version || idle {
            let mut w = lock(&shared.watched);
            w.retain(|r| r.strong_count() > 0);
            watched = w.iter().filter_map(Weak::upgrade).collect();
            version = v;
        }
        if taken != 0 {
            for set in watched.iter().filter(|s| s.bit & taken != 0) {
                set.wake_sleepers();
            }
            idle = false;
            continue;
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let waiter = hand.bell.register_waiter();
        if shared.stop.load(Ordering::SeqCst)
            || shared.watched_version.load(Ordering::Acquire) != version
            || hand.pending.load(Ordering::SeqCst) != 0
        {
            continue;
        }
        idle = match waiter.wait(Some(IDLE_REFRESH)) {
            Ok(r) => r == crate::transport::shm_ring::WakeReason::TimedOut,
            Err(e) => {
                tracing::warn!("waker wait failed, polling instead: {e}");
                std::thread::sleep(Duration::from_millis(1));
                false
            }
        };
        if idle {
            // Hold no doorbell nobody uses: they are re-read from `watched` (weak) above.
            watched.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shm_ring::{Doorbell, DoorbellRemote, PollState};
    use std::time::Instant;

    fn remotes_of(owners: &[impl std::ops::Deref<Target = Doorbell>]) -> Vec<Arc<DoorbellRemote>> {
        owners.iter().map(|d| Arc::new(DoorbellRemote::open(d.name()).expect("open"))).collect()
    }

    /// Three subscriber processes, two with a sleeping thread: the publishing thread finds the two, hands its
    /// doorbells over and rings the waker thread, which wakes both and leaves the third alone; the mark is taken.
    #[test]
    fn hands_two_sleeping_doorbells_to_the_thread() {
        let waker = Waker::default();
        let owners: Vec<Arc<Doorbell>> = (0..3).map(|_| Arc::new(Doorbell::create().expect("doorbell"))).collect();
        waker.start();
        let set = waker.watch(Ringers::new(remotes_of(&owners), None));
        assert!(waker.shared.hand.running.load(Ordering::SeqCst));
        let flag = Arc::new(AtomicBool::new(false));
        let sleepers: Vec<_> = [&owners[0], &owners[2]]
            .into_iter()
            .map(|d| {
                let (d, flag) = (Arc::clone(d), Arc::clone(&flag));
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    d.wait_until(&mut PollState::new(), || flag.load(Ordering::SeqCst), Some(deadline)).expect("wait")
                })
            })
            .collect();
        while owners[0].waiters() == 0 || owners[2].waiters() == 0 {
            std::thread::yield_now();
        }
        let awake_seq = owners[1].seq();
        flag.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        assert_eq!(ring_after_publish(&waker, &set), 2, "two or more asleep: handed over");
        for s in sleepers {
            assert!(s.join().expect("sleeper"), "woken with the flag set");
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "woken by the ring, not by the timeout");
        let taken = Instant::now() + Duration::from_secs(5);
        while waker.shared.hand.pending.load(Ordering::SeqCst) != 0 {
            assert!(Instant::now() < taken, "the waker thread took the mark");
            std::thread::yield_now();
        }
        assert_eq!(owners[1].seq(), awake_seq, "a process with no sleeping thread is not rung");
        waker.shutdown();
    }

    /// Without the thread (never started), every sleeping doorbell is rung directly.
    #[test]
    fn rings_directly_without_the_thread() {
        let waker = Waker::default();
        let owners: Vec<Box<Doorbell>> = (0..3).map(|_| Box::new(Doorbell::create().expect("doorbell"))).collect();
        let regs: Vec<_> = owners.iter().map(|d| d.register_waiter()).collect();
        let set = waker.watch(Ringers::new(remotes_of(&owners), None));
        assert_eq!(ring_after_publish(&waker, &set), 3);
        for (d, r) in owners.iter().zip(&regs) {
            assert_ne!(d.seq(), r.observed_seq(), "rung");
        }
        assert_eq!(waker.shared.hand.pending.load(Ordering::SeqCst), 0, "nothing handed over");
    }

    /// A publisher whose connections change right after a send handed its doorbells over drops that set, maybe
    /// before the waker thread took it: the set rings its sleepers when it is dropped, so none is left asleep.
    #[test]
    fn a_set_rings_its_sleepers_when_dropped() {
        let waker = Waker::default();
        let owners: Vec<Box<Doorbell>> = (0..2).map(|_| Box::new(Doorbell::create().expect("doorbell"))).collect();
        let regs: Vec<_> = owners.iter().map(|d| d.register_waiter()).collect();
        let set = waker.watch(Ringers::new(remotes_of(&owners), None));
        for (d, r) in owners.iter().zip(&regs) {
            assert_eq!(d.seq(), r.observed_seq(), "not rung yet");
        }
        drop(set);
        for (d, r) in owners.iter().zip(&regs) {
            assert_ne!(d.seq(), r.observed_seq(), "rung when dropped");
        }
    }
}
