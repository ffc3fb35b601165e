//! The Events tab: what happened (topics and processes that came and went, problems that began and ended), newest
//! first.

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::{ROW_H, STALE_TEXT, clock, contains_ci, health_color, stripe, ui_text_color};
use crate::history::{EventKind, ProcessRef};
use crate::model::Health;

/// What the Events table's rows depend on.
#[derive(Debug, PartialEq)]
pub(super) struct EventsKey {
    generation: u64,
    filter: String,
    kind: Option<EventKind>,
    problems_only: bool,
    until: f64,
}

impl MonitorApp {
    pub(super) fn events(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.label("Kind:");
            if ui.selectable_label(self.state.event_kind.is_none(), "all").clicked() {
                self.state.event_kind = None;
            }
            for k in EventKind::ALL {
                if ui.selectable_label(self.state.event_kind == Some(k), k.label()).clicked() {
                    self.state.event_kind = Some(k);
                }
            }
        });
        let key = EventsKey {
            generation: self.history.generation(),
            filter: self.state.filter.to_lowercase(),
            kind: self.state.event_kind,
            problems_only: self.state.problems_only,
            until: self.state.frozen_at.unwrap_or(f64::INFINITY),
        };
        if self.events_order.0.as_ref() != Some(&key) {
            let f = key.filter.as_str();
            let events = self.history.events();
            self.events_order.1.clear();
            self.events_order.1.extend((0..events.len()).rev().filter(|&i| {
                let e = &events[i];
                e.time_s <= key.until + 1e-6
                    && key.kind.is_none_or(|k| e.kind == k)
                    && (!key.problems_only || e.kind.is_problem())
                    && (f.is_empty() || contains_ci(&e.subject, f) || contains_ci(&e.detail, f))
            }));
            self.events_order.0 = Some(key);
        }
        let events = self.history.events();
        let list = &self.events_order.1;
        ui.label(format!("{} events (newest first)", list.len()));
        let mut open_logs: Option<ProcessRef> = None;
        TableBuilder::new(ui)
            .id_salt("events")
            .resizable(true)
            .column(Column::initial(80.0))
            .column(Column::initial(110.0))
            .column(Column::initial(200.0))
            .column(Column::initial(90.0))
            .column(Column::remainder())
            .header(ROW_H, |mut h| {
                for t in ["Time", "Event", "Subject", "Process", "Detail"] {
                    h.col(|ui| {
                        ui.strong(t);
                    });
                }
            })
            .body(|body| {
                body.rows(ROW_H, list.len(), |mut row| {
                    let e = &events[list[row.index()]];
                    let color = if e.kind.is_problem() {
                        health_color(Health::Error)
                    } else if e.kind.is_quiet() {
                        STALE_TEXT
                    } else {
                        ui_text_color()
                    };
                    let index = row.index();
                    row.col(|ui| {
                        stripe(ui, index);
                        ui.label(clock(e.time_s));
                    });
                    row.col(|ui| {
                        ui.label(RichText::new(e.kind.label()).color(color));
                    });
                    row.col(|ui| {
                        ui.label(shown(&e.subject));
                    });
                    row.col(|ui| {
                        // The process's log messages, one click away (a link: no frame to draw per row).
                        if let Some(p) = &e.process
                            && ui
                                .link("logs")
                                .on_hover_text(format!(
                                    "log messages of {}@{}:{}",
                                    shown(&p.unit),
                                    shown(&p.host),
                                    p.pid
                                ))
                                .clicked()
                        {
                            open_logs = Some(p.clone());
                        }
                    });
                    row.col(|ui| {
                        ui.label(shown(&e.detail));
                    });
                });
            });
        if let Some(p) = open_logs {
            self.open_logs_of(&p);
        }
    }

    /// The Logs tab, filtered to the log messages of process `p` (by its unit name and host).
    pub fn open_logs_of(&mut self, p: &ProcessRef) {
        self.state.logs = shoal::logging::LogFilter {
            process: Some(p.unit.to_string()),
            host: Some(p.host.to_string()),
            ..Default::default()
        };
        self.state.tab = super::Tab::Logs;
    }
}
