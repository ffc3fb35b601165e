//! The Plot tab: the numeric fields picked in the Inspector ([`Signals`](crate::signals::Signals)), live over the
//! window (30 s, 1 min, 5 min; x: receive time, seconds before the shown view or the newest value), one line each,
//! listed above the plot with its colour and `topic:path` (the legend), a Remove link, and its latest value, the
//! points kept, the messages that did not decode or lacked the field, those lost before the monitor took them, and
//! whether its topic still has a publisher. The lines are found once per change of the points, window or width, each
//! point the lowest or the highest value of a column of the plot: at most two per pixel column, and at most
//! [`DRAWN_POINTS`] for all signals together (a line costs about four triangles a point; 16 signals at two points
//! per pixel column were eight times a view's budget).

use std::sync::Arc;

use egui::{Color32, RichText};
use egui_plot::{Line, Plot, PlotPoint, PlotPoints};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::plots::{decimate, show_plot};
use super::widgets::{STALE_TEXT, health_color, ui_text_color};
use crate::model::{Health, View};
use crate::signals::MAX_SIGNALS;

/// The colour of signal `i` (the Inspector shows a plotted field in it too).
pub(super) fn signal_color(i: usize) -> Color32 {
    const PALETTE: [Color32; 8] = [
        Color32::from_rgb(80, 160, 255),
        Color32::from_rgb(250, 150, 50),
        Color32::from_rgb(100, 200, 100),
        Color32::from_rgb(230, 90, 200),
        Color32::from_rgb(240, 220, 80),
        Color32::from_rgb(90, 220, 220),
        Color32::from_rgb(240, 100, 100),
        Color32::from_rgb(170, 140, 250),
    ];
    PALETTE[i % PALETTE.len()]
}

/// Points drawn for all signals together, at most: one signal gets a column every 3 pixels of a 1280-pixel window,
/// 16 signals one every 50.
pub const DRAWN_POINTS: usize = 800;

/// What the plotted lines depend on.
#[derive(Debug, Clone, PartialEq)]
struct SeriesKey {
    generation: u64,
    end: f64,
    window_s: f64,
    columns: usize,
}

/// Each signal's points in the window, x relative to its end, at most two per pixel column.
#[derive(Debug)]
pub(super) struct FieldSeries {
    key: SeriesKey,
    lines: Vec<Vec<PlotPoint>>,
}

/// A value as the signal table shows it: four decimals at most, or an exponent for very large and small ones.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if v.is_finite() && a != 0.0 && !(1e-3..1e6).contains(&a) {
        return format!("{v:.3e}");
    }
    let s = format!("{v:.4}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s }
}

impl MonitorApp {
    pub(super) fn field_plot(&mut self, ui: &mut egui::Ui, view: &View) {
        ui.horizontal(|ui| {
            ui.heading("Field plot");
            ui.separator();
            ui.label("Window:");
            for (s, l) in [(30.0, "30 s"), (60.0, "1 min"), (300.0, "5 min")] {
                if ui.selectable_label(self.state.window_s == s, l).clicked() {
                    self.state.window_s = s;
                }
            }
            ui.separator();
            ui.label(format!("{} of {MAX_SIGNALS} signals", self.signals.list().len()));
            if !self.signals.is_empty() && ui.button("Clear all").clicked() {
                self.signals.clear();
                self.plot_note = None;
            }
        });
        if self.signals.is_empty() {
            ui.label(
                "No field plotted: in the Inspector, click a number of a decoded message to plot it (up to 16, of any \
                 topics). Their values keep being taken while other tabs are shown.",
            );
            return;
        }
        if let Some(note) = &self.plot_note {
            ui.colored_label(health_color(Health::Warning), note);
        }
        // The plot ends at the shown view; live, at the newest value if that is later (messages arrive between
        // snapshots).
        let newest = self.signals.list().iter().filter_map(|s| s.last.map(|l| l.0)).fold(f64::NEG_INFINITY, f64::max);
        let end = if self.state.frozen_at.is_none() { view.time_s.max(newest) } else { view.time_s };
        let stale: Vec<bool> =
            self.signals.list().iter().map(|s| view.topic(&s.topic).is_none_or(|t| t.publishers == 0)).collect();
        let mut remove = None;
        for (i, s) in self.signals.list().iter().enumerate() {
            ui.horizontal(|ui| {
                let color = if stale[i] { STALE_TEXT } else { signal_color(i) };
                let (swatch, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
                ui.painter().rect_filled(swatch, 2.0, color);
                ui.label(RichText::new(shown(&s.label)).color(color).strong());
                let latest = match s.last {
                    Some((t, v)) if stale[i] => {
                        format!("no publisher now · last value {} {:.0} s ago", fmt_value(v), (end - t).max(0.0))
                    }
                    Some((_, v)) => format!("latest {}", fmt_value(v)),
                    None if stale[i] => "no publisher now · no value taken".to_owned(),
                    None => "no value yet".to_owned(),
                };
                let mut figures = vec![latest, format!("{} points", s.points().len())];
                if s.undecodable > 0 {
                    figures.push(format!("{} not decoded", s.undecodable));
                }
                if s.missing > 0 {
                    figures.push(format!("{} without the field", s.missing));
                }
                let lost = self.messages.lost(&s.topic);
                if lost > 0 {
                    figures.push(format!("{lost} of the topic lost before the monitor took them"));
                }
                let problem = s.undecodable > 0 || s.missing > 0 || lost > 0;
                let text_color = match (stale[i], problem) {
                    (true, _) => STALE_TEXT,
                    (false, true) => health_color(Health::Warning),
                    (false, false) => ui_text_color(),
                };
                ui.label(RichText::new(figures.join(" · ")).color(text_color));
                if ui.link("Remove").clicked() {
                    remove = Some(i);
                }
            });
        }
        if let Some(i) = remove {
            self.signals.remove(i);
            self.plot_note = None;
        }
        let w = ui.available_width().max(200.0);
        let key = SeriesKey {
            generation: self.signals.generation(),
            end,
            window_s: self.state.window_s,
            // Two points a column at most: the lowest and the highest value in it.
            columns: (DRAWN_POINTS / 2 / self.signals.list().len().max(1)).clamp(1, (w as usize).max(1)),
        };
        if self.field_series.as_ref().is_none_or(|s| s.key != key) {
            let lines = self
                .signals
                .list()
                .iter()
                .map(|s| {
                    let p = s.points();
                    let start = p.partition_point(|q| q.0 < end - key.window_s);
                    // NaN and infinities have no place on the axis (the row shows them as the latest value).
                    let pts: Vec<(f64, f64)> = p
                        .range(start..)
                        .filter(|q| q.0 <= end + 1e-6 && q.1.is_finite())
                        .map(|q| (q.0 - end, q.1))
                        .collect();
                    let col = |x: f64| (((x + key.window_s) / key.window_s) * key.columns as f64).max(0.0) as usize;
                    decimate(&pts, col, |t| *t)
                })
                .collect();
            self.field_series = Some(FieldSeries { key, lines });
        }
        let Some(series) = self.field_series.as_ref() else { return };
        let window_s = self.state.window_s;
        let h = ui.available_height().max(150.0);
        let plot = Plot::new("field plot")
            .height(h)
            .width(w)
            .include_x(-window_s)
            .include_x(0.0)
            .x_axis_formatter(|m, _| format!("{:.0} s", m.value))
            .allow_scroll(false);
        let labels: Vec<(Arc<str>, Color32)> = self
            .signals
            .list()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name =
                    if stale[i] { format!("{} (no publisher)", shown(&s.label)) } else { shown(&s.label).into() };
                (Arc::from(name), if stale[i] { STALE_TEXT } else { signal_color(i) })
            })
            .collect();
        show_plot(ui, plot, move |p| {
            for ((name, color), pts) in labels.iter().zip(&series.lines) {
                // One pixel wide: a thin line is tessellated into fewer triangles.
                p.line(Line::new(&**name, PlotPoints::Borrowed(pts)).color(*color).width(1.0));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::fmt_value;

    #[test]
    fn values_show_four_decimals_at_most() {
        assert_eq!(fmt_value(0.717_356_090_899_522_8), "0.7174");
        assert_eq!(fmt_value(9.81), "9.81");
        assert_eq!(fmt_value(2.0), "2");
        assert_eq!(fmt_value(-0.5), "-0.5");
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(1_700_000_000_000_000.0), "1.700e15");
        assert_eq!(fmt_value(0.000_012), "1.200e-5");
        assert_eq!(fmt_value(f64::NAN), "NaN");
    }
}
