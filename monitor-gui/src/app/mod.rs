//! The window: a top bar (tabs, freeze and scroll-back, filter) over eight views — Overview, Topic, Inspector,
//! Services, Graph, Events, all drawn from the [`View`]s in the [`History`], Plot, the numeric fields picked in the
//! Inspector over time ([`Signals`]), and Logs, every process's log messages from a [`LogSource`].
//!
//! Per frame the app draws only what is visible and recomputes only what changed: the tables are virtualised
//! (`TableBuilder::rows`), their order (filter, sort) and the Events list are found again only when a view
//! arrives or the filter or sort changes, the Graph's layout once per order, focus and set of expanded groups (topics
//! grouped by name prefix above [`GROUP_ABOVE`]; only the nodes in sight laid out and drawn, at any pan and zoom),
//! the Topic view's plot series once per view, at most two points per pixel column, and the Plot tab's lines once per
//! change of their points (at most [`DRAWN_POINTS`] in all). Under software GL most of a frame is rasterising, which costs by the pixel: the panels and plots are not
//! filled (the window is cleared with the panels' colour, [`clear_color`]) and table stripes are one rectangle a
//! row. Snapshots are taken, turned into views and diffed for events on a refresh thread; the window is woken
//! only when a view differs from the one before ([`View::same_content`]), so a network where nothing changes is
//! not redrawn every refresh.
//!
//! One file per view, each an `impl MonitorApp` block: `top_bar.rs` (with `export.rs`, its Export… row and the
//! opened snapshot's app), `overview.rs` (with `processes.rs` and `topic_table.rs`), `topic.rs` (with `plots.rs`),
//! `inspector.rs`, `fieldplot.rs`, `services.rs`, `graph.rs`, `events.rs`, `logs.rs`;
//! `refresh.rs` brings the
//! history up to date, `order.rs` keeps the tables' filter and sort, `widgets.rs` holds what the views share. A new
//! view is a [`Tab`], a file here and one arm in [`MonitorApp::ui`].

mod events;
mod export;
mod fieldplot;
mod graph;
mod inspector;
mod logs;
mod order;
mod overview;
mod plots;
mod processes;
mod refresh;
mod services;
mod top_bar;
mod topic;
mod topic_table;
mod widgets;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use egui::Color32;

use crate::history::{EventKind, History};
use crate::model::{ConnKey, Interner, View};
use crate::signals::{AddError, FieldPath, Signals};
use crate::source::{LogSource, MessageSource, NoLogs, SnapshotSource};
use events::EventsKey;
use fieldplot::FieldSeries;
use graph::GraphState;
use inspector::Inspector;
use order::Order;
use plots::Series;
use refresh::Update;
use shoal::logging::{LogFilter, LogRecord};
use shoal::monitor::Snapshot;

pub use fieldplot::DRAWN_POINTS;
pub use graph::{GROUP_ABOVE, MAX_EDGES_DRAWN, PROCESSES_ABOVE, TEXT_ZOOM, name_prefix};
pub use inspector::INSPECTOR_KEEP;
pub use logs::LOGS_KEEP;
pub use refresh::{FEED_CAPACITY, IDLE_REPAINT};
pub use topic_table::TopicCol;
pub use widgets::{clock, health_color};

/// The eight views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Hosts, processes, topics, service counts.
    Overview,
    /// One topic's plots and connections.
    Topic,
    /// One topic's latest message.
    Inspector,
    /// Numeric fields picked in the Inspector, over time.
    Plot,
    /// Services: their servers and clients, methods, types, call counts and rates.
    Services,
    /// Processes, topics and services as a node-link diagram.
    Graph,
    /// What happened.
    Events,
    /// Every process's log messages.
    Logs,
}

impl Tab {
    /// Every tab, in order.
    pub const ALL: [Tab; 8] =
        [Tab::Overview, Tab::Topic, Tab::Inspector, Tab::Plot, Tab::Services, Tab::Graph, Tab::Events, Tab::Logs];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Topic => "Topic",
            Tab::Inspector => "Inspector",
            Tab::Plot => "Plot",
            Tab::Services => "Services",
            Tab::Graph => "Graph",
            Tab::Events => "Events",
            Tab::Logs => "Logs",
        }
    }

    /// The tab called `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.title().eq_ignore_ascii_case(name))
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
    /// The selected service (`None`: the Services tab shows every service's servers and clients).
    pub selected_service: Option<Arc<str>>,
    /// Frozen at this view time (seconds since the epoch); `None`: live.
    pub frozen_at: Option<f64>,
    /// Plot window of the Topic and Plot tabs, seconds.
    pub window_s: f64,
    /// Events of one kind only.
    pub event_kind: Option<EventKind>,
    /// Which log records the Logs tab shows.
    pub logs: LogFilter,
    /// How the Overview's process table groups its rows.
    pub process_group: ProcessGroup,
    /// The groups of the process table shown folded (host or unit names); changed only by
    /// [`UiState::toggle_folded`], which counts the changes for the tables' order.
    folded_groups: std::collections::BTreeSet<Arc<str>>,
    /// Changes of `folded_groups` so far.
    folded_version: u64,
    /// The process whose details the Overview shows (host, pid).
    pub selected_process: Option<(Arc<str>, u32)>,
}

/// How the Overview's process table groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessGroup {
    /// One row per process, by host and pid.
    #[default]
    None,
    /// Under a row per host.
    Host,
    /// Under a row per unit name (the same program on several hosts or started several times).
    Unit,
}

impl UiState {
    /// Folds group `name` of the process table, or unfolds it when it is folded.
    pub fn toggle_folded(&mut self, name: Arc<str>) {
        if !self.folded_groups.remove(&name) {
            self.folded_groups.insert(name);
        }
        self.folded_version += 1;
    }

    /// The groups of the process table shown folded.
    pub fn folded_groups(&self) -> &std::collections::BTreeSet<Arc<str>> {
        &self.folded_groups
    }
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
            selected_service: None,
            frozen_at: None,
            window_s: 60.0,
            event_kind: None,
            logs: LogFilter::default(),
            process_group: ProcessGroup::None,
            folded_groups: Default::default(),
            folded_version: 0,
            selected_process: None,
        }
    }
}

/// The monitor application state; [`MonitorApp::ui`] draws it into any `egui::Ui` (the window, or a test harness).
pub struct MonitorApp {
    /// Taken by the refresh thread once [`MonitorApp::start_refresh_thread`] ran.
    snapshots: Option<Box<dyn SnapshotSource + Send>>,
    /// Views and their events from the refresh thread.
    feed: Option<mpsc::Receiver<Update>>,
    /// The refresh thread: its stop flag and handle (joined when the app is dropped, so that the node it holds is
    /// dropped, and unregisters, before the process exits).
    refresh_thread: Option<(Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)>,
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
    graph: GraphState,
    series: Option<Series>,
    inspector: Inspector,
    /// The plotted fields.
    signals: Signals,
    /// The topics the message source follows now (the inspected one and the plotted ones).
    followed: Vec<Arc<str>>,
    /// Why the last field picked was not plotted (too many signals).
    plot_note: Option<String>,
    field_series: Option<FieldSeries>,
    refreshes: u64,
    log_source: Box<dyn LogSource>,
    /// The kept log records, oldest first (at most [`LOGS_KEEP`]).
    logs: VecDeque<LogRecord>,
    /// Counts the polls that brought records (the Logs table's order is found again when it changes).
    logs_generation: u64,
    /// Records pushed out of `logs` by newer ones.
    logs_evicted: u64,
    /// The Logs table's rows (indices into `logs`, newest first) and what they were found for.
    logs_order: (Option<(u64, LogFilter)>, Vec<usize>),
    /// The snapshots of the two newest views (the one before, the newest): what Export… saves.
    last_snapshots: (Option<Arc<Snapshot>>, Option<Arc<Snapshot>>),
    /// The Export… row.
    export: export::ExportState,
    /// An opened saved snapshot's banner ([`MonitorApp::opened`]); `None`: live.
    opened: Option<String>,
}

impl Drop for MonitorApp {
    fn drop(&mut self) {
        // The receiver first: a refresh thread blocked handing over a view returns.
        self.feed = None;
        if let Some((stop, thread)) = self.refresh_thread.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = thread.join();
        }
    }
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
            refresh_thread: None,
            messages,
            interner: Interner::default(),
            history: History::default(),
            refresh,
            auto_refresh: true,
            last_refresh: None,
            state: UiState::default(),
            order: Order::default(),
            events_order: (None, Vec::new()),
            graph: GraphState::default(),
            series: None,
            inspector: Inspector::default(),
            signals: Signals::default(),
            followed: Vec::new(),
            plot_note: None,
            field_series: None,
            refreshes: 0,
            log_source: Box::new(NoLogs),
            logs: VecDeque::new(),
            logs_generation: 0,
            logs_evicted: 0,
            logs_order: (None, Vec::new()),
            last_snapshots: (None, None),
            export: export::ExportState::default(),
            opened: None,
        }
    }

    /// An app that refreshes only when [`MonitorApp::refresh_now`] is called (tests).
    pub fn manual(snapshots: Box<dyn SnapshotSource + Send>, messages: Box<dyn MessageSource>) -> MonitorApp {
        let mut app = MonitorApp::new(snapshots, messages, Duration::from_secs(1));
        app.auto_refresh = false;
        app
    }

    /// Takes the Logs tab's records from `source` (without one the tab stays empty).
    pub fn with_logs(mut self, source: Box<dyn LogSource>) -> MonitorApp {
        self.log_source = source;
        self
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

    /// Selects service `name` (`None`: every service).
    pub fn select_service(&mut self, name: Option<&str>) {
        self.state.selected_service = name.map(Arc::from);
    }

    /// The plotted fields.
    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Plots `path` of `topic` (the Plot tab), from the next message on; its messages are taken from the next
    /// refresh on whichever tab is shown.
    pub fn plot_field(&mut self, topic: &str, path: FieldPath) -> Result<(), AddError> {
        self.signals.add(topic, path)
    }

    /// Plots `path` of `topic`, or stops when it is plotted; says so when no more signals fit.
    fn toggle_signal(&mut self, topic: &str, path: FieldPath) {
        self.plot_note = None;
        if let Some(i) = self.signals.list().iter().position(|s| &*s.topic == topic && s.path == path) {
            self.signals.remove(i);
        } else if let Err(e) = self.signals.add(topic, path) {
            self.plot_note = Some(format!("Not plotted: {e}."));
        }
        self.poll_messages();
    }

    /// Draws the whole monitor into `ui`; takes a snapshot first when one is due.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.catch_up(ui.ctx());
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
                Tab::Inspector => self.inspector_ui(ui, &view),
                Tab::Plot => self.field_plot(ui, &view),
                Tab::Services => self.services(ui, &view),
                Tab::Graph => self.graph(ui, &view),
                Tab::Events => self.events(ui),
                Tab::Logs => self.logs_ui(ui),
            }
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
