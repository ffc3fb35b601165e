//! Save and share: the top bar's **Export…** row writes what the monitor knows now as a saved snapshot (JSON,
//! [`crate::saved`]) and a PNG of the window beside it (the same stem); [`MonitorApp::opened`] shows such a file
//! again, frozen, with a banner that says it is not live.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::MonitorApp;
use crate::saved::{SavedSnapshot, default_file_name, png_bytes};
use crate::source::{NoMessages, ScriptedLogs};

/// The Export… row's state.
#[derive(Debug, Default)]
pub(super) struct ExportState {
    /// The row is shown.
    pub(super) open: bool,
    /// The file the user typed (empty: a name with the snapshot's time, in the current directory).
    pub(super) path: String,
    /// That name, fixed by the first Save JSON or Screenshot without a typed path, so that the JSON and the PNG
    /// share a stem; forgotten when the row closes.
    pub(super) named: Option<String>,
    /// What the last export or screenshot did, one line (true: an error).
    pub(super) status: Arc<Mutex<Option<(bool, String)>>>,
}

impl ExportState {
    fn set_status(&self, error: bool, text: String) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = Some((error, text));
    }
}

impl MonitorApp {
    /// An app that shows the saved snapshot `saved` (read from `path`), frozen: its views, events and log
    /// records, and the banner [`SavedSnapshot::banner`]. It takes no snapshot and starts no node.
    pub fn opened(saved: &SavedSnapshot, path: &Path) -> MonitorApp {
        let mut app = MonitorApp::manual(Box::new(NoSnapshots), Box::new(NoMessages));
        app.snapshots = None;
        let (before, view) = saved.views();
        match before {
            Some(b) => {
                app.history.push_diffed(b, saved.events.clone());
                app.history.push_diffed(view, Vec::new());
            }
            None => app.history.push_diffed(view, saved.events.clone()),
        }
        app.last_snapshots = (saved.before.clone().map(Arc::new), Some(Arc::new(saved.snapshot.clone())));
        let logs = ScriptedLogs::default();
        logs.0.lock().unwrap_or_else(|e| e.into_inner()).extend(saved.logs.iter().cloned());
        app.log_source = Box::new(logs);
        app.opened = Some(saved.banner(path));
        app
    }

    /// The banner of an app made by [`MonitorApp::opened`].
    pub fn opened_banner(&self) -> Option<&str> {
        self.opened.as_deref()
    }

    /// What the monitor knows now as a saved snapshot: the newest snapshot and the one before, the kept events,
    /// views and log records. `None` before the first snapshot.
    pub fn saved_snapshot(&self) -> Option<SavedSnapshot> {
        let snap = self.last_snapshots.1.as_deref()?;
        let before = self.last_snapshots.0.as_deref().cloned();
        Some(SavedSnapshot::new(snap.clone(), before, &self.history, self.logs.iter()))
    }

    /// The JSON file Export… writes: the path typed, or a name with the newest view's time in the current
    /// directory (the one the row's first Save JSON or Screenshot used, while the row stays open); a `.json`
    /// extension when it has none.
    pub fn export_path(&self) -> PathBuf {
        let typed = self.export.path.trim();
        let mut p = if typed.is_empty() {
            PathBuf::from(
                self.export
                    .named
                    .clone()
                    .unwrap_or_else(|| default_file_name(self.history.latest().map_or(0.0, |v| v.time_s))),
            )
        } else {
            PathBuf::from(typed)
        };
        if p.extension().is_none() {
            p.set_extension("json");
        }
        p
    }

    /// Writes the saved snapshot to [`MonitorApp::export_path`] and says where (or why not) in the row.
    pub fn export_json(&mut self) {
        let path = self.fix_export_name();
        let Some(saved) = self.saved_snapshot() else {
            self.export.set_status(true, "Nothing to export yet: wait for the first snapshot".into());
            return;
        };
        match saved.save(&path) {
            Ok(()) => self.export.set_status(false, format!("Wrote {}", shown_path(&path))),
            Err(e) => self.export.set_status(true, e.to_string()),
        }
    }

    /// Asks for a screenshot of the window; when the next frame is painted it is written as a PNG beside the JSON
    /// file (the same stem) and the row says where.
    fn request_screenshot(&mut self, ctx: &egui::Context) {
        let path = self.fix_export_name().with_extension("png");
        let status = Arc::clone(&self.export.status);
        let repaint = ctx.clone();
        self.export.set_status(false, "Taking the screenshot…".into());
        ctx.request_screenshot(move |image| {
            let result =
                png_bytes(&image).map_err(|e| format!("cannot encode the screenshot: {e}")).and_then(|bytes| {
                    std::fs::write(&path, bytes).map_err(|e| {
                        format!("cannot write {}: {e} (choose a path in a writable directory)", shown_path(&path))
                    })
                });
            let line = match result {
                Ok(()) => (false, format!("Wrote {}", shown_path(&path))),
                Err(e) => (true, e),
            };
            *status.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
            repaint.request_repaint();
        });
    }

    /// [`MonitorApp::export_path`], its name fixed for the row's next Save JSON and Screenshot when none is typed.
    fn fix_export_name(&mut self) -> PathBuf {
        let path = self.export_path();
        if self.export.path.trim().is_empty() && self.export.named.is_none() {
            self.export.named = Some(path.display().to_string());
        }
        path
    }

    /// Opens or closes the Export… row (closing forgets the name a Save JSON or Screenshot fixed).
    pub(super) fn toggle_export_row(&mut self) {
        self.export.open = !self.export.open;
        if !self.export.open {
            self.export.named = None;
        }
    }

    /// The Export… row: the file, Save JSON, Screenshot, and what the last one did.
    pub(super) fn export_row(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("Export to:");
            let hint = self.export_path().display().to_string();
            ui.add(egui::TextEdit::singleline(&mut self.export.path).hint_text(hint).desired_width(320.0))
                .labelled_by(label.id);
            if ui.button("Save JSON").clicked() {
                self.export_json();
            }
            if ui.button("Screenshot").clicked() {
                self.request_screenshot(ui.ctx());
            }
            let status = self.export.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some((error, text)) = status {
                if error {
                    ui.colored_label(ui.visuals().error_fg_color, text);
                } else {
                    ui.label(text);
                }
            }
        });
    }
}

/// `path` made absolute when it can be (the current directory is where a bare name lands), escaped for display.
fn shown_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    shoal::monitor::printable(&abs.display().to_string()).into_owned()
}

/// The snapshot source of an opened file's app, which never refreshes.
struct NoSnapshots;

impl crate::source::SnapshotSource for NoSnapshots {
    fn snapshot(&mut self) -> shoal::monitor::Snapshot {
        shoal::monitor::Snapshot::default()
    }
}
