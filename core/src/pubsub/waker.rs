//! The waker thread: rings subscriber processes' doorbells for this process's publishers when a send finds several
//! of them asleep, so that the cost of `send()` does not grow with the number of sleeping subscriber processes.
//!
//! Waking a sleeping process is one `FUTEX_WAKE` (about 2 µs of the caller's CPU, most of it the kernel's wake-up);
//! ringing N processes from `send()` would cost N of them. Instead, [`ring_after_publish`] wakes a single sleeping
//! process directly (the lowest-latency path, e.g. ping-pong) and, from two on, marks the sleeping doorbells
//! ([`DoorbellRemote::hand_over`]) and rings this thread's [`LocalBell`]: one private wake-up, or none while the
//! thread is still busy with an earlier send. The thread then rings each marked doorbell. The cost moves off the
//! publishing thread; the subscribers' wake-up takes one hop more.
//!
//! Started by the first publisher that serves two or more subscriber processes over the native ring; one per
//! process, whatever the number of publishers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::lock;
use crate::transport::shm_ring::{DoorbellRemote, LocalBell, Ringers};

/// How long the thread sleeps without work before it drops doorbells no publisher uses any more.
const IDLE_REFRESH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    bell: LocalBell,
    stop: AtomicBool,
    /// Set once the thread runs: handing over is pointless before.
    running: AtomicBool,
    /// Every doorbell a publisher of this process may hand over.
    watched: Mutex<Vec<Weak<DoorbellRemote>>>,
    /// Bumped when `watched` changes.
    watched_version: AtomicU64,
}

/// Owner of the waker thread.
#[derive(Default)]
pub(crate) struct Waker {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").field("running", &self.shared.running.load(Ordering::Relaxed)).finish()
    }
}

impl Waker {
    /// Lets the thread ring `bells` (the doorbells of one publisher's subscriber processes), starting it if needed.
    /// Call when a publisher's set of doorbells changes and has two or more (not on the send path).
    pub(crate) fn watch(&self, bells: &[Arc<DoorbellRemote>]) {
        {
            let mut w = lock(&self.shared.watched);
            let before = w.len();
            w.retain(|d| d.strong_count() > 0);
            let mut changed = w.len() != before;
            for b in bells {
                if !w.iter().any(|d| std::ptr::eq(d.as_ptr(), Arc::as_ptr(b))) {
                    w.push(Arc::downgrade(b));
                    changed = true;
                }
            }
            if changed {
                self.shared.watched_version.fetch_add(1, Ordering::Release);
            }
        }
        let mut t = lock(&self.thread);
        if t.is_some() || self.shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let shared = Arc::clone(&self.shared);
        match std::thread::Builder::new().name("shoal-waker".into()).spawn(move || run(&shared)) {
            Ok(h) => {
                *t = Some(h);
                self.shared.running.store(true, Ordering::SeqCst);
            }
            Err(e) => tracing::warn!("cannot start the shoal waker thread, publishers ring every subscriber: {e}"),
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.running.store(false, Ordering::SeqCst);
        self.shared.bell.ring();
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
/// the doorbells rung already (or the receivers polling) and makes no second wake-up. Returns how many were asleep.
pub(crate) fn ring_before_copy(waker: &Waker, ringers: &Ringers) -> usize {
    // The same protocol: the "being written" mark is the store the waiter checks are ordered after.
    ring_after_publish(waker, ringers)
}

/// Rings the doorbells of `ringers` whose process sleeps, after the caller published (and before it returns to the
/// user): one sleeping process directly, two or more through the waker thread. Returns how many were asleep.
#[inline]
pub(crate) fn ring_after_publish(waker: &Waker, ringers: &Ringers) -> usize {
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
fn ring_sleepers(waker: &Waker, ringers: &Ringers) -> usize {
    let bells = ringers.bells();
    // StoreLoad between the publish and the waiter checks (see the doorbell protocol).
    fence(Ordering::SeqCst);
    let delegate = bells.len() > 1 && waker.shared.running.load(Ordering::Relaxed);
    let mut first: Option<&DoorbellRemote> = None;
    let mut asleep = 0;
    for b in bells.iter().filter(|b| b.needs_wake()) {
        asleep += 1;
        if !delegate {
            let _ = b.wake();
            continue;
        }
        match first {
            None => first = Some(b),
            Some(f) => {
                if asleep == 2 {
                    f.hand_over();
                }
                b.hand_over();
            }
        }
    }
    match (asleep, first) {
        (1, Some(f)) => {
            let _ = f.wake();
        }
        // The marks are stored before `ring`'s fence: either the thread sees them in its re-check or `ring` sees it
        // registered and wakes it.
        (2.., Some(_)) => {
            waker.shared.bell.ring();
        }
        _ => {}
    }
    asleep
}

fn run(shared: &Shared) {
    let mut version = u64::MAX;
    let mut bells: Vec<Arc<DoorbellRemote>> = Vec::new();
    let mut idle = false;
    loop {
        let v = shared.watched_version.load(Ordering::Acquire);
        if v != version || idle {
            let mut w = lock(&shared.watched);
            w.retain(|d| d.strong_count() > 0);
            bells = w.iter().filter_map(Weak::upgrade).collect();
            version = v;
        }
        let mut rang = false;
        for b in &bells {
            // Taking the mark (AcqRel) makes the publisher's data visible here before the waiter check.
            if b.take_handed_over() {
                b.ring();
                rang = true;
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if rang {
            idle = false;
            continue;
        }
        let waiter = shared.bell.register_waiter();
        if shared.stop.load(Ordering::SeqCst)
            || shared.watched_version.load(Ordering::Acquire) != version
            || bells.iter().any(|b| b.is_handed_over())
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
            bells.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shm_ring::{Doorbell, PollState};
    use std::time::Instant;

    /// Two doorbells with a sleeping thread each: one ring from the publishing thread wakes both through the waker
    /// thread; the marks are cleared afterwards.
    #[test]
    fn hands_two_sleeping_doorbells_to_the_thread() {
        let waker = Waker::default();
        let owners: Vec<Arc<Doorbell>> = (0..2).map(|_| Arc::new(Doorbell::create().expect("doorbell"))).collect();
        let remotes: Vec<Arc<DoorbellRemote>> =
            owners.iter().map(|d| Arc::new(DoorbellRemote::open(d.name()).expect("open"))).collect();
        waker.watch(&remotes);
        assert!(waker.shared.running.load(Ordering::SeqCst));
        let flag = Arc::new(AtomicBool::new(false));
        let sleepers: Vec<_> = owners
            .iter()
            .map(|d| {
                let (d, flag) = (Arc::clone(d), Arc::clone(&flag));
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    d.wait_until(&mut PollState::new(), || flag.load(Ordering::SeqCst), Some(deadline)).expect("wait")
                })
            })
            .collect();
        while owners.iter().any(|d| d.waiters() == 0) {
            std::thread::yield_now();
        }
        flag.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        assert_eq!(ring_after_publish(&waker, &Ringers::new(remotes.clone(), None)), 2);
        for s in sleepers {
            assert!(s.join().expect("sleeper"), "woken with the flag set");
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "woken by the ring, not by the timeout");
        let cleared = Instant::now() + Duration::from_secs(5);
        while remotes.iter().any(|r| r.is_handed_over()) {
            assert!(Instant::now() < cleared, "the waker thread took the marks");
            std::thread::yield_now();
        }
        waker.shutdown();
    }

    /// Without the thread (never started), every sleeping doorbell is rung directly.
    #[test]
    fn rings_directly_without_the_thread() {
        let waker = Waker::default();
        let owners: Vec<Doorbell> = (0..3).map(|_| Doorbell::create().expect("doorbell")).collect();
        let remotes: Vec<Arc<DoorbellRemote>> =
            owners.iter().map(|d| Arc::new(DoorbellRemote::open(d.name()).expect("open"))).collect();
        let regs: Vec<_> = owners.iter().map(Doorbell::register_waiter).collect();
        assert_eq!(ring_after_publish(&waker, &Ringers::new(remotes.clone(), None)), 3);
        for (d, r) in owners.iter().zip(&regs) {
            assert_ne!(d.seq(), r.observed_seq(), "rung");
        }
        assert!(remotes.iter().all(|r| !r.is_handed_over()));
    }
}
