//! The Services tab: one row per service name (servers, clients, methods, calls, call rate, problems), and below
//! it the servers and clients of the selected service (else of every service shown), one line per method with its
//! request and response types, call count, call rate and errors. A figure no registration carries reads "—".

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::{ROW_H, health_color, stripe, text_cells};
use crate::model::{Health, MethodRow, ServiceEndpointRow, View};

/// `5.0/s`, or "—" when the rate is not known yet; a stale endpoint's rate is marked so.
pub(super) fn call_rate_text(rate: Option<f64>, stale: bool) -> String {
    match (rate, stale) {
        (None, _) => "—".into(),
        (Some(r), false) => format!("{r:.1}/s"),
        (Some(r), true) => format!("{r:.1}/s (stale)"),
    }
}

impl MonitorApp {
    pub(super) fn services(&mut self, ui: &mut egui::Ui, view: &View) {
        let (servers, clients, methods) = view.service_totals();
        ui.strong(format!(
            "Services ({} of {}) · {servers} servers · {clients} clients · {methods} methods",
            self.order.services.len(),
            view.services.len()
        ));
        if view.services.is_empty() {
            ui.label("No service server or client is announced.");
            return;
        }
        self.service_table(ui, view);
        ui.separator();
        match &self.state.selected_service {
            Some(s) if view.service(s).is_some() => {
                ui.strong(format!("Servers and clients of {}", shown(s)));
            }
            _ => {
                ui.strong("Servers and clients (click a service to show only its own)");
            }
        }
        ui.label(
            "Calls and rates: what each server (calls served) and client (calls made) announces in registration, \
             about once a second; errors and call latency: not announced (by eCAL or shoal), shown as —.",
        );
        let own = view.own_service_counts;
        if own != crate::model::OwnServiceCounts::default() {
            ui.label(format!(
                "This monitor's own servers and clients: {} served, {} failed, {} connections refused; {} calls made, \
                 {} timed out, {} broken.",
                own.calls_served,
                own.calls_failed,
                own.connections_refused,
                own.calls_made,
                own.calls_timed_out,
                own.calls_broken
            ));
        }
        self.endpoint_table(ui, view);
    }

    /// One row per service in the filter's order; a click selects it (again: every service).
    fn service_table(&mut self, ui: &mut egui::Ui, view: &View) {
        let mut clicked = None;
        let selected = self.state.selected_service.clone();
        let h = ((self.order.services.len() as f32 + 1.5) * ROW_H).min(ui.available_height() * 0.3).max(3.0 * ROW_H);
        ui.push_id("services", |ui| {
            TableBuilder::new(ui)
                .id_salt("services")
                .resizable(true)
                .max_scroll_height(h)
                .column(Column::initial(220.0))
                .columns(Column::initial(70.0), 5)
                .column(Column::remainder())
                .header(ROW_H, |mut hd| {
                    for t in ["Service", "Servers", "Clients", "Methods", "Calls", "Calls/s", "Problems"] {
                        hd.col(|ui| {
                            ui.strong(t);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, self.order.services.len(), |mut row| {
                        let s = &view.services[self.order.services[row.index()]];
                        let is_sel = selected.as_deref() == Some(&*s.name);
                        row.set_selected(is_sel);
                        let color = health_color(s.problems.health());
                        let index = row.index();
                        row.col(|ui| {
                            stripe(ui, index);
                            let text = RichText::new(shown(&s.name).into_owned()).color(color);
                            if ui.selectable_label(is_sel, text).clicked() {
                                clicked = Some(s.name.clone());
                            }
                        });
                        text_cells(
                            &mut row,
                            color,
                            [
                                s.servers.to_string(),
                                s.clients.to_string(),
                                s.methods.to_string(),
                                s.calls.to_string(),
                                call_rate_text(
                                    s.call_rate_hz,
                                    view.endpoints_of(&s.name).any(|e| e.role == "server" && e.stale),
                                ),
                                s.problems.text(),
                            ],
                        );
                    });
                });
        });
        if let Some(name) = clicked {
            let again = self.state.selected_service.as_deref() == Some(&*name);
            self.select_service(if again { None } else { Some(&name) });
        }
    }

    /// The servers and clients, one line per method (the service's name on its first line only, an endpoint's
    /// columns on its first line).
    fn endpoint_table(&self, ui: &mut egui::Ui, view: &View) {
        let lines = &self.order.service_lines;
        ui.push_id("service_endpoints", |ui| {
            TableBuilder::new(ui)
                .id_salt("service_endpoints")
                .resizable(true)
                .column(Column::initial(130.0))
                .column(Column::initial(50.0))
                .column(Column::initial(190.0))
                .column(Column::initial(50.0))
                .column(Column::initial(60.0))
                .column(Column::initial(110.0))
                .column(Column::initial(150.0))
                .column(Column::initial(150.0))
                .column(Column::initial(62.0))
                .column(Column::initial(100.0))
                .column(Column::initial(62.0))
                .column(Column::remainder())
                .header(ROW_H, |mut hd| {
                    for t in [
                        "Service", "Role", "Process", "Kind", "Port", "Method", "Request", "Response", "Calls",
                        "Calls/s", "Errors", "Reg. age",
                    ] {
                        hd.col(|ui| {
                            ui.strong(t);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, lines.len(), |mut row| {
                        let (ei, mi) = lines[row.index()];
                        let e = &view.service_endpoints[ei];
                        let first = mi.is_none_or(|m| m == 0);
                        let color = health_color(if e.stale { Health::Warning } else { Health::Ok });
                        let index = row.index();
                        // The service's name on its first line only.
                        let first_of_service =
                            index == 0 || view.service_endpoints[lines[index - 1].0].service != e.service;
                        row.col(|ui| {
                            stripe(ui, index);
                            if first_of_service {
                                ui.label(RichText::new(shown(&e.service)).color(color));
                            }
                        });
                        let m = mi.map(|i| &e.methods[i]);
                        text_cells(&mut row, color, endpoint_cells(e, first).into_iter().chain(method_cells(e, m)));
                    });
                });
        });
    }
}

/// Role, process, kind and port (empty but on an endpoint's first line).
fn endpoint_cells(e: &ServiceEndpointRow, first: bool) -> [String; 4] {
    if !first {
        return Default::default();
    }
    [
        e.role.to_owned(),
        shown(&e.process).into_owned(),
        e.kind.unwrap_or("—").to_owned(),
        e.tcp_port.map_or_else(|| "—".to_owned(), |p| p.to_string()),
    ]
}

/// Method, request, response, calls, calls/s, errors and the registration age.
fn method_cells(e: &ServiceEndpointRow, m: Option<&MethodRow>) -> [String; 7] {
    let age = if e.stale {
        format!("{:.1} s — stale", e.registration_age_s)
    } else {
        format!("{:.1} s", e.registration_age_s)
    };
    let Some(m) = m else {
        return ["(no method)".into(), "—".into(), "—".into(), "—".into(), "—".into(), "—".into(), age];
    };
    [
        shown(&m.name).into_owned(),
        shown(&m.request.text()).into_owned(),
        shown(&m.response.text()).into_owned(),
        m.calls.to_string(),
        call_rate_text(m.call_rate_hz, e.stale),
        m.errors.map_or_else(|| "—".to_owned(), |n| n.to_string()),
        age,
    ]
}
