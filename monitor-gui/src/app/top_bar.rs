//! The top bar: tabs, filter, Export… (its row in `export.rs`), freeze and scroll-back (an opened saved snapshot's
//! banner instead), and the counts of the shown view.

use super::widgets::clock;
use super::{MonitorApp, Tab};
use crate::model::View;

impl MonitorApp {
    pub(super) fn top_bar(&mut self, ui: &mut egui::Ui, view: Option<&View>) {
        ui.horizontal(|ui| {
            ui.strong("shoal monitor");
            ui.separator();
            for tab in Tab::ALL {
                if ui.selectable_label(self.state.tab == tab, tab.title()).clicked() {
                    self.state.tab = tab;
                    // Follows the inspected topic from now on, or no longer.
                    self.poll_messages();
                }
            }
            ui.separator();
            let label = ui.label("Filter:");
            ui.add(
                egui::TextEdit::singleline(&mut self.state.filter)
                    .hint_text("topic, type, process, service")
                    .desired_width(160.0),
            )
            .labelled_by(label.id);
            ui.checkbox(&mut self.state.problems_only, "Problems only");
            ui.separator();
            if ui.selectable_label(self.export.open, "Export…").clicked() {
                self.toggle_export_row();
            }
        });
        if self.export.open {
            self.export_row(ui);
        }
        ui.horizontal(|ui| {
            if let Some(banner) = &self.opened {
                // A saved snapshot: nothing is live, there is nothing to freeze.
                ui.colored_label(ui.visuals().warn_fg_color, banner);
            } else {
                self.freeze_controls(ui, view);
            }
            if let Some(v) = view {
                ui.separator();
                ui.label(format!(
                    "{} hosts · {} processes · {} topics · {} services · {} with problems · {}",
                    v.hosts.len(),
                    v.processes.len(),
                    v.topics.len(),
                    v.services.len(),
                    v.problem_count(),
                    clock(v.time_s)
                ));
            }
        });
    }

    fn freeze_controls(&mut self, ui: &mut egui::Ui, view: Option<&View>) {
        let live = self.state.frozen_at.is_none();
        if ui.selectable_label(!live, if live { "Freeze" } else { "Frozen (click for live)" }).clicked() {
            self.state.frozen_at = if live { view.map(|v| v.time_s) } else { None };
        }
        if let (Some(t), Some(first), Some(last)) =
            (self.state.frozen_at, self.history.views().next(), self.history.latest())
        {
            let (lo, hi) = (first.time_s - last.time_s, 0.0);
            let mut rel = t - last.time_s;
            let slider = egui::Slider::new(&mut rel, lo..=hi).text("s (scroll back)").fixed_decimals(0);
            if ui.add(slider).changed() {
                self.state.frozen_at = Some(last.time_s + rel);
            }
        }
    }
}
