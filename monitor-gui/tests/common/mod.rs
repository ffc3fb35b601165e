//! What the window tests share: the scripted network's app after some refreshes, and a test harness around it.

use egui_kittest::Harness;
use shoal_monitor::app::MonitorApp;
use shoal_monitor::fixture::{Fixture, FixtureMessages};

/// The app over the scripted network, refreshed by hand, after `steps` refreshes.
pub(crate) fn app_after(steps: u32) -> MonitorApp {
    let mut app = MonitorApp::manual(Box::new(Fixture::new()), Box::new(FixtureMessages::default()));
    for _ in 0..steps {
        app.refresh_now();
    }
    app
}

/// `app` in a 1400x900 test harness.
pub(crate) fn harness(app: MonitorApp) -> Harness<'static, MonitorApp> {
    Harness::builder().with_size(egui::vec2(1400.0, 900.0)).build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app)
}
