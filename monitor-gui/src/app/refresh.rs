//! The refresh: snapshots taken, turned into [`View`]s and diffed for events, on the UI thread
//! ([`MonitorApp::refresh_now`], a manual app) or on a thread of their own ([`MonitorApp::start_refresh_thread`]).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{MonitorApp, Tab};
use crate::history::{Event, events_since};
use crate::model::{View, build_view};
use shoal::monitor::Snapshot;

/// Without changes, the window is still redrawn this often (the clock, the registration ages and the plots' time
/// axis catch up).
pub const IDLE_REPAINT: Duration = Duration::from_secs(30);

/// Views the refresh thread hands over before the UI takes them; when full it wakes the UI and waits.
pub const FEED_CAPACITY: usize = 64;

/// A view and the events found between it and the view before, from the refresh thread.
pub(super) struct Update {
    view: Arc<View>,
    events: Vec<Event>,
    /// The snapshot the view was built from (Export… saves the newest two).
    snapshot: Arc<Snapshot>,
}

impl MonitorApp {
    /// Takes one snapshot now and polls the inspected and the plotted topics (nothing once the refresh thread runs).
    pub fn refresh_now(&mut self) {
        let Some(source) = self.snapshots.as_mut() else { return };
        let snap = Arc::new(source.snapshot());
        let view = build_view(&snap, self.history.latest().map(|v| &**v), &mut self.interner);
        self.history.push(view);
        self.keep_snapshot(snap);
        self.refreshes += 1;
        if self.refreshes.is_multiple_of(64) {
            self.interner.shrink();
        }
        self.poll_messages();
    }

    /// Moves snapshots, building views and diffing them for events off the UI thread: a thread takes a snapshot
    /// every refresh, builds its view, finds its events and hands both over; the UI only adds finished views.
    /// It calls `wake` (the window's repaint request) when a view differs from the one before
    /// ([`View::same_content`]) or brings events, and otherwise only every [`IDLE_REPAINT`] (so the clock and the
    /// plots catch up), or when [`FEED_CAPACITY`] views wait: a network where nothing changes is not redrawn every
    /// refresh. Dropping the app stops the thread and waits for it.
    pub fn start_refresh_thread(&mut self, wake: impl Fn() + Send + 'static) -> std::io::Result<()> {
        let Some(mut source) = self.snapshots.take() else { return Ok(()) };
        let mut interner = std::mem::take(&mut self.interner);
        let mut prev = self.history.latest().cloned();
        let refresh = self.refresh;
        let (tx, rx) = mpsc::sync_channel::<Update>(FEED_CAPACITY);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("shoal-monitor-refresh".into()).spawn(move || {
            let mut next = Instant::now() + refresh;
            let mut last_wake = Instant::now();
            for n in 1u64.. {
                // Sleeps in steps of at most 50 ms, so that dropping the app stops the thread soon.
                while let Some(wait) = next.checked_duration_since(Instant::now()) {
                    if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(wait.min(Duration::from_millis(50)));
                }
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                next += refresh;
                let snapshot = Arc::new(source.snapshot());
                let view = Arc::new(build_view(&snapshot, prev.as_deref(), &mut interner));
                let events = events_since(prev.as_deref(), &view);
                let changed = !events.is_empty() || prev.as_ref().is_none_or(|p| !p.same_content(&view));
                match tx.try_send(Update { view: view.clone(), events, snapshot }) {
                    Ok(()) => {}
                    Err(mpsc::TrySendError::Full(u)) => {
                        // The UI has not drawn for FEED_CAPACITY refreshes: let it take them.
                        wake();
                        last_wake = Instant::now();
                        if tx.send(u).is_err() {
                            return;
                        }
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => return,
                }
                if changed || last_wake.elapsed() >= IDLE_REPAINT {
                    wake();
                    last_wake = Instant::now();
                }
                prev = Some(view);
                if n.is_multiple_of(64) {
                    interner.shrink();
                }
            }
        })?;
        self.feed = Some(rx);
        self.refresh_thread = Some((stop, thread));
        Ok(())
    }

    /// Keeps `snap`, the newest view's snapshot, and the one before it.
    fn keep_snapshot(&mut self, snap: Arc<Snapshot>) {
        self.last_snapshots = (self.last_snapshots.1.take(), Some(snap));
    }

    /// Brings the history up to date before a frame: takes the views the refresh thread handed over, or takes a
    /// snapshot when one is due (an app without the thread), polls the inspected and the plotted topics, and asks
    /// for the next frame when one will be needed.
    pub(super) fn catch_up(&mut self, ctx: &egui::Context) {
        self.poll_logs();
        if matches!(self.state.tab, Tab::Logs) {
            // Log records do not wake the window: look again every refresh while they are shown.
            ctx.request_repaint_after(self.refresh);
        }
        if let Some(feed) = &self.feed {
            let mut got = false;
            while let Ok(u) = feed.try_recv() {
                self.history.push_diffed(u.view, u.events);
                self.last_snapshots = (self.last_snapshots.1.take(), Some(u.snapshot));
                got = true;
            }
            let inspecting = matches!(self.state.tab, Tab::Inspector) && !self.inspector.paused;
            // Plotted fields are taken on every tab: the window is woken every refresh while there are any.
            let plotting = !self.signals.is_empty();
            if got || inspecting || plotting {
                self.poll_messages();
            }
            if inspecting || plotting {
                ctx.request_repaint_after(self.refresh);
            }
        } else if self.auto_refresh {
            let now = Instant::now();
            let due = self.last_refresh.is_none_or(|t| now.duration_since(t) >= self.refresh);
            if due {
                self.last_refresh = Some(now);
                self.refresh_now();
            } else if (matches!(self.state.tab, Tab::Inspector) && !self.inspector.paused) || !self.signals.is_empty() {
                self.poll_messages();
            }
            let next = self.last_refresh.map_or(Duration::ZERO, |t| self.refresh.saturating_sub(t.elapsed()));
            ctx.request_repaint_after(next);
        }
    }
}
