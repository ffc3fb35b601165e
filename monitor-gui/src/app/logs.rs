//! The Logs tab: the log messages of every process (shoal's and eCAL's, [`shoal::logging`]), newest first, filtered
//! by level (that level and above), process, host and text, as `shoal log` filters them.

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::logging::{LogFilter, LogLevel, LogRecord};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::{ROW_H, clock, health_color, stripe, ui_text_color};
use crate::model::Health;

/// Log records the monitor keeps (the oldest go first).
pub const LOGS_KEEP: usize = 10_000;

impl MonitorApp {
    /// Takes the records that arrived (bounded by [`LOGS_KEEP`]).
    pub(super) fn poll_logs(&mut self) {
        let mut fresh = Vec::new();
        self.log_source.poll(&mut fresh);
        if fresh.is_empty() {
            return;
        }
        for r in fresh {
            if self.logs.len() == LOGS_KEEP {
                self.logs.pop_front();
                self.logs_evicted += 1;
            }
            self.logs.push_back(r);
        }
        self.logs_generation += 1;
    }

    /// The kept log records, oldest first.
    pub fn logs(&self) -> impl Iterator<Item = &LogRecord> {
        self.logs.iter()
    }

    pub(super) fn logs_ui(&mut self, ui: &mut egui::Ui) {
        let f = &mut self.state.logs;
        ui.horizontal(|ui| {
            ui.label("Level:");
            if ui.selectable_label(f.min_level.is_none(), "all").clicked() {
                f.min_level = None;
            }
            for l in [LogLevel::Debug1, LogLevel::Info, LogLevel::Warning, LogLevel::Error, LogLevel::Fatal] {
                if ui.selectable_label(f.min_level == Some(l), format!("{l}+")).clicked() {
                    f.min_level = Some(l);
                }
            }
            for (label, field) in [("Process:", &mut f.process), ("Host:", &mut f.host), ("Text:", &mut f.text)] {
                let label = ui.label(label);
                let mut text = field.clone().unwrap_or_default();
                let edit = ui.add(egui::TextEdit::singleline(&mut text).desired_width(120.0)).labelled_by(label.id);
                if edit.changed() {
                    *field = (!text.is_empty()).then_some(text);
                }
            }
        });
        let key = (self.logs_generation, self.state.logs.clone());
        if self.logs_order.0.as_ref() != Some(&key) {
            let filter: &LogFilter = &key.1;
            self.logs_order.1.clear();
            self.logs_order.1.extend((0..self.logs.len()).rev().filter(|&i| filter.matches(&self.logs[i])));
            self.logs_order.0 = Some(key);
        }
        let list = &self.logs_order.1;
        let dropped = self.log_source.dropped() + self.logs_evicted;
        ui.label(format!("{} of {} log records (newest first; {dropped} dropped)", list.len(), self.logs.len()));
        let logs = &self.logs;
        TableBuilder::new(ui)
            .id_salt("logs")
            .resizable(true)
            .column(Column::initial(80.0))
            .column(Column::initial(70.0))
            .column(Column::initial(110.0))
            .column(Column::initial(200.0))
            .column(Column::remainder())
            .header(ROW_H, |mut h| {
                for t in ["Time", "Level", "Host", "Process", "Message"] {
                    h.col(|ui| {
                        ui.strong(t);
                    });
                }
            })
            .body(|body| {
                body.rows(ROW_H, list.len(), |mut row| {
                    let r = &logs[list[row.index()]];
                    let color = match r.level {
                        LogLevel::Error | LogLevel::Fatal => health_color(Health::Error),
                        LogLevel::Warning => health_color(Health::Warning),
                        _ => ui_text_color(),
                    };
                    let index = row.index();
                    row.col(|ui| {
                        stripe(ui, index);
                        ui.label(clock(r.time_us as f64 / 1e6));
                    });
                    row.col(|ui| {
                        ui.label(RichText::new(r.level.name()).color(color));
                    });
                    row.col(|ui| {
                        ui.label(shown(&r.host_name));
                    });
                    row.col(|ui| {
                        let unit = if r.unit_name.is_empty() { &r.process_name } else { &r.unit_name };
                        ui.label(format!("{}:{}", shown(unit), r.process_id));
                    });
                    row.col(|ui| {
                        ui.label(shown(&r.content));
                    });
                });
            });
    }
}
