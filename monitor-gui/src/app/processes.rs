//! The process table (on the Overview): one row per process, in the filter's order, coloured by health.

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::{ROW_H, health_color, stripe, text_cells};
use crate::model::View;

impl MonitorApp {
    /// The processes that pass the filter, over about a third of the height left.
    pub(super) fn process_table(&self, ui: &mut egui::Ui, view: &View) {
        let avail = ui.available_height();
        let proc_h = (avail * 0.35).max(4.0 * ROW_H);
        ui.push_id("processes", |ui| {
            ui.set_max_height(proc_h);
            TableBuilder::new(ui)
                .id_salt("processes")
                .resizable(true)
                .max_scroll_height(proc_h - ROW_H)
                .column(Column::initial(90.0))
                .column(Column::initial(60.0))
                .column(Column::initial(190.0))
                .column(Column::initial(120.0))
                .column(Column::initial(50.0))
                .column(Column::initial(220.0))
                .column(Column::initial(70.0))
                .column(Column::initial(90.0))
                .column(Column::remainder())
                .header(ROW_H, |mut h| {
                    for t in
                        ["Host", "PID", "Unit", "Executable", "Kind", "Version", "Reg. age", "Kernel drops", "State"]
                    {
                        h.col(|ui| {
                            ui.strong(t);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, self.order.processes.len(), |mut row| {
                        let p = &view.processes[self.order.processes[row.index()]];
                        let color = health_color(p.problems.health());
                        let mut state = shown(&p.state).into_owned();
                        if !p.problems.is_empty() {
                            state.push_str(&format!(" — {}", p.problems.text()));
                        }
                        let unit = if p.is_self {
                            format!("{} (this monitor)", shown(&p.unit))
                        } else {
                            shown(&p.unit).into_owned()
                        };
                        let index = row.index();
                        row.col(|ui| {
                            stripe(ui, index);
                            ui.label(RichText::new(shown(&p.host)).color(color));
                        });
                        text_cells(
                            &mut row,
                            color,
                            [
                                p.pid.to_string(),
                                unit,
                                shown(&p.name).into_owned(),
                                p.kind.to_owned(),
                                shown(&p.version).into_owned(),
                                format!("{:.1} s", p.registration_age_s),
                                p.kernel_drops.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                                state,
                            ],
                        );
                    });
                });
        });
    }
}
