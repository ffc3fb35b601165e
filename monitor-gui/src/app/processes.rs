//! The process table (on the Overview): one row per process, in the filter's order, coloured by health, with its
//! CPU and memory as shoal processes announce them; grouped by host or unit on request (a head row per group with
//! its sums, folded with a click); a click on a unit shows that process's details below the table (path, command
//! line, state, CPU, memory, its publishers, subscribers and services).

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::order::ProcLine;
use super::widgets::{ROW_H, STALE_TEXT, health_color, stripe, text_cells};
use super::{MonitorApp, ProcessGroup, Tab};
use crate::model::{ProcessRow, View, fmt_cpu, fmt_memory};

impl MonitorApp {
    /// The processes that pass the filter, over about a third of the height left, then the selected one's details.
    pub(super) fn process_table(&mut self, ui: &mut egui::Ui, view: &View) {
        ui.horizontal(|ui| {
            ui.label("Group:");
            for (g, l) in
                [(ProcessGroup::None, "none"), (ProcessGroup::Host, "by host"), (ProcessGroup::Unit, "by unit")]
            {
                if ui.selectable_label(self.state.process_group == g, l).clicked() {
                    self.state.process_group = g;
                }
            }
        });
        let avail = ui.available_height();
        let proc_h = (avail * 0.35).max(4.0 * ROW_H);
        let lines = &self.order.process_lines;
        let selected = self.state.selected_process.clone();
        let mut toggle_group = None;
        let mut pick = None;
        ui.push_id("processes", |ui| {
            ui.set_max_height(proc_h);
            TableBuilder::new(ui)
                .id_salt("processes")
                .resizable(true)
                .max_scroll_height(proc_h - ROW_H)
                .column(Column::initial(90.0))
                .column(Column::initial(60.0))
                .column(Column::initial(170.0))
                .column(Column::initial(110.0))
                .column(Column::initial(50.0))
                .column(Column::initial(240.0))
                .column(Column::initial(60.0))
                .column(Column::initial(70.0))
                .column(Column::initial(60.0))
                .column(Column::initial(80.0))
                .column(Column::remainder())
                .header(ROW_H, |mut h| {
                    for t in [
                        "Host",
                        "PID",
                        "Unit",
                        "Executable",
                        "Kind",
                        "Version",
                        "CPU",
                        "Memory",
                        "Reg. age",
                        "Kernel drops",
                        "State",
                    ] {
                        h.col(|ui| {
                            ui.strong(t);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, lines.len(), |mut row| {
                        let index = row.index();
                        match &lines[index] {
                            ProcLine::Group { name, members, cpu_load, memory_bytes, folded } => {
                                row.col(|ui| {
                                    stripe(ui, index);
                                    let arrow = if *folded { "+" } else { "-" };
                                    if ui.link(format!("{arrow} {}", shown(name))).clicked() {
                                        toggle_group = Some(name.clone());
                                    }
                                });
                                let n = format!("{members} process{}", if *members == 1 { "" } else { "es" });
                                let blank = String::new;
                                text_cells(
                                    &mut row,
                                    health_color(crate::model::Health::Ok),
                                    [
                                        blank(),
                                        n,
                                        blank(),
                                        blank(),
                                        blank(),
                                        fmt_cpu(*cpu_load),
                                        fmt_memory(*memory_bytes),
                                        blank(),
                                        blank(),
                                        blank(),
                                    ],
                                );
                            }
                            ProcLine::Process(i) => {
                                let p = &view.processes[*i];
                                let sel = selected.as_ref().is_some_and(|(h, pid)| (h, *pid) == (&p.host, p.pid));
                                row.set_selected(sel);
                                if process_row(&mut row, index, p) {
                                    pick = Some((p.host.clone(), p.pid));
                                }
                            }
                        }
                    });
                });
        });
        if let Some(g) = toggle_group {
            self.state.toggle_folded(g);
        }
        if let Some(k) = pick {
            self.state.selected_process = if self.state.selected_process.as_ref() == Some(&k) { None } else { Some(k) };
        }
        self.process_details(ui, view);
    }

    /// The selected process's details, if it is in `view`.
    fn process_details(&mut self, ui: &mut egui::Ui, view: &View) {
        let Some((host, pid)) = self.state.selected_process.clone() else { return };
        let Some(p) = view.processes.iter().find(|p| (&p.host, p.pid) == (&host, pid)) else {
            ui.label(format!("Process {}:{pid}: not seen at this time", shown(&host)));
            return;
        };
        let mut open_topic = None;
        let mut close = false;
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.strong(format!("Process {}", shown(&p.label())));
                if ui.link("close").clicked() {
                    close = true;
                }
            });
            let stale = p.problems.contains(crate::model::Problem::Stale);
            let color = if stale { STALE_TEXT } else { health_color(p.problems.health()) };
            let line = |ui: &mut egui::Ui, label: &str, text: String| {
                ui.horizontal_wrapped(|ui| {
                    ui.label(RichText::new(label).strong());
                    ui.label(RichText::new(text).color(color));
                });
            };
            line(ui, "Executable", format!("{} ({} {})", shown(&p.path), p.kind, shown(&p.version)));
            line(
                ui,
                "Command line",
                if p.command_line.is_empty() { "-".into() } else { shown(&p.command_line).into_owned() },
            );
            let usage = if p.kind == "eCAL" {
                "not announced (eCAL 6 processes announce neither CPU nor memory)".to_owned()
            } else {
                format!("CPU {} of one core · memory {}", fmt_cpu(p.cpu_load), fmt_memory(p.memory_bytes))
            };
            line(
                ui,
                "Use",
                if stale {
                    format!("{usage} (stale: last registration {:.1} s ago)", p.registration_age_s)
                } else {
                    usage
                },
            );
            let mut state = shown(&p.state).into_owned();
            if !p.problems.is_empty() {
                state.push_str(&format!(" — {}", p.problems.text()));
            }
            line(ui, "State", state);
            let mine: Vec<_> = view.entities.iter().filter(|e| (&e.host, e.pid) == (&p.host, p.pid)).collect();
            for (dir, label) in [("pub", "Publishes"), ("sub", "Subscribes")] {
                let topics: Vec<&std::sync::Arc<str>> =
                    mine.iter().filter(|e| e.direction == dir).map(|e| &e.topic).collect();
                ui.horizontal_wrapped(|ui| {
                    ui.label(RichText::new(format!("{label} ({})", topics.len())).strong());
                    for t in topics.iter().take(40) {
                        if ui.link(shown(t)).clicked() {
                            open_topic = Some((*t).clone());
                        }
                    }
                    if topics.len() > 40 {
                        ui.label(format!("and {} more", topics.len() - 40));
                    }
                });
            }
            let services: Vec<String> = view
                .service_endpoints
                .iter()
                .filter(|e| (&e.host, e.pid) == (&p.host, p.pid))
                .map(|e| format!("{} ({})", shown(&e.service), e.role))
                .collect();
            line(
                ui,
                &format!("Services ({})", services.len()),
                if services.is_empty() { "-".into() } else { services.join(", ") },
            );
        });
        if close {
            self.state.selected_process = None;
        }
        if let Some(t) = open_topic {
            self.select_topic(Some(&t));
            self.state.tab = Tab::Topic;
        }
    }
}

/// One process's cells; true when its unit was clicked (select it).
fn process_row(row: &mut egui_extras::TableRow<'_, '_>, index: usize, p: &ProcessRow) -> bool {
    let color = health_color(p.problems.health());
    let mut state = shown(&p.state).into_owned();
    if !p.problems.is_empty() {
        state.push_str(&format!(" — {}", p.problems.text()));
    }
    let unit = if p.is_self { format!("{} (this monitor)", shown(&p.unit)) } else { shown(&p.unit).into_owned() };
    row.col(|ui| {
        stripe(ui, index);
        ui.label(RichText::new(shown(&p.host)).color(color));
    });
    row.col(|ui| {
        ui.label(RichText::new(p.pid.to_string()).color(color));
    });
    let mut clicked = false;
    row.col(|ui| {
        clicked = ui.link(RichText::new(unit).color(color)).clicked();
    });
    text_cells(
        row,
        color,
        [
            shown(&p.name).into_owned(),
            p.kind.to_owned(),
            shown(&p.version).into_owned(),
            fmt_cpu(p.cpu_load),
            fmt_memory(p.memory_bytes),
            format!("{:.1} s", p.registration_age_s),
            p.kernel_drops.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            state,
        ],
    );
    clicked
}
