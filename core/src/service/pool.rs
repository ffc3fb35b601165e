//! The handler threads: a fixed number of threads (`[shoal_service] handler_threads`), started with the first server
//! of the process, taking jobs from a queue bounded by `max_pending`. A job that does not fit is handed back to the
//! caller (who answers the request as failed: the server is busy).

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};

use crate::sync::lock;

/// Work for a handler thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Pool {
    threads: usize,
    max_pending: usize,
    tx: OnceLock<SyncSender<Job>>,
}

impl Pool {
    pub(crate) fn new(threads: usize, max_pending: usize) -> Pool {
        Pool { threads: threads.max(1), max_pending: max_pending.max(1), tx: OnceLock::new() }
    }

    /// Queues `job`; gives it back when `max_pending` jobs wait (or no thread could be started).
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let Some(tx) = self.sender() else { return Err(job) };
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(job),
        }
    }

    fn sender(&self) -> Option<&SyncSender<Job>> {
        if let Some(tx) = self.tx.get() {
            return Some(tx);
        }
        let (tx, rx) = sync_channel::<Job>(self.max_pending);
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..self.threads {
            let rx = Arc::clone(&rx);
            match std::thread::Builder::new().name(format!("shoal-svc-{i}")).spawn(move || run(&rx)) {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!("cannot start service handler thread {i}: {e}"),
            }
        }
        if started == 0 {
            return None;
        }
        // Another thread may have won the race: its sender is used, this one's threads end with its channel.
        let _ = self.tx.set(tx);
        self.tx.get()
    }
}

/// A handler thread: runs jobs until every sender is gone (the process's runtime ended).
fn run(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = lock(rx).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn jobs_run_on_the_pool_and_a_full_queue_hands_the_job_back() {
        let pool = Pool::new(1, 1);
        let (gate_tx, gate_rx) = channel::<()>();
        let (done_tx, done_rx) = channel::<u32>();
        // The one thread blocks in the first job; the second waits in the queue; the third does not fit.
        let d = done_tx.clone();
        assert!(
            pool.submit(Box::new(move || {
                gate_rx.recv().unwrap();
                d.send(1).unwrap();
            }))
            .is_ok()
        );
        // Wait until the thread has taken the first job, so the queue is empty.
        let mut queued = 0;
        let mut refused = 0;
        for n in 2..20 {
            let d = done_tx.clone();
            match pool.submit(Box::new(move || d.send(n).unwrap())) {
                Ok(()) => queued += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(queued <= 2 && refused >= 16, "queued {queued}, refused {refused}");
        gate_tx.send(()).unwrap();
        let mut got = vec![done_rx.recv().unwrap()];
        for _ in 0..queued {
            got.push(done_rx.recv().unwrap());
        }
        assert_eq!(got[0], 1);
    }
}
