//! The Graph tab: publishing processes, topics and subscribing processes as a node-link diagram.

use std::sync::Arc;

use egui::{Color32, RichText, Sense};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::order::Order;
use super::widgets::{health_color, health_fill};
use crate::model::{Health, TopicRow, View};

/// The graph draws at most this many topics (filter to see others).
pub const MAX_GRAPH_TOPICS: usize = 60;

/// The Graph's nodes and edges, found once per [`Order`].
#[derive(Debug)]
pub(super) struct GraphLayout {
    order_version: u64,
    /// Indices into the view's topics (the first [`MAX_GRAPH_TOPICS`] in the table's order).
    topics: Vec<usize>,
    /// Publishing processes, in order of first use, with their health.
    left: Vec<(Arc<str>, Health)>,
    /// Subscribing processes.
    right: Vec<(Arc<str>, Health)>,
    /// (process, topic, is publisher, health): indices into `left` or `right`, and `topics`.
    edges: Vec<(usize, usize, bool, Health)>,
}

impl GraphLayout {
    fn new(view: &View, order: &Order) -> GraphLayout {
        let topics: Vec<usize> = order.topics.iter().take(MAX_GRAPH_TOPICS).copied().collect();
        let mut left: Vec<(Arc<str>, Health)> = Vec::new();
        let mut right: Vec<(Arc<str>, Health)> = Vec::new();
        let mut slot: std::collections::HashMap<(bool, &str), usize> = std::collections::HashMap::new();
        let mut edges = Vec::new();
        let health: std::collections::HashMap<(&str, u32), Health> =
            view.processes.iter().map(|p| ((&*p.host, p.pid), p.problems.health())).collect();
        for (ti, &t) in topics.iter().enumerate() {
            let t = &view.topics[t];
            for e in view.entities_of(&t.name) {
                let is_pub = e.direction == "pub";
                let side = if is_pub { &mut left } else { &mut right };
                let pi = *slot.entry((is_pub, &*e.process)).or_insert_with(|| {
                    side.push((e.process.clone(), health.get(&(&*e.host, e.pid)).copied().unwrap_or(Health::Warning)));
                    side.len() - 1
                });
                edges.push((pi, ti, is_pub, t.problems.health()));
            }
        }
        GraphLayout { order_version: order.version, topics, left, right, edges }
    }
}

impl MonitorApp {
    pub(super) fn graph(&mut self, ui: &mut egui::Ui, view: &View) {
        if self.order.topics.len() > MAX_GRAPH_TOPICS {
            ui.label(format!(
                "Showing {MAX_GRAPH_TOPICS} of {} topics; filter to see others.",
                self.order.topics.len()
            ));
        }
        ui.label(
            "Publishing processes -> topics -> subscribing processes; colour: green ok, orange warning, red error.",
        );
        if self.graph_layout.as_ref().is_none_or(|g| g.order_version != self.order.version) {
            self.graph_layout = Some(GraphLayout::new(view, &self.order));
        }
        let Some(g) = self.graph_layout.as_ref() else { return };
        let topics: Vec<&TopicRow> = g.topics.iter().map(|&i| &view.topics[i]).collect();
        let (left, right, edges) = (&g.left, &g.right, &g.edges);
        let rows = topics.len().max(left.len()).max(right.len()).max(1);
        let spacing = 28.0;
        let clicked = egui::ScrollArea::vertical().auto_shrink(false).show(ui, |ui| {
            let width = ui.available_width();
            let (rect, _) = ui.allocate_exact_size(egui::vec2(width, rows as f32 * spacing + 20.0), Sense::hover());
            let col_w = (width / 4.0).min(260.0);
            let xs = [rect.left() + 10.0, rect.center().x - col_w / 2.0, rect.right() - col_w - 10.0];
            let y_of = |i: usize, n: usize| {
                let step = (rect.height() - 20.0) / n.max(1) as f32;
                rect.top() + 10.0 + step * (i as f32 + 0.5)
            };
            let painter = ui.painter_at(rect);
            for &(pi, ti, is_pub, h) in edges {
                let (a, b) = if is_pub {
                    (egui::pos2(xs[0] + col_w, y_of(pi, left.len())), egui::pos2(xs[1], y_of(ti, topics.len())))
                } else {
                    (egui::pos2(xs[1] + col_w, y_of(ti, topics.len())), egui::pos2(xs[2], y_of(pi, right.len())))
                };
                painter.line_segment([a, b], egui::Stroke::new(1.5, health_color(h).gamma_multiply(0.7)));
            }
            // Only the nodes in sight of the scroll area are laid out (edges off screen are culled when
            // tessellated).
            let visible = ui.clip_rect();
            let node = |ui: &mut egui::Ui, x: f32, y: f32, text: &str, h: Health, selected: bool| {
                let r = egui::Rect::from_center_size(egui::pos2(x + col_w / 2.0, y), egui::vec2(col_w, spacing - 6.0));
                if !visible.intersects(r) {
                    ui.skip_ahead_auto_ids(1); // the nodes in sight keep their ids while scrolling
                    return false;
                }
                // Square corners: a rounded node has several times the triangles to rasterise.
                let b = egui::Button::new(RichText::new(shown(text)).color(Color32::BLACK))
                    .corner_radius(0.0)
                    .fill(health_fill(h))
                    .stroke(if selected { egui::Stroke::new(2.0, Color32::WHITE) } else { egui::Stroke::NONE })
                    .truncate();
                ui.put(r, b).clicked()
            };
            for (i, (l, h)) in left.iter().enumerate() {
                node(ui, xs[0], y_of(i, left.len()), l, *h, false);
            }
            for (i, (l, h)) in right.iter().enumerate() {
                node(ui, xs[2], y_of(i, right.len()), l, *h, false);
            }
            let mut clicked = None;
            for (i, t) in topics.iter().enumerate() {
                let sel = self.state.selected.as_deref() == Some(&*t.name);
                if node(ui, xs[1], y_of(i, topics.len()), &t.name, t.problems.health(), sel) {
                    clicked = Some(t.name.clone());
                }
            }
            clicked
        });
        if let Some(c) = clicked.inner {
            self.select_topic(Some(&c));
        }
    }
}
