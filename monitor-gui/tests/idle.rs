//! The window is not redrawn when nothing changes: the refresh thread wakes it only for a view that differs from
//! the one before (or brings events), and a still network (`Fixture::hold_still_after`) gives none. The views
//! still reach the history, with the events the thread found, when the window next draws.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use egui_kittest::Harness;
use shoal_monitor::app::MonitorApp;
use shoal_monitor::fixture::{Fixture, FixtureMessages};
use shoal_monitor::model::{Interner, build_view};

const REFRESH: Duration = Duration::from_millis(50);

/// An app on `fixture` with `prefill` views, its refresh thread started; returns it and the count of wakes.
fn threaded(fixture: Fixture, prefill: u32) -> (MonitorApp, Arc<AtomicUsize>) {
    let mut app = MonitorApp::new(Box::new(fixture), Box::new(FixtureMessages::default()), REFRESH);
    for _ in 0..prefill {
        app.refresh_now();
    }
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    app.start_refresh_thread(move || {
        w.fetch_add(1, Ordering::Relaxed);
    })
    .expect("refresh thread");
    (app, wakes)
}

/// Waits until the app's thread took at least `n` more snapshots (the fixture's steps are not visible from here,
/// so: until that many refresh periods passed, and then some).
fn wait_refreshes(n: u32) {
    std::thread::sleep(REFRESH * (n + 2));
}

#[test]
fn a_still_network_does_not_wake_the_window() {
    let mut f = Fixture::with_scale(50, 10);
    f.hold_still_after(3);
    let (app, wakes) = threaded(f, 3);
    wait_refreshes(10);
    // One wake: the first still view no longer shows the camera's "drops rising" (its drops stopped growing);
    // none after.
    assert_eq!(
        wakes.load(Ordering::Relaxed),
        1,
        "nothing changed after the first still view, yet the window was woken"
    );
    // The views arrived all the same: the next frame takes them.
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 800.0))
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.run();
    assert!(h.state().history().len() >= 3 + 5, "views held in the feed: {}", h.state().history().len());
    let delay = h.output().viewport_output[&egui::ViewportId::ROOT].repaint_delay;
    assert_eq!(delay, Duration::MAX, "settled, the window asks for no repaint of its own");
}

#[test]
fn a_changing_network_wakes_the_window_each_refresh_and_its_events_arrive() {
    let (app, wakes) = threaded(Fixture::new(), 1);
    wait_refreshes(10);
    let n = wakes.load(Ordering::Relaxed);
    assert!(n >= 4, "the fixture changes every step, but the window was woken {n} times in 12 refreshes");
    let mut h = Harness::builder()
        .with_size(egui::vec2(1200.0, 800.0))
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.run();
    // The camera loses frames from step 3 on: the thread's diff found drops.
    let drops = h.state().history().events().iter().filter(|e| &*e.subject == "/camera").count();
    assert!(drops > 0, "the thread's events reached the history");
}

#[test]
fn held_still_the_views_have_the_same_content_and_live_they_do_not() {
    let mut interner = Interner::default();
    let mut still = Fixture::with_scale(20, 5);
    still.hold_still_after(2);
    let views: Vec<_> = (0..4).map(|_| build_view(&still.next_snapshot(), None, &mut interner)).collect();
    assert!(!views[0].same_content(&views[1]), "the first two steps are live");
    assert!(views[1].same_content(&views[2]) && views[2].same_content(&views[3]), "from step 2 on: still");
    assert!(views[3].time_s > views[2].time_s, "the time goes on");
    let mut live = Fixture::with_scale(20, 5);
    let a = build_view(&live.next_snapshot(), None, &mut interner);
    let b = build_view(&live.next_snapshot(), None, &mut interner);
    assert!(!a.same_content(&b));
}
