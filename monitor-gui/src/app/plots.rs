//! The Topic tab's plots: rate, bandwidth, latency over the window and the latency histogram, from series found
//! once per view at most two points per pixel column.

use std::sync::Arc;

use egui::Color32;
use egui_plot::{Bar, BarChart, FilledArea, Legend, Line, Plot, PlotPoint, PlotPoints};

use super::MonitorApp;
use crate::history::History;
use crate::model::{ConnKey, View, fmt_bytes, fmt_us};

/// What the Topic view's plot series depend on.
#[derive(Debug, Clone, PartialEq)]
struct SeriesKey {
    generation: u64,
    end: f64,
    topic: Arc<str>,
    connection: Option<ConnKey>,
    window_s: f64,
    columns: usize,
}

/// The Topic view's plot series over the window, at most two points per pixel column (the lowest and the highest
/// of the views that fall in it), found once per new view: minutes of history at a fast refresh draw as few
/// vertices as a short window.
#[derive(Debug)]
pub(super) struct Series {
    key: SeriesKey,
    rate: Vec<PlotPoint>,
    bandwidth: Vec<PlotPoint>,
    /// P50, P90, P99, max.
    latency: [Vec<PlotPoint>; 4],
    /// The P50–P99 band: per column its middle time, lowest P50 and highest P99.
    band_x: Vec<f64>,
    band_lo: Vec<f64>,
    band_hi: Vec<f64>,
}

impl Series {
    fn new(history: &History, key: SeriesKey) -> Series {
        let (end, start) = (key.end, key.end - key.window_s);
        let name = &*key.topic;
        let mut traffic = Vec::new(); // (x, rate, bandwidth)
        let mut lat = Vec::new(); // (x, p50, p90, p99, max)
        for v in history.views().filter(|v| v.time_s >= start && v.time_s <= end + 1e-6) {
            let x = v.time_s - end;
            let (r, b, l) = match key.connection {
                None => match v.topic(name) {
                    Some(t) => (t.rate_hz, t.bandwidth_bps, t.latency),
                    None => continue,
                },
                Some(k) => match v.connections_of(name).find(|c| c.key() == k) {
                    Some(c) => (c.rate_hz, c.bandwidth_bps, c.latency),
                    None => continue,
                },
            };
            traffic.push((x, r, b));
            if let Some(l) = l {
                lat.push((x, [l.p50_us, l.p90_us, l.p99_us, l.max_us]));
            }
        }
        // x is relative to the window's end (-window_s ..= 0): column 0 at the window's start.
        let col = |x: f64| (((x + key.window_s) / key.window_s.max(1e-9)) * key.columns as f64).max(0.0) as usize;
        let rate = decimate(&traffic, col, |t| (t.0, t.1));
        let bandwidth = decimate(&traffic, col, |t| (t.0, t.2));
        let latency = std::array::from_fn(|i| decimate(&lat, col, |t| (t.0, t.1[i])));
        let (mut band_x, mut band_lo, mut band_hi) = (Vec::new(), Vec::new(), Vec::new());
        for run in lat.chunk_by(|a, b| col(a.0) == col(b.0)) {
            let (first, last) = (run[0].0, run[run.len() - 1].0);
            band_x.push((first + last) / 2.0);
            band_lo.push(run.iter().map(|t| t.1[0]).fold(f64::INFINITY, f64::min));
            band_hi.push(run.iter().map(|t| t.1[2]).fold(f64::NEG_INFINITY, f64::max));
        }
        Series { key, rate, bandwidth, latency, band_x, band_lo, band_hi }
    }
}

/// The points `(x, y)` that `get` takes from `items` (in time order), at most two per column `col(x)`: the lowest
/// and the highest, in time order (one when they are the same point).
pub(super) fn decimate<T>(items: &[T], col: impl Fn(f64) -> usize, get: impl Fn(&T) -> (f64, f64)) -> Vec<PlotPoint> {
    let mut out = Vec::new();
    for run in items.chunk_by(|a, b| col(get(a).0) == col(get(b).0)) {
        let pts = run.iter().map(&get);
        let lo = pts.clone().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or_default();
        let hi = pts.max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or_default();
        let (a, b) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
        out.push(PlotPoint::new(a.0, a.1));
        if b.0 != a.0 {
            out.push(PlotPoint::new(b.0, b.1));
        }
    }
    out
}

impl MonitorApp {
    pub(super) fn plots(&mut self, ui: &mut egui::Ui, view: &View, name: &str) {
        let h = ((ui.available_height() - 40.0) / 2.0).max(120.0);
        let w = (ui.available_width() / 2.0 - 8.0).max(200.0);
        let key = SeriesKey {
            generation: self.history.generation(),
            end: view.time_s,
            topic: name.into(),
            connection: self.state.connection,
            window_s: self.state.window_s,
            // About one point per pixel column of the plot (egui points; the plots' frame takes a few).
            columns: (w as usize).max(1),
        };
        if self.series.as_ref().is_none_or(|s| s.key != key) {
            self.series = Some(Series::new(&self.history, key));
        }
        let Some(s) = self.series.as_ref() else { return };
        let buckets = match self.state.connection {
            None => view.topic(name).map(|t| t.buckets.clone()),
            Some(k) => view.connections_of(name).find(|c| c.key() == k).map(|c| c.buckets.clone()),
        };
        ui.horizontal(|ui| {
            ui.vertical(|ui| {
                ui.label("Rate (messages/s)");
                show_plot(ui, time_plot("rate", h, w, self.state.window_s), |p| {
                    p.line(Line::new("rate", PlotPoints::Borrowed(&s.rate)));
                });
            });
            ui.vertical(|ui| {
                ui.label("Bandwidth (bytes/s)");
                let plot =
                    time_plot("bandwidth", h, w, self.state.window_s).y_axis_formatter(|m, _| fmt_bytes(m.value));
                show_plot(ui, plot, |p| p.line(Line::new("bandwidth", PlotPoints::Borrowed(&s.bandwidth))));
            });
        });
        let has_histogram = buckets.as_ref().is_some_and(|b| b.iter().next().is_some());
        if s.latency[0].is_empty() && !has_histogram {
            // No figure where there is no measurement: no axes to read a latency from.
            ui.label(NO_LATENCY);
            return;
        }
        ui.horizontal(|ui| {
            ui.vertical(|ui| {
                ui.label("Latency (µs): P50–P99 band, P90, max");
                show_plot(ui, time_plot("latency", h, w, self.state.window_s).legend(Legend::default()), |p| {
                    if !s.band_x.is_empty() {
                        p.add(
                            FilledArea::new("P50–P99", &s.band_x, &s.band_lo, &s.band_hi)
                                .fill_color(Color32::from_rgba_unmultiplied(80, 140, 255, 60)),
                        );
                    }
                    for (n, pts) in ["P50", "P90", "P99", "max"].into_iter().zip(&s.latency) {
                        p.line(Line::new(n, PlotPoints::Borrowed(pts)));
                    }
                });
            });
            ui.vertical(|ui| {
                ui.label("Latency histogram of the last window (log µs)");
                let bars: Vec<Bar> = buckets
                    .iter()
                    .flat_map(|b| b.iter())
                    .map(|&(lo, hi, c)| {
                        let (l, u) = (
                            (lo.max(1) as f64 / 1000.0).log10(),
                            (hi.min(lo.saturating_mul(2).max(lo + 1)) as f64 / 1000.0).log10(),
                        );
                        Bar::new((l + u) / 2.0, f64::from(c))
                            .width((u - l).max(0.01))
                            .fill(Color32::from_rgb(80, 140, 255))
                    })
                    .collect();
                let plot = Plot::new("histogram")
                    .height(h)
                    .width(w)
                    .grid_spacing(egui::Rangef::new(GRID_MIN_SPACING, 300.0))
                    .include_y(0.0)
                    .allow_scroll(false)
                    .x_axis_formatter(|m, _| fmt_us(10f64.powf(m.value)));
                show_plot(ui, plot, |p| p.add(BarChart::new("count", bars).color(Color32::from_rgb(80, 140, 255))));
            });
        });
    }
}

/// What the Topic view says instead of latency plots when nothing measured one in the window.
pub(super) const NO_LATENCY: &str = "No latency measured in this window: latency plots need a shoal subscriber on the \
    publisher's host (eCAL subscribers announce only a mean since they started, shown in the Overview as \"eCAL mean\").";

/// Grid lines closer than this many points are not drawn (egui_plot's default, 8, draws a faint line per second of
/// a one-minute window: about half the triangles of a time plot, under software GL a cost by the line).
const GRID_MIN_SPACING: f32 = 24.0;

/// A plot over the last `window_s` seconds (x: seconds before the shown view), from 0 up.
fn time_plot(id: &str, height: f32, width: f32, window_s: f64) -> Plot<'static> {
    Plot::new(id)
        .height(height)
        .width(width)
        .grid_spacing(egui::Rangef::new(GRID_MIN_SPACING, 300.0))
        .include_x(-window_s)
        .include_x(0.0)
        .include_y(0.0)
        .x_axis_formatter(|m, _| format!("{:.0} s", m.value))
        .allow_scroll(false)
}

/// Shows `plot` without the filled background egui_plot gives it, with the background's outline drawn instead:
/// under software GL the Topic view's four filled plot backgrounds cost as much as the rest of it.
pub(super) fn show_plot<'a>(ui: &mut egui::Ui, plot: Plot<'a>, build: impl FnOnce(&mut egui_plot::PlotUi<'a>) + 'a) {
    let r = plot.show_background(false).show(ui, build);
    let stroke = ui.visuals().widgets.noninteractive.bg_stroke;
    ui.painter().rect_stroke(*r.transform.frame(), 2.0, stroke, egui::StrokeKind::Inside);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimate_keeps_each_columns_lowest_and_highest_in_time_order() {
        // 5 minutes at 50 ms: 6000 points onto 600 columns.
        let items: Vec<(f64, f64)> = (0..6000).map(|i| (f64::from(i) * 0.05, f64::from((i * 37) % 101))).collect();
        let col = |x: f64| (x / 300.0 * 600.0) as usize;
        let pts = decimate(&items, col, |t| *t);
        assert!((600..=1200).contains(&pts.len()), "{} points", pts.len());
        assert!(pts.windows(2).all(|w| w[0].x < w[1].x), "in time order");
        for c in [0, 17, 599] {
            let run: Vec<f64> = items.iter().filter(|t| col(t.0) == c).map(|t| t.1).collect();
            let kept: Vec<f64> = pts.iter().filter(|p| col(p.x) == c).map(|p| p.y).collect();
            let lo = run.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = run.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert!(kept.contains(&lo) && kept.contains(&hi), "column {c}: {kept:?} lacks {lo} or {hi}");
        }
    }

    #[test]
    fn decimate_leaves_a_short_series_alone() {
        let items: Vec<(f64, f64)> = (0..60).map(|i| (f64::from(i) - 60.0, f64::from(i * i))).collect();
        let pts = decimate(&items, |x| ((x + 60.0) * 10.0) as usize, |t| *t);
        let back: Vec<(f64, f64)> = pts.iter().map(|p| (p.x, p.y)).collect();
        assert_eq!(back, items);
    }
}
