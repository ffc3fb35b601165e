//! The doorbell thread: runs the callbacks of callback subscribers when this process's doorbell rings.
//!
//! One thread per process, started with the first callback subscriber, whatever the number of topics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::pubsub::runtime::Runtime;
use crate::pubsub::subscriber::{SubShared, WritePoll};
use crate::sync::lock;
use crate::transport::shm_ring::{Doorbell, PollState};

#[derive(Default)]
struct Inner {
    subs: Vec<Weak<SubShared>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    cond: Condvar,
    stop: AtomicBool,
}

/// Owner of the doorbell thread.
#[derive(Default)]
pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher").finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// Adds a callback subscriber, starting the thread if it is the first one.
    pub(crate) fn add(&self, rt: &Runtime, sub: &Arc<SubShared>) {
        let mut inner = lock(&self.shared.inner);
        inner.subs.push(Arc::downgrade(sub));
        if inner.thread.is_none() {
            let shared = Arc::clone(&self.shared);
            let doorbell = Arc::clone(&rt.doorbell);
            match std::thread::Builder::new().name("shoal-doorbell".into()).spawn(move || run(&shared, &doorbell)) {
                Ok(t) => inner.thread = Some(t),
                Err(e) => tracing::error!("cannot start the shoal doorbell thread, callbacks will not run: {e}"),
            }
        }
        drop(inner);
        self.shared.cond.notify_all();
        // A sample may already be waiting.
        rt.self_ringer.ring();
    }

    /// Stops the thread and waits for it.
    pub(crate) fn shutdown(&self, rt: &Runtime) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cond.notify_all();
        rt.self_ringer.ring();
        let t = lock(&self.shared.inner).thread.take();
        if let Some(t) = t
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, doorbell: &Doorbell) {
    let mut poll = PollState::new();
    // Polls through a publisher's write in progress as a blocking receive does; reset by every delivery.
    let mut write_poll = WritePoll::default();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let subs: Vec<Arc<SubShared>> = {
            let mut inner = lock(&shared.inner);
            inner.subs.retain(|w| w.strong_count() > 0);
            if inner.subs.is_empty() {
                let _ = shared.cond.wait_timeout(inner, Duration::from_millis(200));
                continue;
            }
            inner.subs.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        for s in &subs {
            any |= s.dispatch();
        }
        if any {
            write_poll = WritePoll::default();
        } else {
            let now = Instant::now();
            let poll_writes = write_poll.polls(now);
            let saw_write = std::cell::Cell::new(false);
            let until = now + Duration::from_millis(100);
            let ready = || shared.stop.load(Ordering::SeqCst) || subs.iter().any(|s| s.ready(poll_writes, &saw_write));
            if let Err(e) = doorbell.wait_until(&mut poll, ready, Some(until)) {
                tracing::warn!("doorbell wait failed, polling instead: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
            write_poll.waited(saw_write.get(), poll_writes);
        }
    }
}
