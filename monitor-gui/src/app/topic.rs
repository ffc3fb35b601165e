//! The Topic tab: one topic's summary, its connections (measured by shoal subscribers, or implied by an eCAL
//! subscriber's registration), its endpoints (every publisher and subscriber with its process, layers, data clock,
//! drops and type) and the plots of the selected connection (or of all).

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::STALE_TEXT;
use super::widgets::{ROW_H, health_color, stripe, text_cells};
use crate::model::{ConnectionRow, EntityRow, View, fmt_bandwidth, fmt_bytes, fmt_rate, fmt_us};

impl MonitorApp {
    pub(super) fn topic_detail(&mut self, ui: &mut egui::Ui, view: &View) {
        let Some(name) = self.state.selected.clone() else {
            ui.label("Select a topic in the Overview (click its name).");
            return;
        };
        let Some(t) = view.topic(&name) else {
            ui.label(format!("{}: not seen at this time", shown(&name)));
            return;
        };
        ui.horizontal(|ui| {
            ui.heading(shown(&t.name));
            let pages: Vec<String> = t.ring_page_kb.iter().map(|kb| shoal::monitor::pages_label(*kb)).collect();
            ui.label(format!(
                "{} · {} pub · {} sub · layers {}{} · {}",
                shown(&t.type_label),
                t.publishers,
                t.subscribers,
                if t.layers.is_empty() { "-".into() } else { shown(&t.layers) },
                if pages.is_empty() { String::new() } else { format!(" (ring on {})", pages.join(" and ")) },
                if t.problems.is_empty() { "no problems".to_owned() } else { t.problems.text() }
            ));
        });
        ui.horizontal(|ui| {
            ui.label("Window:");
            for (s, l) in [(30.0, "30 s"), (60.0, "1 min"), (300.0, "5 min")] {
                if ui.selectable_label(self.state.window_s == s, l).clicked() {
                    self.state.window_s = s;
                }
            }
            ui.separator();
            if ui.selectable_label(self.state.connection.is_none(), "All connections").clicked() {
                self.state.connection = None;
            }
        });
        let conns: Vec<&ConnectionRow> = view.connections_of(&name).collect();
        self.connection_table(ui, &conns);
        if !conns.iter().any(|c| c.measured) {
            ui.label(match t.latency_mean_us {
                _ if t.no_publisher => "No connection figures: the topic has no publisher now.".to_owned(),
                Some(m) => format!(
                    "No connection figures: no shoal subscriber reports this topic. Its eCAL subscribers announce rate, \
                     drops and a mean latency since they started: {} (the Overview's \"eCAL mean\").",
                    fmt_us(m)
                ),
                None => "No connection figures: no shoal subscriber reports this topic (eCAL subscribers announce rate \
                         and drops)."
                    .to_owned(),
            });
        }
        let ends: Vec<&EntityRow> = view.entities_of(&name).collect();
        egui::CollapsingHeader::new(format!("Endpoints ({})", ends.len()))
            .id_salt("endpoints")
            .default_open(true)
            .show(ui, |ui| endpoint_table(ui, &ends));
        ui.separator();
        self.plots(ui, view, &name);
    }

    /// The topic's connections, one row each; a click on a publisher selects (or, again, forgets) its connection
    /// for the plots.
    fn connection_table(&mut self, ui: &mut egui::Ui, conns: &[&ConnectionRow]) {
        let mut pick = None;
        ui.push_id("conns", |ui| {
            let h = (conns.len() as f32 + 1.5) * ROW_H;
            TableBuilder::new(ui)
                .id_salt("connections")
                .max_scroll_height(h.min(8.0 * ROW_H))
                .column(Column::initial(200.0))
                .column(Column::initial(200.0))
                .columns(Column::initial(80.0), 8)
                .column(Column::remainder())
                .header(ROW_H, |mut hd| {
                    for c in
                        ["Publisher", "Subscriber", "Via", "Rate", "Bandwidth", "Drops", "P50", "P90", "P99", "Max", ""]
                    {
                        hd.col(|ui| {
                            ui.strong(c);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, conns.len(), |mut row| {
                        let c = conns[row.index()];
                        let sel = self.state.connection == Some(c.key());
                        row.set_selected(sel);
                        let color = health_color(c.problems.health());
                        let txt = |s: String| RichText::new(s).color(color);
                        let index = row.index();
                        row.col(|ui| {
                            stripe(ui, index);
                            if ui.selectable_label(sel, txt(shown(&c.publisher).into_owned())).clicked() {
                                pick = Some(c.key());
                            }
                        });
                        let lat: [String; 4] = match (&c.latency, c.same_host) {
                            _ if !c.measured => ["not measured".into(), String::new(), String::new(), String::new()],
                            (_, false) => ["clock not shared".into(), String::new(), String::new(), String::new()],
                            (Some(l), true) => [fmt_us(l.p50_us), fmt_us(l.p90_us), fmt_us(l.p99_us), fmt_us(l.max_us)],
                            (None, true) => ["-".into(), "-".into(), "-".into(), "-".into()],
                        };
                        let [p50, p90, p99, max] = lat;
                        text_cells(
                            &mut row,
                            color,
                            [
                                shown(&c.subscriber).into_owned(),
                                if c.measured { c.via.to_owned() } else { format!("{} (implied)", c.via) },
                                fmt_rate(c.rate_hz),
                                fmt_bandwidth(c.bandwidth_bps),
                                c.drops.to_string(),
                                p50,
                                p90,
                                p99,
                                max,
                                note(c),
                            ],
                        );
                    });
                });
        });
        if let Some(k) = pick {
            self.state.connection = if self.state.connection == Some(k) { None } else { Some(k) };
        }
    }
}

/// The last column of a connection: its problems, and where its figures come from when no shoal subscriber measured
/// them.
fn note(c: &ConnectionRow) -> String {
    let source = match (c.measured, c.shared_figures) {
        (true, _) => "",
        (false, false) => "eCAL subscriber: its announced figures, layer from the registrations",
        (false, true) => "eCAL subscriber: its totals over all its publishers, layer from the registrations",
    };
    match (c.problems.is_empty(), source.is_empty()) {
        (true, _) => source.to_owned(),
        (false, true) => c.problems.text(),
        (false, false) => format!("{} — {source}", c.problems.text()),
    }
}

/// One row per publisher and subscriber of the topic, publishers first: its process and runtime, layers, data clock,
/// rate, drops, type with encoding and descriptor size, connections and registration age; greyed when its
/// registration is stale, in the error colour when its type disagrees.
fn endpoint_table(ui: &mut egui::Ui, ends: &[&EntityRow]) {
    let mut rows: Vec<&EntityRow> = ends.to_vec();
    rows.sort_by_key(|e| (e.direction != "pub", e.process.clone(), e.entity_id));
    let h = (rows.len() as f32 + 1.5) * ROW_H;
    TableBuilder::new(ui)
        .id_salt("endpoints")
        .max_scroll_height(h.min(8.0 * ROW_H))
        .column(Column::initial(40.0))
        .column(Column::initial(200.0))
        .column(Column::initial(50.0))
        .column(Column::initial(130.0))
        .columns(Column::initial(70.0), 3)
        .column(Column::initial(220.0))
        .column(Column::initial(80.0))
        .column(Column::initial(130.0))
        .column(Column::remainder())
        .header(ROW_H, |mut hd| {
            for c in [
                "Dir",
                "Process",
                "Kind",
                "Layers",
                "Clock",
                "Rate",
                "Drops",
                "Type",
                "Descriptor",
                "Conns here / remote",
                "Reg. age",
            ] {
                hd.col(|ui| {
                    ui.strong(c);
                });
            }
        })
        .body(|body| {
            body.rows(ROW_H, rows.len(), |mut row| {
                let e = rows[row.index()];
                let color = if e.type_mismatch {
                    health_color(crate::model::Health::Error)
                } else if e.stale {
                    STALE_TEXT
                } else {
                    health_color(crate::model::Health::Ok)
                };
                let index = row.index();
                row.col(|ui| {
                    stripe(ui, index);
                    ui.label(RichText::new(e.direction).color(color));
                });
                let ty = match (e.type_name.is_empty(), e.encoding.is_empty()) {
                    (true, true) => "-".to_owned(),
                    (false, true) => shown(&e.type_name).into_owned(),
                    (_, false) => format!("{} ({})", shown(&e.type_name), shown(&e.encoding)),
                };
                let (local, external) = e.connections;
                text_cells(
                    &mut row,
                    color,
                    [
                        shown(&e.process).into_owned(),
                        e.kind.unwrap_or("?").to_owned(),
                        if e.layers.is_empty() { "-".into() } else { shown(&e.layers).into_owned() },
                        e.messages.to_string(),
                        fmt_rate(e.rate_hz),
                        if e.direction == "pub" { "-".into() } else { e.drops.to_string() },
                        if e.type_mismatch { format!("{ty} MISMATCH") } else { ty },
                        if e.descriptor_bytes == 0 { "none".into() } else { fmt_bytes(e.descriptor_bytes as f64) },
                        format!("{local} / {external}"),
                        if e.stale {
                            format!("{:.1} s (stale)", e.registration_age_s)
                        } else {
                            format!("{:.1} s", e.registration_age_s)
                        },
                    ],
                );
            });
        });
}
