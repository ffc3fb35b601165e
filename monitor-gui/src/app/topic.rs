//! The Topic tab: one topic's summary, its connections and the plots of the selected one (or of all).

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::widgets::{ROW_H, health_color, stripe, text_cells};
use crate::model::{ConnectionRow, View, fmt_bandwidth, fmt_rate, fmt_us};

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
        if conns.is_empty() {
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
                                c.via.to_owned(),
                                fmt_rate(c.rate_hz),
                                fmt_bandwidth(c.bandwidth_bps),
                                c.drops.to_string(),
                                p50,
                                p90,
                                p99,
                                max,
                                c.problems.text(),
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
