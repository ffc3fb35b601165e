//! The handler threads: a fixed number of threads (`[shoal_service] handler_threads`), started with the first server
//! of the process, taking jobs from a queue bounded by `max_pending`. A job that does not fit is handed back to the
//! caller (who answers the request as failed: the server is busy). Idle threads wait on a condition variable, and a
//! job wakes one of them (a thread blocked in a channel's `recv` behind a shared mutex would wake a second one each
//! time, to take its turn at the mutex).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::sync::lock;

/// Work for a handler thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Pool {
    threads: usize,
    max_pending: usize,
    shared: OnceLock<Arc<Shared>>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled for each job queued, and for all when the pool is dropped.
    ready: Condvar,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

struct Queue {
    jobs: VecDeque<Job>,
    /// The pool is gone: the threads end once the queue is empty.
    closed: bool,
}

impl Pool {
    pub(crate) fn new(threads: usize, max_pending: usize) -> Pool {
        Pool { threads: threads.max(1), max_pending: max_pending.max(1), shared: OnceLock::new() }
    }

    /// Queues `job`; gives it back when `max_pending` jobs wait (or no thread could be started).
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let Some(shared) = self.started() else { return Err(job) };
        {
            let mut q = lock(&shared.queue);
            if q.jobs.len() >= self.max_pending {
                return Err(job);
            }
            q.jobs.push_back(job);
        }
        shared.ready.notify_one();
        Ok(())
    }

    /// The queue, its threads started on first use.
    fn started(&self) -> Option<&Arc<Shared>> {
        if let Some(s) = self.shared.get() {
            return Some(s);
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { jobs: VecDeque::new(), closed: false }),
            ready: Condvar::new(),
        });
        let mut started = 0;
        for i in 0..self.threads {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new().name(format!("shoal-svc-{i}")).spawn(move || run(&s)) {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!("cannot start service handler thread {i}: {e}"),
            }
        }
        if started == 0 {
            return None;
        }
        // Another thread may have won the race: its queue is used, and this one's threads end at once.
        if let Err(mine) = self.shared.set(shared) {
            close(&mine);
        }
        self.shared.get()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(s) = self.shared.get() {
            close(s);
        }
    }
}

/// Lets the threads of `shared` end once its queue is empty.
fn close(shared: &Shared) {
    lock(&shared.queue).closed = true;
    shared.ready.notify_all();
}

/// A handler thread: runs jobs until the pool is gone and its queue empty (the process's runtime ended).
fn run(shared: &Shared) {
    let mut q = lock(&shared.queue);
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            job();
            q = lock(&shared.queue);
        } else if q.closed {
            return;
        } else {
            q = shared.ready.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
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

    #[test]
    fn every_job_runs_on_some_thread_and_the_threads_end_with_the_pool() {
        let pool = Pool::new(3, 1000);
        let (tx, rx) = channel::<std::thread::ThreadId>();
        for _ in 0..300 {
            let tx = tx.clone();
            assert!(pool.submit(Box::new(move || tx.send(std::thread::current().id()).unwrap())).is_ok());
        }
        let ids: std::collections::HashSet<_> = (0..300).map(|_| rx.recv().unwrap()).collect();
        assert!((1..=3).contains(&ids.len()), "{ids:?}");
        // A job still queued when the pool goes runs; then the threads end (their queue's last owners).
        let shared = Arc::clone(pool.shared.get().unwrap());
        let (gate_tx, gate_rx) = channel::<()>();
        assert!(pool.submit(Box::new(move || gate_rx.recv().unwrap())).is_ok());
        drop(tx);
        drop(pool);
        gate_tx.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&shared) > 1 {
            assert!(std::time::Instant::now() < deadline, "the handler threads did not end");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
