//! The Graph tab: publishing processes, topics and subscribing processes as a node-link diagram; among the topics,
//! in the same style, each service between the processes of its clients (left) and of its servers (right).
//!
//! It shows what the tables' filter and "Problems only" let through, every topic and service of it, none dropped:
//! - With more than [`GROUP_ABOVE`] topics (or services), those whose names share a first segment (`/robot1/…`,
//!   `demo.…`) are one group node, labelled with its count, how many are live and how many have problems, and
//!   coloured by its worst member; a click expands or collapses it. A process links to a group when it links to one
//!   of its members; a collapsed group's processes not shown for another reason are one "+N processes" node per
//!   side when there are more than [`PROCESSES_ABOVE`] (coloured by the worst of them; a click expands the group).
//! - The middle column puts problems first, then live nodes (traffic now), then the rest in the table's order; each
//!   process sits level with the nodes it links to, as far as the column allows.
//! - Focus: on the selected topic or service, or on a clicked process, the graph shows only it and its direct
//!   neighbours; a click on another topic there moves the focus to it.
//! - A canvas that pans (drag, scroll) and zooms (ctrl+scroll, pinch, buttons); a new layout (focus, expansion,
//!   filter) starts zoomed to fit the height where its text stays readable, from the top, or from the group just
//!   expanded or collapsed when that would be out of sight. Only what is in sight is laid out and
//!   drawn: nodes off the canvas are skipped, an edge is drawn when one of its ends is in sight (at most
//!   [`MAX_EDGES_DRAWN`], the rest counted on screen: a process linked to thousands of topics is a fan), node boxes are one mesh of square rectangles and, zoomed
//!   out below [`TEXT_ZOOM`], labels are left out and edges are plain quads: the triangles a frame costs stay
//!   bounded at any size.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use egui::emath::GuiRounding as _;
use egui::{Color32, Pos2, Rect, RichText, Sense, Vec2, pos2, vec2};
use shoal::monitor::printable as shown;

use super::MonitorApp;
use super::order::Order;
use super::widgets::{health_color, health_fill};
use crate::model::{Health, View};

/// Above this many topics (or services) that pass the filter, the graph groups them by name prefix.
pub const GROUP_ABOVE: usize = 40;
/// A collapsed group with more processes than this on one side shows them as one "+N processes" node.
pub const PROCESSES_ABOVE: usize = 6;
/// Below this zoom the labels are left out (and edges are drawn without anti-aliasing).
pub const TEXT_ZOOM: f32 = 0.6;
/// At most this many edges are drawn in a frame (anti-aliased, 4 triangles each); zoomed out below [`TEXT_ZOOM`],
/// twice as many (plain quads, 2 triangles each).
pub const MAX_EDGES_DRAWN: usize = 600;
/// The zoom range.
const ZOOM: std::ops::RangeInclusive<f32> = 0.1..=2.0;
/// Row spacing at zoom 1, in points.
const SPACING: f32 = 28.0;
/// Node height at zoom 1.
const NODE_H: f32 = 22.0;
/// Margin around the content at zoom 1.
const MARGIN: f32 = 10.0;

/// What the graph is narrowed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Focus {
    /// A topic and its publishing and subscribing processes.
    Topic(Arc<str>),
    /// A service and its clients' and servers' processes.
    Service(Arc<str>),
    /// A process (its label, `unit@host:pid`) and the topics and services it takes part in.
    Process(Arc<str>),
}

/// A topic or a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Index into the view's topics.
    Topic(usize),
    /// Index into the view's services.
    Service(usize),
}

/// A node of the diagram.
#[derive(Debug, Clone)]
enum NodeKind {
    Member(Member),
    /// Index into the layout's groups.
    Group(usize),
    /// A process label.
    Process(Arc<str>),
    /// The processes of a collapsed group (index into the groups) that are not shown for another reason.
    More(usize),
}

#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    label: String,
    health: Health,
    /// Position in the column, in rows (fractional for processes placed level with their nodes).
    row: f32,
}

#[derive(Debug)]
struct Group {
    prefix: String,
    services: bool,
}

/// The Graph's view state: focus, expanded groups, pan and zoom, and the layout found for them.
#[derive(Debug)]
pub(super) struct GraphState {
    focus: Option<Focus>,
    /// Expanded groups: (is a service group, prefix).
    expanded: HashSet<(bool, String)>,
    /// Offset of the content on the canvas, in points.
    pan: Vec2,
    zoom: f32,
    /// The layout needs to be shown whole again (pan and zoom reset) at the next frame.
    refit: bool,
    /// The group whose node the next refit puts at the top (the one just expanded or collapsed).
    reveal: Option<(bool, String)>,
    layout: Option<GraphLayout>,
}

impl Default for GraphState {
    fn default() -> Self {
        GraphState {
            focus: None,
            expanded: HashSet::new(),
            pan: Vec2::ZERO,
            zoom: 1.0,
            refit: true,
            reveal: None,
            layout: None,
        }
    }
}

#[derive(Debug, PartialEq)]
struct LayoutKey {
    order_version: u64,
    /// The filter and "Problems only" the order was found for.
    filter: (String, bool),
    focus: Option<Focus>,
    expanded: Vec<(bool, String)>,
}

/// The Graph's nodes and edges, found once per [`Order`], focus and set of expanded groups.
#[derive(Debug)]
struct GraphLayout {
    key: LayoutKey,
    groups: Vec<Group>,
    /// Left (publishing, calling), middle (topics, services, groups), right (subscribing, serving).
    columns: [Vec<Node>; 3],
    /// (column 0 or 2, index into it, index into the middle column, health).
    edges: Vec<(u8, u32, u32, Health)>,
    /// Topics and services shown (directly or in a group), and of them how many in collapsed groups.
    members: usize,
    in_collapsed: usize,
}

/// The first segment of a name (`/robot1` of `/robot1/imu`, `demo` of `demo.A`); `None` for a name of one segment.
pub fn name_prefix(name: &str) -> Option<&str> {
    let lead = usize::from(name.starts_with('/'));
    let cut = name[lead..].find(['/', '.'])?;
    (cut > 0).then(|| &name[..lead + cut])
}

fn is_live(view: &View, m: Member) -> bool {
    match m {
        Member::Topic(t) => {
            let t = &view.topics[t];
            t.rate_hz > 0.0 && t.stale_figures_s.is_none()
        }
        Member::Service(s) => view.services[s].call_rate_hz.is_some_and(|r| r > 0.0),
    }
}

fn health_of(view: &View, m: Member) -> Health {
    match m {
        Member::Topic(t) => view.topics[t].problems.health(),
        Member::Service(s) => view.services[s].problems.health(),
    }
}

fn name_of(view: &View, m: Member) -> &Arc<str> {
    match m {
        Member::Topic(t) => &view.topics[t].name,
        Member::Service(s) => &view.services[s].name,
    }
}

/// The processes of a member: (label, on the left, host, pid).
fn processes_of<'a>(view: &'a View, m: Member) -> Box<dyn Iterator<Item = (&'a Arc<str>, bool, &'a str, u32)> + 'a> {
    match m {
        Member::Topic(t) => Box::new(
            view.entities_of(&view.topics[t].name).map(|e| (&e.process, e.direction == "pub", &*e.host, e.pid)),
        ),
        Member::Service(s) => Box::new(
            view.endpoints_of(&view.services[s].name).map(|e| (&e.process, e.role == "client", &*e.host, e.pid)),
        ),
    }
}

impl GraphLayout {
    fn new(view: &View, order: &Order, key: LayoutKey) -> GraphLayout {
        let health: HashMap<(&str, u32), Health> =
            view.processes.iter().map(|p| ((&*p.host, p.pid), p.problems.health())).collect();
        let proc_health = |host: &str, pid: u32| health.get(&(host, pid)).copied().unwrap_or(Health::Warning);
        // The members shown: what passes the filter, or what the focus keeps.
        let mut topics: Vec<Member> = order.topics.iter().map(|&t| Member::Topic(t)).collect();
        let mut services: Vec<Member> = order.services.iter().map(|&s| Member::Service(s)).collect();
        let mut only_process: Option<&Arc<str>> = None;
        match &key.focus {
            None => {}
            Some(Focus::Topic(name)) => {
                topics = view.topics.iter().position(|t| t.name == *name).map(Member::Topic).into_iter().collect();
                services.clear();
            }
            Some(Focus::Service(name)) => {
                topics.clear();
                services =
                    view.services.iter().position(|s| s.name == *name).map(Member::Service).into_iter().collect();
            }
            Some(Focus::Process(p)) => {
                only_process = Some(p);
                let takes_part = |m: Member| processes_of(view, m).any(|(l, ..)| l == p);
                topics = (0..view.topics.len()).map(Member::Topic).filter(|&m| takes_part(m)).collect();
                services = (0..view.services.len()).map(Member::Service).filter(|&m| takes_part(m)).collect();
            }
        }
        // Problems first, then live ones, then the table's order (the sort is stable).
        let rank = |m: &Member| (std::cmp::Reverse(health_of(view, *m)), !is_live(view, *m));
        topics.sort_by_key(rank);
        services.sort_by_key(rank);
        let members = topics.len() + services.len();

        // The middle column: members, or groups of them.
        let mut groups: Vec<Group> = Vec::new();
        let mut middle: Vec<Node> = Vec::new();
        // For each middle node, its members (a collapsed group: all of its own).
        let mut middle_members: Vec<Vec<Member>> = Vec::new();
        let mut in_collapsed = 0;
        for (list, is_service) in [(&topics, false), (&services, true)] {
            let grouped = list.len() > GROUP_ABOVE;
            let mut by_prefix: HashMap<&str, Vec<Member>> = HashMap::new();
            if grouped {
                for &m in list.iter() {
                    if let Some(p) = name_prefix(name_of(view, m)) {
                        by_prefix.entry(p).or_default().push(m);
                    }
                }
                by_prefix.retain(|_, v| v.len() > 1);
            }
            let mut placed: HashSet<&str> = HashSet::new();
            for &m in list.iter() {
                let name = name_of(view, m);
                let prefix = name_prefix(name).filter(|p| by_prefix.contains_key(p));
                let Some(prefix) = prefix else {
                    let label = if is_service { format!("{} (service)", shown(name)) } else { shown(name).to_string() };
                    middle.push(Node { kind: NodeKind::Member(m), label, health: health_of(view, m), row: 0.0 });
                    middle_members.push(vec![m]);
                    continue;
                };
                if !placed.insert(prefix) {
                    continue;
                }
                // The group takes the place of its first (highest ranked) member.
                let ms = by_prefix[prefix].clone();
                let expanded = key.expanded.iter().any(|(s, p)| *s == is_service && p == prefix);
                let live = ms.iter().filter(|&&m| is_live(view, m)).count();
                let bad = ms.iter().filter(|&&m| health_of(view, m) != Health::Ok).count();
                let worst = ms.iter().map(|&m| health_of(view, m)).max().unwrap_or(Health::Ok);
                let what = if is_service { "services" } else { "topics" };
                let mut label = format!(
                    "{} {}… {} {what} · {live} live",
                    if expanded { "-" } else { "+" },
                    shown(prefix),
                    ms.len()
                );
                if bad > 0 {
                    label.push_str(&format!(" · {bad} with problems"));
                }
                let gi = groups.len();
                middle.push(Node { kind: NodeKind::Group(gi), label, health: worst, row: 0.0 });
                if expanded {
                    middle_members.push(Vec::new());
                    for &m in &ms {
                        let n = name_of(view, m);
                        let label = if is_service { format!("{} (service)", shown(n)) } else { shown(n).to_string() };
                        middle.push(Node { kind: NodeKind::Member(m), label, health: health_of(view, m), row: 0.0 });
                        middle_members.push(vec![m]);
                    }
                } else {
                    in_collapsed += ms.len();
                    middle_members.push(ms.clone());
                }
                groups.push(Group { prefix: prefix.to_string(), services: is_service });
            }
        }
        for (i, n) in middle.iter_mut().enumerate() {
            n.row = i as f32;
        }

        // The processes: each once per side. A collapsed group's processes are shown one by one when there are
        // few of them or when they are shown for another reason; the others are one "+N processes" node.
        let mut sides = [Side::default(), Side::default()];
        let mut edges: Vec<(u8, u32, u32, Health)> = Vec::new();
        let keep = |label: &Arc<str>| only_process.is_none_or(|p| p == label);
        // Pass 1: processes of single members and of small collapsed groups.
        let mut big: Vec<usize> = Vec::new();
        for (mi, ms) in middle_members.iter().enumerate() {
            let collapsed_group = matches!(middle[mi].kind, NodeKind::Group(_));
            let procs: Vec<_> = ms.iter().flat_map(|&m| processes_of(view, m)).filter(|(l, ..)| keep(l)).collect();
            if collapsed_group {
                let distinct = |left: bool| procs.iter().filter(|p| p.1 == left).map(|p| p.0).collect::<HashSet<_>>();
                if distinct(true).len() > PROCESSES_ABOVE || distinct(false).len() > PROCESSES_ABOVE {
                    big.push(mi);
                    continue;
                }
            }
            for (label, left, host, pid) in procs {
                sides[usize::from(!left)].add(label, proc_health(host, pid), mi);
            }
        }
        // Pass 2: big collapsed groups link to the processes already shown, and to one node for the others.
        let mut more: [Vec<(usize, usize, Health)>; 2] = [Vec::new(), Vec::new()];
        for &mi in &big {
            let NodeKind::Group(gi) = middle[mi].kind else { continue };
            for (s, left) in [(0, true), (1, false)] {
                let mut others: HashMap<&Arc<str>, Health> = HashMap::new();
                for (label, l, host, pid) in middle_members[mi].iter().flat_map(|&m| processes_of(view, m)) {
                    if l != left || !keep(label) {
                        continue;
                    }
                    match sides[s].slot.get(label) {
                        Some(&i) => {
                            if !sides[s].nodes[i].2.contains(&mi) {
                                sides[s].nodes[i].2.push(mi);
                            }
                        }
                        None => {
                            others.insert(label, proc_health(host, pid));
                        }
                    }
                }
                if !others.is_empty() {
                    let worst = others.values().copied().max().unwrap_or(Health::Ok);
                    more[s].push((gi, others.len(), worst));
                }
            }
        }
        let mut columns: [Vec<Node>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for (s, col) in [(0usize, 0usize), (1, 2)] {
            let mut nodes: Vec<(Node, Vec<usize>)> = std::mem::take(&mut sides[s].nodes)
                .into_iter()
                .map(|(label, h, mis)| {
                    (
                        Node { label: shown(&label).to_string(), kind: NodeKind::Process(label), health: h, row: 0.0 },
                        mis,
                    )
                })
                .collect();
            for &(gi, n, h) in &more[s] {
                let mi = middle.iter().position(|m| matches!(m.kind, NodeKind::Group(g) if g == gi)).unwrap_or(0);
                let label = format!("+{n} processes of {}…", shown(&groups[gi].prefix));
                nodes.push((Node { kind: NodeKind::More(gi), label, health: h, row: 0.0 }, vec![mi]));
            }
            // Level with the nodes they link to, in that order, one row apart.
            for (n, mis) in &mut nodes {
                n.row = mis.iter().sum::<usize>() as f32 / mis.len().max(1) as f32;
            }
            nodes.sort_by(|a, b| a.0.row.total_cmp(&b.0.row));
            let mut next = 0.0f32;
            for (i, (n, mis)) in nodes.iter_mut().enumerate() {
                n.row = n.row.max(next);
                next = n.row + 1.0;
                for &mi in mis.iter() {
                    edges.push((col as u8, i as u32, mi as u32, middle[mi].health));
                }
            }
            columns[col] = nodes.into_iter().map(|(n, _)| n).collect();
        }
        columns[1] = middle;
        GraphLayout { key, groups, columns, edges, members, in_collapsed }
    }

    /// Rows the tallest column takes.
    fn rows(&self) -> f32 {
        self.columns.iter().filter_map(|c| c.last()).map(|n| n.row + 1.0).fold(1.0, f32::max)
    }
}

/// The processes of one side while the layout is found: each once, with the middle nodes it links to.
#[derive(Default)]
struct Side {
    slot: HashMap<Arc<str>, usize>,
    nodes: Vec<(Arc<str>, Health, Vec<usize>)>,
}

impl Side {
    fn add(&mut self, label: &Arc<str>, h: Health, mi: usize) {
        let i = match self.slot.get(label) {
            Some(&i) => i,
            None => {
                self.nodes.push((label.clone(), h, Vec::new()));
                self.slot.insert(label.clone(), self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        if !self.nodes[i].2.contains(&mi) {
            self.nodes[i].2.push(mi);
        }
    }
}

/// What a click on the canvas asks for.
enum Clicked {
    Member(Member),
    Group(usize),
    Process(Arc<str>),
}

impl MonitorApp {
    pub(super) fn graph(&mut self, ui: &mut egui::Ui, view: &View) {
        let key = LayoutKey {
            order_version: self.order.version,
            filter: (self.state.filter.clone(), self.state.problems_only),
            focus: self.graph.focus.clone(),
            expanded: {
                let mut e: Vec<_> = self.graph.expanded.iter().cloned().collect();
                e.sort();
                e
            },
        };
        if self.graph.layout.as_ref().is_none_or(|g| g.key != key) {
            // A new focus, expansion or filter is shown whole; a new view of the same is not moved.
            let old = self.graph.layout.as_ref().map(|g| (&g.key.filter, &g.key.focus, &g.key.expanded));
            if old != Some((&key.filter, &key.focus, &key.expanded)) {
                self.graph.refit = true;
            }
            self.graph.layout = Some(GraphLayout::new(view, &self.order, key));
        }
        self.graph_bar(ui, view);
        match self.graph_canvas(ui, view) {
            Some(Clicked::Member(Member::Topic(i))) => {
                let name = view.topics[i].name.clone();
                self.select_topic(Some(&name));
                if self.graph.focus.is_some() {
                    self.graph.focus = Some(Focus::Topic(name));
                }
            }
            Some(Clicked::Member(Member::Service(i))) => {
                let name = view.services[i].name.clone();
                self.select_service(Some(&name));
                if self.graph.focus.is_some() {
                    self.graph.focus = Some(Focus::Service(name));
                }
            }
            Some(Clicked::Group(gi)) => {
                if let Some(g) = self.graph.layout.as_ref().and_then(|l| l.groups.get(gi)) {
                    let k = (g.services, g.prefix.clone());
                    if !self.graph.expanded.remove(&k) {
                        self.graph.expanded.insert(k.clone());
                    }
                    self.graph.reveal = Some(k);
                }
            }
            Some(Clicked::Process(p)) => self.graph.focus = Some(Focus::Process(p)),
            None => {}
        }
    }

    /// The lines above the canvas: what is shown, focus, zoom.
    fn graph_bar(&mut self, ui: &mut egui::Ui, view: &View) {
        let Some(g) = self.graph.layout.as_ref() else { return };
        let filtered = self.order.topics.len() < view.topics.len() || self.order.services.len() < view.services.len();
        let mut text = match &g.key.focus {
            Some(f) => {
                let what = match f {
                    Focus::Topic(n) | Focus::Service(n) | Focus::Process(n) => shown(n),
                };
                format!("Focus on {what}: it and its direct neighbours ({} topics and services)", g.members)
            }
            None if filtered => format!(
                "{} of {} topics and {} of {} services (filter)",
                self.order.topics.len(),
                view.topics.len(),
                self.order.services.len(),
                view.services.len()
            ),
            None => format!("{} topics and {} services", view.topics.len(), view.services.len()),
        };
        if g.in_collapsed > 0 {
            let groups = g.groups.len();
            text.push_str(&format!(
                "; {} of them in {} collapsed group{} (click a group to expand it)",
                g.in_collapsed,
                groups,
                if groups == 1 { "" } else { "s" }
            ));
        }
        ui.horizontal_wrapped(|ui| {
            ui.label(text);
            if self.graph.focus.is_some() {
                if ui.button("Show all").clicked() {
                    self.graph.focus = None;
                }
            } else if let Some(t) = self.state.selected.as_ref().filter(|t| view.topic(t).is_some()) {
                if ui.button(format!("Focus on {}", shown(t))).clicked() {
                    self.graph.focus = Some(Focus::Topic(t.clone()));
                }
            } else if let Some(s) = self.state.selected_service.as_ref().filter(|s| view.service(s).is_some())
                && ui.button(format!("Focus on {} (service)", shown(s))).clicked()
            {
                self.graph.focus = Some(Focus::Service(s.clone()));
            }
        });
        ui.label(
            "Publishing processes -> topics -> subscribing processes; calling processes -> services -> serving \
             processes; colour: green ok, orange warning, red error. Drag or scroll to pan, ctrl+scroll or pinch to \
             zoom; click a process to focus on it.",
        );
        ui.horizontal(|ui| {
            if ui.button("Zoom out").clicked() {
                self.graph.zoom = (self.graph.zoom / 1.5).clamp(*ZOOM.start(), *ZOOM.end());
            }
            if ui.button("Zoom in").clicked() {
                self.graph.zoom = (self.graph.zoom * 1.5).clamp(*ZOOM.start(), *ZOOM.end());
            }
            if ui.button("Fit").clicked() {
                self.graph.refit = true;
            }
            ui.label(format!("{:.0} %", self.graph.zoom * 100.0));
        });
    }

    /// The diagram; returns what was clicked.
    fn graph_canvas(&mut self, ui: &mut egui::Ui, view: &View) -> Option<Clicked> {
        // Within the window even if a line above was wider.
        let rect = ui.available_rect_before_wrap().intersect(ui.clip_rect());
        let canvas = ui.allocate_rect(rect, Sense::click_and_drag());
        let st = &mut self.graph;
        let g = st.layout.as_ref()?;
        let width = rect.width();
        let col_w = (width / 4.0).min(260.0);
        let content = vec2(width, MARGIN * 2.0 + g.rows() * SPACING);
        if st.refit {
            st.refit = false;
            // As much of the height as the text allows (and no more than full size), from the top, or from the
            // group just expanded or collapsed.
            st.zoom = (rect.height() / content.y).clamp(TEXT_ZOOM, 1.0);
            st.pan = vec2((1.0 - st.zoom) * width / 2.0, 0.0);
            if let Some((services, prefix)) = st.reveal.take() {
                let row = g.columns[1].iter().find_map(|n| match n.kind {
                    NodeKind::Group(gi) => {
                        let gr = &g.groups[gi];
                        (gr.services == services && gr.prefix == prefix).then_some(n.row)
                    }
                    _ => None,
                });
                // Only when it would be out of sight from the top.
                if let Some(row) = row.filter(|r| (MARGIN + (r + 1.0) * SPACING) * st.zoom > rect.height()) {
                    st.pan.y = -(row * SPACING) * st.zoom;
                }
            }
        }
        // Pan and zoom.
        if canvas.dragged() {
            st.pan += canvas.drag_delta();
        }
        if canvas.hovered() {
            let (scroll, zoom_by) = ui.input_mut(|i| {
                let s = i.smooth_scroll_delta;
                i.smooth_scroll_delta = Vec2::ZERO;
                (s, i.zoom_delta())
            });
            st.pan += scroll;
            if zoom_by != 1.0 {
                let z = (st.zoom * zoom_by).clamp(*ZOOM.start(), *ZOOM.end());
                // About the pointer: the point under it stays.
                let at = canvas.hover_pos().unwrap_or(rect.center()) - rect.min;
                st.pan = at - (at - st.pan) * (z / st.zoom);
                st.zoom = z;
            }
        }
        // Some of the content stays on the canvas.
        let size = content * st.zoom;
        st.pan.x = st.pan.x.clamp(-size.x + 40.0, width - 40.0);
        st.pan.y = st.pan.y.clamp(-size.y + 40.0, rect.height() - 40.0);
        let (pan, zoom) = (st.pan, st.zoom);
        let xs = [MARGIN, width / 2.0 - col_w / 2.0, width - col_w - MARGIN];
        let to_screen = |p: Pos2| rect.min + pan + p.to_vec2() * zoom;
        let node_rect = |col: usize, row: f32| {
            let c = to_screen(pos2(xs[col] + col_w / 2.0, MARGIN + (row + 0.5) * SPACING));
            Rect::from_center_size(c, vec2(col_w, NODE_H) * zoom)
        };
        let painter = ui.painter_at(rect);
        let in_sight = |r: Rect| rect.intersects(r);

        // Edges with one end in sight.
        let max_edges = if zoom >= TEXT_ZOOM { MAX_EDGES_DRAWN } else { 2 * MAX_EDGES_DRAWN };
        let mut drawn = 0usize;
        let mut skipped = 0usize;
        let mut lines = egui::epaint::Mesh::default();
        for &(col, pi, mi, h) in &g.edges {
            let (p, m) = (&g.columns[col as usize][pi as usize], &g.columns[1][mi as usize]);
            let (pr, mr) = (node_rect(col as usize, p.row), node_rect(1, m.row));
            if !in_sight(pr) && !in_sight(mr) {
                continue;
            }
            if drawn == max_edges {
                skipped += 1;
                continue;
            }
            drawn += 1;
            let (a, b) =
                if col == 0 { (pr.right_center(), mr.left_center()) } else { (mr.right_center(), pr.left_center()) };
            let color = health_color(h).gamma_multiply(0.7);
            let i = lines.vertices.len() as u32;
            if zoom >= TEXT_ZOOM {
                // Anti-aliased in 4 triangles: full colour along the line, fading to nothing a point either side.
                let n = (b - a).normalized().rot90();
                for v in [a + n, b + n] {
                    lines.colored_vertex(v, Color32::TRANSPARENT);
                }
                for v in [a, b] {
                    lines.colored_vertex(v, color);
                }
                for v in [a - n, b - n] {
                    lines.colored_vertex(v, Color32::TRANSPARENT);
                }
                lines.add_triangle(i, i + 1, i + 3);
                lines.add_triangle(i, i + 3, i + 2);
                lines.add_triangle(i + 2, i + 3, i + 5);
                lines.add_triangle(i + 2, i + 5, i + 4);
            } else {
                let n = (b - a).normalized().rot90() * 0.5;
                for v in [a + n, a - n, b - n, b + n] {
                    lines.colored_vertex(v, color);
                }
                lines.add_triangle(i, i + 1, i + 2);
                lines.add_triangle(i, i + 2, i + 3);
            }
        }
        // Node boxes: square, pixel aligned, one mesh without anti-aliasing fringes.
        let mut boxes = egui::epaint::Mesh::default();
        let mut visible: Vec<(usize, usize, Rect)> = Vec::new();
        for (col, nodes) in g.columns.iter().enumerate() {
            // Nodes of a column are in row order: skip to the first that can be in sight.
            let first_row = ((-pan.y / zoom - MARGIN) / SPACING - 1.0).max(0.0);
            let start = nodes.partition_point(|n| n.row < first_row);
            for (i, n) in nodes.iter().enumerate().skip(start) {
                let r = node_rect(col, n.row);
                if r.top() > rect.bottom() {
                    break;
                }
                if !in_sight(r) {
                    continue;
                }
                boxes.add_colored_rect(r.round_to_pixels(ui.pixels_per_point()), health_fill(n.health));
                visible.push((col, i, r));
            }
        }
        painter.add(egui::Shape::mesh(lines));
        painter.add(egui::Shape::mesh(boxes));
        let selected = |k: &NodeKind| match k {
            NodeKind::Member(Member::Topic(t)) => self.state.selected.as_deref() == Some(&*view.topics[*t].name),
            NodeKind::Member(Member::Service(s)) => {
                self.state.selected_service.as_deref() == Some(&*view.services[*s].name)
            }
            NodeKind::Process(p) => matches!(&st.focus, Some(Focus::Process(f)) if f == p),
            _ => false,
        };
        let font = egui::FontId::proportional((13.0 * zoom * 2.0).round() / 2.0);
        let mut clicked = None;
        let id = ui.make_persistent_id("graph-node");
        for &(col, i, r) in &visible {
            let n = &g.columns[col][i];
            if selected(&n.kind) {
                painter.rect_stroke(r, 0.0, egui::Stroke::new(2.0, Color32::WHITE), egui::StrokeKind::Inside);
            }
            if zoom >= TEXT_ZOOM {
                let galley = egui::WidgetText::from(RichText::new(&n.label).font(font.clone()).color(Color32::BLACK))
                    .into_galley(ui, Some(egui::TextWrapMode::Truncate), r.width() - 8.0 * zoom, font.clone());
                painter.galley(
                    pos2(r.left() + 4.0 * zoom, r.center().y - galley.size().y / 2.0),
                    galley,
                    Color32::BLACK,
                );
            }
            let response = ui.interact(r.intersect(rect), id.with((col, i)), Sense::click());
            response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &n.label));
            if response.clicked() {
                clicked = Some(match &n.kind {
                    NodeKind::Member(m) => Clicked::Member(*m),
                    NodeKind::Group(gi) | NodeKind::More(gi) => Clicked::Group(*gi),
                    NodeKind::Process(p) => Clicked::Process(p.clone()),
                });
            }
        }
        if skipped > 0 {
            painter.text(
                rect.left_bottom() + vec2(4.0, -4.0),
                egui::Align2::LEFT_BOTTOM,
                format!("{skipped} more edges in sight not drawn: zoom in, or focus on a node"),
                egui::FontId::proportional(13.0),
                health_color(Health::Warning),
            );
        }
        clicked
    }
}
