//! The window: a top bar (tabs, freeze and scroll-back, filter) over five views — Overview, Topic, Inspector,
//! Graph, Events — all drawn from the [`View`]s in the [`History`].
//!
//! Per frame the app draws only what is visible and recomputes only what changed: the tables are virtualised
//! (`TableBuilder::rows`), their order (filter, sort) and the Events list are found again only when a view
//! arrives or the filter or sort changes, the Graph's layout once per order (at most [`MAX_GRAPH_TOPICS`] topics,
//! only the nodes in sight laid out), and the Topic view's plot series once per view, at most two points per pixel
//! column. Under software GL most of a frame is rasterising, which costs by the pixel: the panels and plots are not
//! filled (the window is cleared with the panels' colour, [`clear_color`]) and table stripes are one rectangle a
//! row. Snapshots are taken, turned into views and diffed for events on a refresh thread; the window is woken
//! only when a view differs from the one before ([`View::same_content`]), so a network where nothing changes is
//! not redrawn every refresh.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use egui::{Color32, RichText, Sense};
use egui_extras::{Column, TableBuilder};
use egui_plot::{Bar, BarChart, FilledArea, Legend, Line, Plot, PlotPoint, PlotPoints};
use shoal::TypeInfo;
use shoal::dynamic::{DynamicDecoder, RawView};
use shoal::monitor::printable as shown;

use crate::history::{Event, EventKind, History, diff};
use crate::model::{
    ConnKey, ConnectionRow, Health, Interner, TopicRow, View, build_view, fmt_bandwidth, fmt_bytes, fmt_rate, fmt_us,
};
use crate::source::{Message, MessageSource, SnapshotSource};

/// The graph draws at most this many topics (filter to see others).
pub const MAX_GRAPH_TOPICS: usize = 60;
/// The inspector keeps this many messages to step through.
pub const INSPECTOR_KEEP: usize = 100;
const ROW_H: f32 = 20.0;

/// Without changes, the window is still redrawn this often (the clock, the registration ages and the plots' time
/// axis catch up).
pub const IDLE_REPAINT: Duration = Duration::from_secs(30);
/// Views the refresh thread hands over before the UI takes them; when full it wakes the UI and waits.
pub const FEED_CAPACITY: usize = 64;

/// A view and the events found between it and the view before, from the refresh thread.
struct Update {
    view: Arc<View>,
    events: Vec<Event>,
}

/// The five views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Hosts, processes, topics.
    Overview,
    /// One topic's plots and connections.
    Topic,
    /// One topic's latest message.
    Inspector,
    /// Processes and topics as a node-link diagram.
    Graph,
    /// What happened.
    Events,
}

impl Tab {
    /// Every tab, in order.
    pub const ALL: [Tab; 5] = [Tab::Overview, Tab::Topic, Tab::Inspector, Tab::Graph, Tab::Events];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Topic => "Topic",
            Tab::Inspector => "Inspector",
            Tab::Graph => "Graph",
            Tab::Events => "Events",
        }
    }

    /// The tab called `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.title().eq_ignore_ascii_case(name))
    }
}

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

    fn cmp(self, a: &TopicRow, b: &TopicRow) -> std::cmp::Ordering {
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

/// What the user chose; public so the tests and `main` can set it.
#[derive(Debug, Clone)]
pub struct UiState {
    /// The visible tab.
    pub tab: Tab,
    /// Filters topics, processes and events (substring, case-insensitive).
    pub filter: String,
    /// Only rows with problems.
    pub problems_only: bool,
    /// Topic table sort column and direction.
    pub sort: (TopicCol, bool),
    /// The selected topic.
    pub selected: Option<Arc<str>>,
    /// The selected connection of that topic (`None`: all of them).
    pub connection: Option<ConnKey>,
    /// Frozen at this view time (seconds since the epoch); `None`: live.
    pub frozen_at: Option<f64>,
    /// Plot window, seconds.
    pub window_s: f64,
    /// Events of one kind only.
    pub event_kind: Option<EventKind>,
}

impl Default for UiState {
    fn default() -> Self {
        UiState {
            tab: Tab::Overview,
            filter: String::new(),
            problems_only: false,
            sort: (TopicCol::Name, true),
            selected: None,
            connection: None,
            frozen_at: None,
            window_s: 60.0,
            event_kind: None,
        }
    }
}

#[derive(Debug, Default, PartialEq)]
struct OrderKey {
    generation: u64,
    view_time: f64,
    filter: String,
    problems_only: bool,
    sort: Option<(TopicCol, bool)>,
}

/// What the Events table's rows depend on.
#[derive(Debug, PartialEq)]
struct EventsKey {
    generation: u64,
    filter: String,
    kind: Option<EventKind>,
    problems_only: bool,
    until: f64,
}

#[derive(Debug, Default)]
struct Order {
    key: OrderKey,
    /// Changes whenever the order is computed again.
    version: u64,
    topics: Vec<usize>,
    processes: Vec<usize>,
}

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
struct Series {
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
fn decimate<T>(items: &[T], col: impl Fn(f64) -> usize, get: impl Fn(&T) -> (f64, f64)) -> Vec<PlotPoint> {
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

/// The Graph's nodes and edges, found once per [`Order`].
#[derive(Debug)]
struct GraphLayout {
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

/// The inspector: the messages of the selected topic, a decoder per type, pause and step.
#[derive(Debug, Default)]
struct Inspector {
    topic: Option<Arc<str>>,
    messages: VecDeque<Message>,
    paused: bool,
    /// Index into `messages` while paused.
    cursor: usize,
    decoder: Option<(Arc<TypeInfo>, Result<DynamicDecoder, String>)>,
    /// The decoded message shown: (clock, publisher) → JSON or error.
    decoded: Option<((u64, u64), Decoded)>,
    incoming: Vec<Message>,
    mode: InspectMode,
}

#[derive(Debug, Clone)]
enum Decoded {
    Tree(serde_json::Value),
    Raw(RawView),
    Error(String),
}

/// How the inspector shows a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum InspectMode {
    /// Tree for protobuf, text for UTF-8, hex otherwise.
    #[default]
    Auto,
    Hex,
}

/// The monitor application state; [`MonitorApp::ui`] draws it into any `egui::Ui` (the window, or a test harness).
pub struct MonitorApp {
    /// Taken by the refresh thread once [`MonitorApp::start_refresh_thread`] ran.
    snapshots: Option<Box<dyn SnapshotSource + Send>>,
    /// Views and their events from the refresh thread.
    feed: Option<mpsc::Receiver<Update>>,
    messages: Box<dyn MessageSource>,
    interner: Interner,
    history: History,
    refresh: Duration,
    auto_refresh: bool,
    last_refresh: Option<Instant>,
    /// What the user chose.
    pub state: UiState,
    order: Order,
    /// The Events table's rows (indices into the history's events, newest first) and what they were found for.
    events_order: (Option<EventsKey>, Vec<usize>),
    graph_layout: Option<GraphLayout>,
    series: Option<Series>,
    inspector: Inspector,
    refreshes: u64,
}

impl std::fmt::Debug for MonitorApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorApp").field("views", &self.history.len()).field("state", &self.state).finish()
    }
}

impl MonitorApp {
    /// An app that takes a snapshot every `refresh` by itself: when drawn, or on its own thread after
    /// [`MonitorApp::start_refresh_thread`].
    pub fn new(
        snapshots: Box<dyn SnapshotSource + Send>,
        messages: Box<dyn MessageSource>,
        refresh: Duration,
    ) -> MonitorApp {
        MonitorApp {
            snapshots: Some(snapshots),
            feed: None,
            messages,
            interner: Interner::default(),
            history: History::default(),
            refresh,
            auto_refresh: true,
            last_refresh: None,
            state: UiState::default(),
            order: Order::default(),
            events_order: (None, Vec::new()),
            graph_layout: None,
            series: None,
            inspector: Inspector::default(),
            refreshes: 0,
        }
    }

    /// An app that refreshes only when [`MonitorApp::refresh_now`] is called (tests).
    pub fn manual(snapshots: Box<dyn SnapshotSource + Send>, messages: Box<dyn MessageSource>) -> MonitorApp {
        let mut app = MonitorApp::new(snapshots, messages, Duration::from_secs(1));
        app.auto_refresh = false;
        app
    }

    /// Takes one snapshot now and polls the inspected topic (nothing once the refresh thread runs).
    pub fn refresh_now(&mut self) {
        let Some(source) = self.snapshots.as_mut() else { return };
        let snap = source.snapshot();
        let view = build_view(&snap, self.history.latest().map(|v| &**v), &mut self.interner);
        self.history.push(view);
        self.refreshes += 1;
        if self.refreshes.is_multiple_of(64) {
            self.interner.shrink();
        }
        self.poll_messages();
    }

    /// Moves snapshots, building views and diffing them for events off the UI thread: a thread takes a snapshot
    /// every refresh, builds its view, finds its events and hands both over; the UI only adds finished views.
    /// It calls `wake` (the window's repaint request) when a view differs from the one before
    /// ([`View::same_content`]) or brings events, and otherwise only every [`IDLE_REPAINT`] (so the clock and the
    /// plots catch up), or when [`FEED_CAPACITY`] views wait: a network where nothing changes is not redrawn every
    /// refresh. The thread ends when the app is dropped.
    pub fn start_refresh_thread(&mut self, wake: impl Fn() + Send + 'static) -> std::io::Result<()> {
        let Some(mut source) = self.snapshots.take() else { return Ok(()) };
        let mut interner = std::mem::take(&mut self.interner);
        let mut prev = self.history.latest().cloned();
        let refresh = self.refresh;
        let (tx, rx) = mpsc::sync_channel::<Update>(FEED_CAPACITY);
        std::thread::Builder::new().name("shoal-monitor-refresh".into()).spawn(move || {
            let mut next = Instant::now() + refresh;
            let mut last_wake = Instant::now();
            for n in 1u64.. {
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                next += refresh;
                let view = Arc::new(build_view(&source.snapshot(), prev.as_deref(), &mut interner));
                let events = prev.as_ref().map(|p| diff(p, &view)).unwrap_or_default();
                let changed = !events.is_empty() || prev.as_ref().is_none_or(|p| !p.same_content(&view));
                match tx.try_send(Update { view: view.clone(), events }) {
                    Ok(()) => {}
                    Err(mpsc::TrySendError::Full(u)) => {
                        // The UI has not drawn for FEED_CAPACITY refreshes: let it take them.
                        wake();
                        last_wake = Instant::now();
                        if tx.send(u).is_err() {
                            return;
                        }
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => return,
                }
                if changed || last_wake.elapsed() >= IDLE_REPAINT {
                    wake();
                    last_wake = Instant::now();
                }
                prev = Some(view);
                if n.is_multiple_of(64) {
                    interner.shrink();
                }
            }
        })?;
        self.feed = Some(rx);
        Ok(())
    }

    /// The kept views and events.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The view on screen: the newest, or the one frozen on.
    pub fn displayed(&self) -> Option<Arc<View>> {
        self.displayed_index().and_then(|i| self.history.get(i)).cloned()
    }

    fn displayed_index(&self) -> Option<usize> {
        if self.history.is_empty() {
            return None;
        }
        let last = self.history.len() - 1;
        match self.state.frozen_at {
            None => Some(last),
            Some(t) => {
                let n = self.history.views().take_while(|v| v.time_s <= t + 1e-6).count();
                Some(n.saturating_sub(1).min(last))
            }
        }
    }

    /// Selects topic `name` (and forgets the selected connection).
    pub fn select_topic(&mut self, name: Option<&str>) {
        self.state.selected = name.map(Arc::from);
        self.state.connection = None;
    }

    fn poll_messages(&mut self) {
        let wanted = if matches!(self.state.tab, Tab::Inspector) { self.state.selected.clone() } else { None };
        if wanted != self.inspector.topic {
            self.messages.select(wanted.as_deref());
            self.inspector = Inspector { topic: wanted, mode: self.inspector.mode, ..Inspector::default() };
        }
        if self.inspector.topic.is_none() {
            return;
        }
        let mut incoming = std::mem::take(&mut self.inspector.incoming);
        self.messages.poll(&mut incoming);
        for m in incoming.drain(..) {
            if self.inspector.messages.len() == INSPECTOR_KEEP {
                self.inspector.messages.pop_front();
                self.inspector.cursor = self.inspector.cursor.saturating_sub(1);
            }
            self.inspector.messages.push_back(m);
        }
        self.inspector.incoming = incoming;
    }

    /// Draws the whole monitor into `ui`; takes a snapshot first when one is due.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if let Some(feed) = &self.feed {
            let mut got = false;
            while let Ok(u) = feed.try_recv() {
                self.history.push_diffed(u.view, u.events);
                got = true;
            }
            let inspecting = matches!(self.state.tab, Tab::Inspector) && !self.inspector.paused;
            if got || inspecting {
                self.poll_messages();
            }
            if inspecting {
                ui.ctx().request_repaint_after(self.refresh);
            }
        } else if self.auto_refresh {
            let now = Instant::now();
            let due = self.last_refresh.is_none_or(|t| now.duration_since(t) >= self.refresh);
            if due {
                self.last_refresh = Some(now);
                self.refresh_now();
            } else if matches!(self.state.tab, Tab::Inspector) && !self.inspector.paused {
                self.poll_messages();
            }
            let next = self.last_refresh.map_or(Duration::ZERO, |t| self.refresh.saturating_sub(t.elapsed()));
            ui.ctx().request_repaint_after(next);
        }
        let view = self.displayed();
        // The panels are not filled: the window is cleared with their colour instead (see `clear_color`). Under
        // software GL a filled panel costs as much as the rest of a frame (every pixel blended once more).
        egui::Panel::top("bar")
            .frame(egui::Frame::side_top_panel(ui.style()).fill(Color32::TRANSPARENT))
            .show(ui, |ui| self.top_bar(ui, view.as_deref()));
        let central = egui::Frame::central_panel(ui.style()).fill(Color32::TRANSPARENT);
        egui::CentralPanel::default().frame(central).show(ui, |ui| {
            let Some(view) = view else {
                ui.label("Waiting for the first snapshot…");
                return;
            };
            self.update_order(&view);
            match self.state.tab {
                Tab::Overview => self.overview(ui, &view),
                Tab::Topic => self.topic_detail(ui, &view),
                Tab::Inspector => self.inspector_ui(ui),
                Tab::Graph => self.graph(ui, &view),
                Tab::Events => self.events(ui),
            }
        });
    }

    fn top_bar(&mut self, ui: &mut egui::Ui, view: Option<&View>) {
        ui.horizontal(|ui| {
            ui.strong("shoal monitor");
            ui.separator();
            for tab in Tab::ALL {
                if ui.selectable_label(self.state.tab == tab, tab.title()).clicked() {
                    self.state.tab = tab;
                    if tab == Tab::Inspector {
                        self.poll_messages();
                    }
                }
            }
            ui.separator();
            let label = ui.label("Filter:");
            ui.add(
                egui::TextEdit::singleline(&mut self.state.filter)
                    .hint_text("topic, type, process")
                    .desired_width(160.0),
            )
            .labelled_by(label.id);
            ui.checkbox(&mut self.state.problems_only, "Problems only");
        });
        ui.horizontal(|ui| {
            let live = self.state.frozen_at.is_none();
            if ui.selectable_label(!live, if live { "Freeze" } else { "Frozen (click for live)" }).clicked() {
                self.state.frozen_at = if live { view.map(|v| v.time_s) } else { None };
            }
            if let (Some(t), Some(first), Some(last)) =
                (self.state.frozen_at, self.history.views().next(), self.history.latest())
            {
                let (lo, hi) = (first.time_s - last.time_s, 0.0);
                let mut rel = t - last.time_s;
                let slider = egui::Slider::new(&mut rel, lo..=hi).text("s (scroll back)").fixed_decimals(0);
                if ui.add(slider).changed() {
                    self.state.frozen_at = Some(last.time_s + rel);
                }
            }
            if let Some(v) = view {
                ui.separator();
                ui.label(format!(
                    "{} hosts · {} processes · {} topics · {} with problems · {}",
                    v.hosts.len(),
                    v.processes.len(),
                    v.topics.len(),
                    v.problem_count(),
                    clock(v.time_s)
                ));
            }
        });
    }

    fn update_order(&mut self, view: &View) {
        let key = OrderKey {
            generation: self.history.generation(),
            view_time: view.time_s,
            filter: self.state.filter.to_lowercase(),
            problems_only: self.state.problems_only,
            sort: Some(self.state.sort),
        };
        if key == self.order.key {
            return;
        }
        let f = key.filter.as_str();
        self.order.topics.clear();
        self.order.topics.extend((0..view.topics.len()).filter(|&i| {
            let t = &view.topics[i];
            (!key.problems_only || !t.problems.is_empty())
                && (f.is_empty() || contains_ci(&t.name, f) || contains_ci(&t.type_name, f))
        }));
        let (col, asc) = self.state.sort;
        self.order.topics.sort_by(|&a, &b| {
            let o = col.cmp(&view.topics[a], &view.topics[b]);
            if asc { o } else { o.reverse() }
        });
        self.order.processes.clear();
        self.order.processes.extend((0..view.processes.len()).filter(|&i| {
            let p = &view.processes[i];
            (!key.problems_only || !p.problems.is_empty())
                && (f.is_empty() || contains_ci(&p.unit, f) || contains_ci(&p.name, f) || contains_ci(&p.host, f))
        }));
        self.order.key = key;
        self.order.version += 1;
    }

    fn overview(&mut self, ui: &mut egui::Ui, view: &View) {
        egui::CollapsingHeader::new(format!("Hosts ({})", view.hosts.len())).default_open(true).show(ui, |ui| {
            egui::Grid::new("hosts").show(ui, |ui| {
                ui.strong("Host");
                ui.strong("Processes");
                ui.strong("Publishers + subscribers");
                ui.end_row();
                for h in &view.hosts {
                    ui.label(shown(&h.host));
                    ui.label(h.processes.to_string());
                    ui.label(h.entities.to_string());
                    ui.end_row();
                }
            });
        });
        ui.separator();
        ui.strong(format!("Processes ({} of {})", self.order.processes.len(), view.processes.len()));
        let avail = ui.available_height();
        let proc_h = (avail * 0.35).max(4.0 * ROW_H);
        ui.push_id("processes", |ui| {
            ui.set_max_height(proc_h);
            TableBuilder::new(ui)
                .id_salt("processes")
                .resizable(true)
                .max_scroll_height(proc_h - ROW_H)
                .column(Column::initial(90.0))
                .column(Column::initial(60.0))
                .column(Column::initial(190.0))
                .column(Column::initial(120.0))
                .column(Column::initial(50.0))
                .column(Column::initial(220.0))
                .column(Column::initial(70.0))
                .column(Column::initial(90.0))
                .column(Column::remainder())
                .header(ROW_H, |mut h| {
                    for t in
                        ["Host", "PID", "Unit", "Executable", "Kind", "Version", "Reg. age", "Kernel drops", "State"]
                    {
                        h.col(|ui| {
                            ui.strong(t);
                        });
                    }
                })
                .body(|body| {
                    body.rows(ROW_H, self.order.processes.len(), |mut row| {
                        let p = &view.processes[self.order.processes[row.index()]];
                        let color = health_color(p.problems.health());
                        let state = match p.state_severity {
                            1 => "healthy",
                            2 => "warning",
                            3 => "critical",
                            4 => "failed",
                            _ => "unknown",
                        };
                        let mut state = state.to_owned();
                        if !p.state_info.is_empty() {
                            state.push_str(&format!(": {}", shown(&p.state_info)));
                        }
                        if !p.problems.is_empty() {
                            state.push_str(&format!(" — {}", p.problems.text()));
                        }
                        let unit = if p.is_self {
                            format!("{} (this monitor)", shown(&p.unit))
                        } else {
                            shown(&p.unit).into_owned()
                        };
                        let index = row.index();
                        row.col(|ui| {
                            stripe(ui, index);
                            ui.label(RichText::new(shown(&p.host)).color(color));
                        });
                        text_cells(
                            &mut row,
                            color,
                            [
                                p.pid.to_string(),
                                unit,
                                shown(&p.name).into_owned(),
                                p.kind.to_owned(),
                                shown(&p.version).into_owned(),
                                format!("{:.1} s", p.registration_age_s),
                                p.kernel_drops.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                                state,
                            ],
                        );
                    });
                });
        });
        ui.separator();
        ui.strong(format!("Topics ({} of {})", self.order.topics.len(), view.topics.len()));
        self.topic_table(ui, view);
    }

    fn topic_table(&mut self, ui: &mut egui::Ui, view: &View) {
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
                        [
                            format!("{} ({})", shown(&t.type_name), shown(&t.encoding)),
                            t.publishers.to_string(),
                            t.subscribers.to_string(),
                            fmt_rate(t.rate_hz),
                            fmt_bandwidth(t.bandwidth_bps),
                            fmt_bytes(t.size_bytes as f64),
                            t.drops.to_string(),
                            p50,
                            p99,
                            t.problems.text(),
                            shown(&t.layers).into_owned(),
                        ],
                    );
                });
            });
        self.state.sort = sort;
        if let Some(name) = clicked {
            self.select_topic(Some(&name));
            self.state.tab = Tab::Topic;
        }
    }

    fn topic_detail(&mut self, ui: &mut egui::Ui, view: &View) {
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
            ui.label(format!(
                "{} ({}) · {} pub · {} sub · layers {} · {}",
                shown(&t.type_name),
                shown(&t.encoding),
                t.publishers,
                t.subscribers,
                if t.layers.is_empty() { "-".into() } else { shown(&t.layers) },
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
        // Connections.
        let conns: Vec<&ConnectionRow> = view.connections_of(&name).collect();
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
        if conns.is_empty() {
            ui.label("No connection figures: no shoal subscriber reports this topic (eCAL subscribers announce rate and drops only).");
        }
        if let Some(k) = pick {
            self.state.connection = if self.state.connection == Some(k) { None } else { Some(k) };
        }
        ui.separator();
        self.plots(ui, view, &name);
    }

    fn plots(&mut self, ui: &mut egui::Ui, view: &View, name: &str) {
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
                    .include_y(0.0)
                    .allow_scroll(false)
                    .x_axis_formatter(|m, _| fmt_us(10f64.powf(m.value)));
                show_plot(ui, plot, |p| p.add(BarChart::new("count", bars).color(Color32::from_rgb(80, 140, 255))));
            });
        });
    }

    fn inspector_ui(&mut self, ui: &mut egui::Ui) {
        let Some(topic) = self.state.selected.clone() else {
            ui.label("Select a topic in the Overview (click its name) to inspect its messages.");
            return;
        };
        if self.inspector.topic.as_deref() != Some(&*topic) {
            self.poll_messages();
        }
        let n = self.inspector.messages.len();
        ui.horizontal(|ui| {
            ui.heading(shown(&topic));
            ui.separator();
            if ui.button(if self.inspector.paused { "Resume" } else { "Pause" }).clicked() {
                self.inspector.paused = !self.inspector.paused;
                self.inspector.cursor = n.saturating_sub(1);
            }
            if self.inspector.paused {
                if ui.add_enabled(self.inspector.cursor > 0, egui::Button::new("< Previous")).clicked() {
                    self.inspector.cursor -= 1;
                }
                if ui.add_enabled(self.inspector.cursor + 1 < n, egui::Button::new("Next >")).clicked() {
                    self.inspector.cursor += 1;
                }
            }
            ui.separator();
            if ui.selectable_label(self.inspector.mode == InspectMode::Auto, "Decoded").clicked() {
                self.inspector.mode = InspectMode::Auto;
            }
            if ui.selectable_label(self.inspector.mode == InspectMode::Hex, "Hex").clicked() {
                self.inspector.mode = InspectMode::Hex;
            }
        });
        let index =
            if self.inspector.paused { self.inspector.cursor.min(n.saturating_sub(1)) } else { n.saturating_sub(1) };
        let Some(msg) = self.inspector.messages.get(index).cloned() else {
            ui.label("No message received yet.");
            return;
        };
        ui.label(format!(
            "message {} of {} kept · clock {} · publisher {:x} · {} · type {} ({}) · sent {}",
            index + 1,
            n,
            msg.clock,
            msg.publisher_id,
            fmt_bytes(msg.payload.len() as f64),
            shown(&msg.type_info.name),
            if msg.type_info.encoding.is_empty() { "raw".into() } else { shown(&msg.type_info.encoding) },
            clock(msg.send_time_us as f64 / 1e6),
        ));
        ui.separator();
        let decoded = self.decode(&msg);
        egui::ScrollArea::vertical().auto_shrink(false).show(ui, |ui| match (self.inspector.mode, decoded) {
            (InspectMode::Auto, Decoded::Tree(v)) => json_tree(ui, "message", &v, 0),
            (InspectMode::Auto, Decoded::Raw(r)) if r.text.is_some() => {
                ui.label("Text:");
                // Line by line: the payload's lines stay lines, anything else that would not show as itself
                // (controls, bidirectional overrides) is escaped.
                let text = r.text.unwrap_or_default();
                let lines: Vec<_> = text.split('\n').map(shown).collect();
                ui.monospace(lines.join("\n"));
            }
            (InspectMode::Auto, Decoded::Error(e)) => {
                ui.colored_label(health_color(Health::Error), format!("cannot decode: {e}"));
                hex_dump(ui, &msg.payload);
            }
            _ => hex_dump(ui, &msg.payload),
        });
    }

    fn decode(&mut self, msg: &Message) -> Decoded {
        let key = (msg.clock, msg.publisher_id);
        if let Some((k, d)) = &self.inspector.decoded
            && *k == key
        {
            return d.clone();
        }
        let stale = self.inspector.decoder.as_ref().is_none_or(|(ti, _)| **ti != *msg.type_info);
        if stale {
            let dec = DynamicDecoder::new(&msg.type_info).map_err(|e| e.to_string());
            self.inspector.decoder = Some((msg.type_info.clone(), dec));
        }
        let d = match &self.inspector.decoder {
            Some((_, Ok(dec))) if dec.message_descriptor().is_some() => match dec.decode_to_json(&msg.payload) {
                Ok(v) => Decoded::Tree(v),
                Err(e) => Decoded::Error(e.to_string()),
            },
            Some((_, Err(e))) => Decoded::Error(e.clone()),
            _ => Decoded::Raw(RawView::new(&msg.type_info, &msg.payload)),
        };
        self.inspector.decoded = Some((key, d.clone()));
        d
    }

    fn graph(&mut self, ui: &mut egui::Ui, view: &View) {
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

    fn events(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.label("Kind:");
            if ui.selectable_label(self.state.event_kind.is_none(), "all").clicked() {
                self.state.event_kind = None;
            }
            for k in EventKind::ALL {
                if ui.selectable_label(self.state.event_kind == Some(k), k.label()).clicked() {
                    self.state.event_kind = Some(k);
                }
            }
        });
        let key = EventsKey {
            generation: self.history.generation(),
            filter: self.state.filter.to_lowercase(),
            kind: self.state.event_kind,
            problems_only: self.state.problems_only,
            until: self.state.frozen_at.unwrap_or(f64::INFINITY),
        };
        if self.events_order.0.as_ref() != Some(&key) {
            let f = key.filter.as_str();
            let events = self.history.events();
            self.events_order.1.clear();
            self.events_order.1.extend((0..events.len()).rev().filter(|&i| {
                let e = &events[i];
                e.time_s <= key.until + 1e-6
                    && key.kind.is_none_or(|k| e.kind == k)
                    && (!key.problems_only || e.kind.is_problem())
                    && (f.is_empty() || contains_ci(&e.subject, f) || contains_ci(&e.detail, f))
            }));
            self.events_order.0 = Some(key);
        }
        let events = self.history.events();
        let list = &self.events_order.1;
        ui.label(format!("{} events (newest first)", list.len()));
        TableBuilder::new(ui)
            .id_salt("events")
            .resizable(true)
            .column(Column::initial(80.0))
            .column(Column::initial(110.0))
            .column(Column::initial(200.0))
            .column(Column::remainder())
            .header(ROW_H, |mut h| {
                for t in ["Time", "Event", "Subject", "Detail"] {
                    h.col(|ui| {
                        ui.strong(t);
                    });
                }
            })
            .body(|body| {
                body.rows(ROW_H, list.len(), |mut row| {
                    let e = &events[list[row.index()]];
                    let color = if e.kind.is_problem() { health_color(Health::Error) } else { ui_text_color() };
                    let index = row.index();
                    row.col(|ui| {
                        stripe(ui, index);
                        ui.label(clock(e.time_s));
                    });
                    row.col(|ui| {
                        ui.label(RichText::new(e.kind.label()).color(color));
                    });
                    row.col(|ui| {
                        ui.label(shown(&e.subject));
                    });
                    row.col(|ui| {
                        ui.label(shown(&e.detail));
                    });
                });
            });
    }
}

impl eframe::App for MonitorApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        MonitorApp::ui(self, ui);
    }

    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        clear_color(visuals)
    }
}

/// The colour a window showing [`MonitorApp::ui`] must be cleared with: the panels' own, which they do not paint.
pub fn clear_color(visuals: &egui::Visuals) -> [f32; 4] {
    visuals.panel_fill.to_normalized_gamma_f32()
}

fn ui_text_color() -> Color32 {
    Color32::from_gray(200)
}

/// Text colour of a row by health.
pub fn health_color(h: Health) -> Color32 {
    match h {
        Health::Ok => ui_text_color(),
        Health::Warning => Color32::from_rgb(240, 170, 40),
        Health::Error => Color32::from_rgb(240, 80, 70),
    }
}

fn health_fill(h: Health) -> Color32 {
    match h {
        Health::Ok => Color32::from_rgb(110, 190, 110),
        Health::Warning => Color32::from_rgb(240, 180, 60),
        Health::Error => Color32::from_rgb(235, 95, 85),
    }
}

/// A plot over the last `window_s` seconds (x: seconds before the shown view), from 0 up.
fn time_plot(id: &str, height: f32, width: f32, window_s: f64) -> Plot<'static> {
    Plot::new(id)
        .height(height)
        .width(width)
        .include_x(-window_s)
        .include_x(0.0)
        .include_y(0.0)
        .x_axis_formatter(|m, _| format!("{:.0} s", m.value))
        .allow_scroll(false)
}

/// Shows `plot` without the filled background egui_plot gives it, with the background's outline drawn instead:
/// under software GL the Topic view's four filled plot backgrounds cost as much as the rest of it.
fn show_plot<'a>(ui: &mut egui::Ui, plot: Plot<'a>, build: impl FnOnce(&mut egui_plot::PlotUi<'a>) + 'a) {
    let r = plot.show_background(false).show(ui, build);
    let stroke = ui.visuals().widgets.noninteractive.bg_stroke;
    ui.painter().rect_stroke(*r.transform.frame(), 2.0, stroke, egui::StrokeKind::Inside);
}

/// The stripe behind every other table row, painted from the row's first cell (before its content) as one
/// rectangle across the table's visible width. `TableBuilder::striped` paints one per cell, each with its own
/// anti-aliasing fringe: at 1000 topics that is most of the triangles of the Overview, and under software GL it cost
/// about as much as everything else the tables draw.
fn stripe(cell: &egui::Ui, row_index: usize) {
    use egui::emath::GuiRounding as _;
    if !row_index.is_multiple_of(2) {
        return;
    }
    // The cells are not clipped to themselves: their clip rectangle is the table body's visible part.
    let gap = 0.5 * cell.spacing().item_spacing.y;
    let rect = egui::Rect::from_x_y_ranges(cell.clip_rect().x_range(), cell.max_rect().y_range().expand(gap));
    cell.painter().rect_filled(rect.round_ui(), 0.0, cell.visuals().faint_bg_color);
}

/// One label cell per text, all in `color`.
fn text_cells(row: &mut egui_extras::TableRow<'_, '_>, color: Color32, cells: impl IntoIterator<Item = String>) {
    for text in cells {
        row.col(|ui| {
            ui.label(RichText::new(text).color(color));
        });
    }
}

fn latency_cells(t: &TopicRow) -> (String, String) {
    match (t.latency, t.latency_mean_us) {
        (Some(l), _) => (fmt_us(l.p50_us), fmt_us(l.p99_us)),
        (None, Some(m)) => (format!("mean {}", fmt_us(m)), "-".into()),
        (None, None) if t.cross_host_connections > 0 => ("clock not shared".into(), String::new()),
        (None, None) => ("-".into(), "-".into()),
    }
}

fn contains_ci(hay: &str, lower_needle: &str) -> bool {
    hay.to_lowercase().contains(lower_needle)
}

/// `hh:mm:ss` (UTC) of a time in seconds since the epoch.
pub fn clock(time_s: f64) -> String {
    let s = time_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn json_tree(ui: &mut egui::Ui, key: &str, v: &serde_json::Value, depth: usize) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            egui::CollapsingHeader::new(format!("{} {{{}}}", shown(key), m.len()))
                .id_salt((key, depth, m.len()))
                .default_open(depth < 4)
                .show(ui, |ui| {
                    for (k, x) in m {
                        json_tree(ui, k, x, depth + 1);
                    }
                });
        }
        Value::Array(a) => {
            egui::CollapsingHeader::new(format!("{} [{}]", shown(key), a.len()))
                .id_salt((key, depth, a.len()))
                .default_open(depth < 4 && a.len() <= 32)
                .show(ui, |ui| {
                    for (i, x) in a.iter().enumerate().take(1000) {
                        json_tree(ui, &format!("[{i}]"), x, depth + 1);
                    }
                });
        }
        scalar => {
            ui.monospace(format!("{}: {}", shown(key), shown(&scalar.to_string())));
        }
    }
}

fn hex_dump(ui: &mut egui::Ui, bytes: &[u8]) {
    let shown = &bytes[..bytes.len().min(shoal::dynamic::RAW_VIEW_LIMIT)];
    let mut s = String::with_capacity(shown.len() * 4);
    for (i, chunk) in shown.chunks(16).enumerate() {
        s.push_str(&format!("{:06x}  ", i * 16));
        for b in chunk {
            s.push_str(&format!("{b:02x} "));
        }
        for _ in chunk.len()..16 {
            s.push_str("   ");
        }
        s.push(' ');
        s.extend(chunk.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }));
        s.push('\n');
    }
    if bytes.len() > shown.len() {
        s.push_str(&format!("… {} more bytes\n", bytes.len() - shown.len()));
    }
    ui.monospace(s);
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
