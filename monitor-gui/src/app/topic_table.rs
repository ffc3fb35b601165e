//! The topic table (on the Overview): one row per topic, sortable by any column; a click opens the Topic tab.

use std::sync::Arc;

use egui::RichText;
use egui_extras::{Column, TableBuilder};
use shoal::monitor::printable as shown;

use super::widgets::{ROW_H, STALE_TEXT, health_color, stripe, text_cells};
use super::{MonitorApp, Tab};
use crate::model::{TopicRow, View, fmt_bandwidth, fmt_bytes, fmt_rate, fmt_us};

/// Topic table columns (sortable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCol {
    /// Topic name.
    Name,
    /// Type name.
    Type,
    /// Publishers.
    Pubs,
    /// Subscribers.
    Subs,
    /// Rate.
    Rate,
    /// Bandwidth.
    Bandwidth,
    /// Size.
    Size,
    /// Drops.
    Drops,
    /// Latency median.
    P50,
    /// Latency 99th percentile.
    P99,
    /// Problems.
    Problems,
}

impl TopicCol {
    const ALL: [TopicCol; 11] = [
        TopicCol::Name,
        TopicCol::Type,
        TopicCol::Pubs,
        TopicCol::Subs,
        TopicCol::Rate,
        TopicCol::Bandwidth,
        TopicCol::Size,
        TopicCol::Drops,
        TopicCol::P50,
        TopicCol::P99,
        TopicCol::Problems,
    ];

    fn title(self) -> &'static str {
        match self {
            TopicCol::Name => "Topic",
            TopicCol::Type => "Type",
            TopicCol::Pubs => "Pubs",
            TopicCol::Subs => "Subs",
            TopicCol::Rate => "Rate",
            TopicCol::Bandwidth => "Bandwidth",
            TopicCol::Size => "Size",
            TopicCol::Drops => "Drops",
            TopicCol::P50 => "P50",
            TopicCol::P99 => "P99",
            TopicCol::Problems => "Problems",
        }
    }

    pub(super) fn cmp(self, a: &TopicRow, b: &TopicRow) -> std::cmp::Ordering {
        let f = |x: f64, y: f64| x.total_cmp(&y);
        let lat = |t: &TopicRow, p99: bool| t.latency.map_or(-1.0, |l| if p99 { l.p99_us } else { l.p50_us });
        match self {
            TopicCol::Name => a.name.cmp(&b.name),
            TopicCol::Type => a.type_name.cmp(&b.type_name),
            TopicCol::Pubs => a.publishers.cmp(&b.publishers),
            TopicCol::Subs => a.subscribers.cmp(&b.subscribers),
            TopicCol::Rate => f(a.rate_hz, b.rate_hz),
            TopicCol::Bandwidth => f(a.bandwidth_bps, b.bandwidth_bps),
            TopicCol::Size => a.size_bytes.cmp(&b.size_bytes),
            TopicCol::Drops => a.drops.cmp(&b.drops),
            TopicCol::P50 => f(lat(a, false), lat(b, false)),
            TopicCol::P99 => f(lat(a, true), lat(b, true)),
            TopicCol::Problems => {
                (a.problems.health(), a.problems.text()).cmp(&(b.problems.health(), b.problems.text()))
            }
        }
    }
}

impl MonitorApp {
    pub(super) fn topic_table(&mut self, ui: &mut egui::Ui, view: &View) {
        let mut clicked: Option<Arc<str>> = None;
        let mut sort = self.state.sort;
        let selected = self.state.selected.clone();
        let mut table = TableBuilder::new(ui).id_salt("topics").resizable(true);
        for (i, col) in TopicCol::ALL.iter().enumerate() {
            let w = match col {
                TopicCol::Name => 190.0,
                TopicCol::Type => 170.0,
                TopicCol::Bandwidth | TopicCol::P50 | TopicCol::P99 => 88.0,
                TopicCol::Problems => 0.0,
                _ => 62.0,
            };
            table = table.column(if i == TopicCol::ALL.len() - 1 { Column::remainder() } else { Column::initial(w) });
        }
        table
            .column(Column::initial(90.0))
            .header(ROW_H, |mut h| {
                for col in TopicCol::ALL {
                    h.col(|ui| {
                        let arrow = if sort.0 == col { if sort.1 { " ^" } else { " v" } } else { "" };
                        if ui.button(format!("{}{arrow}", col.title())).clicked() {
                            sort = if sort.0 == col { (col, !sort.1) } else { (col, col == TopicCol::Name) };
                        }
                    });
                }
                h.col(|ui| {
                    ui.strong("Layers");
                });
            })
            .body(|body| {
                body.rows(ROW_H, self.order.topics.len(), |mut row| {
                    let t = &view.topics[self.order.topics[row.index()]];
                    let is_sel = selected.as_deref() == Some(&*t.name);
                    row.set_selected(is_sel);
                    let color = health_color(t.problems.health());
                    let txt = |s: String| RichText::new(s).color(color);
                    let index = row.index();
                    row.col(|ui| {
                        stripe(ui, index);
                        if ui.selectable_label(is_sel, txt(shown(&t.name).into_owned())).clicked() {
                            clicked = Some(t.name.clone());
                        }
                    });
                    let (p50, p99) = latency_cells(t);
                    text_cells(
                        &mut row,
                        color,
                        [shown(&t.type_label).into_owned(), t.publishers.to_string(), t.subscribers.to_string()],
                    );
                    // Figures of late registrations are the last ones announced: greyed, with their age. Without a
                    // publisher the size is the last one received: greyed, said as such.
                    let (figures, figures_color) = match t.stale_figures_s {
                        None if t.no_publisher => {
                            ([fmt_rate(t.rate_hz), fmt_bandwidth(t.bandwidth_bps), last_size(t.size_bytes)], STALE_TEXT)
                        }
                        None => (
                            [fmt_rate(t.rate_hz), fmt_bandwidth(t.bandwidth_bps), fmt_bytes(t.size_bytes as f64)],
                            color,
                        ),
                        Some(age) => (
                            [
                                format!("{} · {age:.0} s ago", fmt_rate(t.rate_hz)),
                                format!("{} · {age:.0} s ago", fmt_bandwidth(t.bandwidth_bps)),
                                fmt_bytes(t.size_bytes as f64),
                            ],
                            STALE_TEXT,
                        ),
                    };
                    text_cells(&mut row, figures_color, figures);
                    text_cells(
                        &mut row,
                        color,
                        [t.drops.to_string(), p50, p99, t.problems.text(), shown(&t.layers).into_owned()],
                    );
                });
            });
        self.state.sort = sort;
        if let Some(name) = clicked {
            self.select_topic(Some(&name));
            self.state.tab = Tab::Topic;
        }
    }
}

/// A size received while a publisher was there: `last 1.0 kB`, `-` for none.
fn last_size(bytes: u64) -> String {
    if bytes == 0 { "-".into() } else { format!("last {}", fmt_bytes(bytes as f64)) }
}

fn latency_cells(t: &TopicRow) -> (String, String) {
    match (t.latency, t.latency_mean_us) {
        // No publisher: no data flows, so no latency now (what subscribers measured before is not current).
        _ if t.no_publisher => ("-".into(), "-".into()),
        (Some(l), _) => (fmt_us(l.p50_us), fmt_us(l.p99_us)),
        // Not a shoal measurement: the mean eCAL's subscribers announce (since they started), said as such.
        (None, Some(m)) => (format!("eCAL mean {}", fmt_us(m)), "-".into()),
        (None, None) if t.cross_host_connections > 0 => ("clock not shared".into(), String::new()),
        (None, None) => ("-".into(), "-".into()),
    }
}
