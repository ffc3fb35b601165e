//! The Graph tab: publishing processes, topics and subscribing processes as a node-link diagram; below the topics,
//! in the same style, each service between the processes of its clients (left) and of its servers (right).

use std::collections::HashMap;
use std::sync::Arc;

use egui::{Color32, RichText, Sense};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::order::Order;
use super::widgets::{health_color, health_fill};
use crate::model::{Health, View};

/// The graph draws at most this many topics (filter to see others).
pub const MAX_GRAPH_TOPICS: usize = 60;
/// And at most this many services.
pub const MAX_GRAPH_SERVICES: usize = 30;

/// A node of the middle column.
#[derive(Debug, Clone, Copy)]
enum Middle {
    /// Index into the view's topics.
    Topic(usize),
    /// Index into the view's services.
    Service(usize),
}

/// The Graph's nodes and edges, found once per [`Order`].
#[derive(Debug)]
pub(super) struct GraphLayout {
    order_version: u64,
    /// The first [`MAX_GRAPH_TOPICS`] topics in the table's order, then the first [`MAX_GRAPH_SERVICES`] services.
    middle: Vec<Middle>,
    /// Publishing and calling processes, in order of first use, with their health.
    left: Vec<(Arc<str>, Health)>,
    /// Subscribing and serving processes.
    right: Vec<(Arc<str>, Health)>,
    /// (process, middle node, is on the left, health): indices into `left` or `right`, and `middle`.
    edges: Vec<(usize, usize, bool, Health)>,
}

impl GraphLayout {
    fn new(view: &View, order: &Order) -> GraphLayout {
        let mut middle: Vec<Middle> = order.topics.iter().take(MAX_GRAPH_TOPICS).map(|&t| Middle::Topic(t)).collect();
        middle.extend(order.services.iter().take(MAX_GRAPH_SERVICES).map(|&s| Middle::Service(s)));
        let mut left: Vec<(Arc<str>, Health)> = Vec::new();
        let mut right: Vec<(Arc<str>, Health)> = Vec::new();
        // A process is one node per side, whether it publishes or calls (subscribes or serves).
        let mut slot: HashMap<(bool, Arc<str>), usize> = HashMap::new();
        let mut edges = Vec::new();
        let health: HashMap<(&str, u32), Health> =
            view.processes.iter().map(|p| ((&*p.host, p.pid), p.problems.health())).collect();
        let proc_health = |host: &str, pid: u32| health.get(&(host, pid)).copied().unwrap_or(Health::Warning);
        let mut add = |on_left: bool, process: &Arc<str>, process_health: Health, mi: usize, h: Health| {
            let side = if on_left { &mut left } else { &mut right };
            let pi = *slot.entry((on_left, process.clone())).or_insert_with(|| {
                side.push((process.clone(), process_health));
                side.len() - 1
            });
            edges.push((pi, mi, on_left, h));
        };
        for (mi, m) in middle.iter().enumerate() {
            match *m {
                Middle::Topic(t) => {
                    let t = &view.topics[t];
                    for e in view.entities_of(&t.name) {
                        let ph = proc_health(&e.host, e.pid);
                        add(e.direction == "pub", &e.process, ph, mi, t.problems.health());
                    }
                }
                Middle::Service(s) => {
                    let s = &view.services[s];
                    for e in view.endpoints_of(&s.name) {
                        let ph = proc_health(&e.host, e.pid);
                        add(e.role == "client", &e.process, ph, mi, s.problems.health());
                    }
                }
            }
        }
        GraphLayout { order_version: order.version, middle, left, right, edges }
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
        if self.order.services.len() > MAX_GRAPH_SERVICES {
            ui.label(format!(
                "Showing {MAX_GRAPH_SERVICES} of {} services; filter to see others.",
                self.order.services.len()
            ));
        }
        ui.label(
            "Publishing processes -> topics -> subscribing processes; calling processes -> services -> serving \
             processes; colour: green ok, orange warning, red error.",
        );
        if self.graph_layout.as_ref().is_none_or(|g| g.order_version != self.order.version) {
            self.graph_layout = Some(GraphLayout::new(view, &self.order));
        }
        let Some(g) = self.graph_layout.as_ref() else { return };
        // The middle column's nodes: (label, health, selected, topic or service).
        let middle: Vec<(String, Health, bool, Middle)> = g
            .middle
            .iter()
            .map(|&m| match m {
                Middle::Topic(i) => {
                    let t = &view.topics[i];
                    let sel = self.state.selected.as_deref() == Some(&*t.name);
                    (t.name.to_string(), t.problems.health(), sel, m)
                }
                Middle::Service(i) => {
                    let s = &view.services[i];
                    let sel = self.state.selected_service.as_deref() == Some(&*s.name);
                    (format!("{} (service)", s.name), s.problems.health(), sel, m)
                }
            })
            .collect();
        let (left, right, edges) = (&g.left, &g.right, &g.edges);
        let rows = middle.len().max(left.len()).max(right.len()).max(1);
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
            for &(pi, mi, on_left, h) in edges {
                let (a, b) = if on_left {
                    (egui::pos2(xs[0] + col_w, y_of(pi, left.len())), egui::pos2(xs[1], y_of(mi, middle.len())))
                } else {
                    (egui::pos2(xs[1] + col_w, y_of(mi, middle.len())), egui::pos2(xs[2], y_of(pi, right.len())))
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
            for (i, (label, h, sel, m)) in middle.iter().enumerate() {
                if node(ui, xs[1], y_of(i, middle.len()), label, *h, *sel) {
                    clicked = Some(*m);
                }
            }
            clicked
        });
        match clicked.inner {
            Some(Middle::Topic(i)) => {
                let name = view.topics[i].name.clone();
                self.select_topic(Some(&name));
            }
            Some(Middle::Service(i)) => {
                let name = view.services[i].name.clone();
                self.select_service(Some(&name));
            }
            None => {}
        }
    }
}
