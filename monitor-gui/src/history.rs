//! The last minutes of views, for plots, freeze and scroll-back, and the events found by diffing them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{ConnKey, Problem, View};

/// How much history is kept by default.
pub const DEFAULT_RETAIN_S: f64 = 300.0;
/// At most this many events are kept.
pub const MAX_EVENTS: usize = 10_000;

/// What happened between two views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The monitor's first view: what was already running when it started.
    Start,
    /// A process appeared.
    ProcessNew,
    /// A process unregistered (it exited normally, or left while its registration was fresh).
    ProcessGone,
    /// A process vanished after its registration had gone stale: it expired (killed, hung, cut off).
    ProcessExpired,
    /// A publisher, subscriber, service server or client appeared.
    EntityNew,
    /// A publisher, subscriber, server or client unregistered (it was fresh when it vanished).
    EntityGone,
    /// A publisher, subscriber, server or client vanished after its registration had gone stale: it expired.
    Expired,
    /// A subscriber started receiving from a publisher over a layer.
    Match,
    /// That connection ended.
    Unmatch,
    /// A topic's types began to disagree.
    TypeMismatch,
    /// Messages were lost.
    Drops,
    /// A short-lived process (a tool such as `shoal list`, `ecal_mon_cli`) came and exited normally within
    /// [`SHORT_RUN_S`]: its process new/exit events and its endpoints' new/gone events folded into this one, shown
    /// quietly.
    ShortRun,
}

/// A process that exits normally (unregisters) within this many seconds of appearing is a short run
/// ([`EventKind::ShortRun`]).
pub const SHORT_RUN_S: f64 = 10.0;

impl EventKind {
    /// Every kind, in display order.
    pub const ALL: [EventKind; 12] = [
        EventKind::Start,
        EventKind::ProcessNew,
        EventKind::ProcessGone,
        EventKind::ShortRun,
        EventKind::ProcessExpired,
        EventKind::EntityNew,
        EventKind::EntityGone,
        EventKind::Expired,
        EventKind::Match,
        EventKind::Unmatch,
        EventKind::TypeMismatch,
        EventKind::Drops,
    ];

    /// Short text for tables.
    pub fn label(self) -> &'static str {
        match self {
            EventKind::Start => "start",
            EventKind::ProcessNew => "process new",
            EventKind::ProcessGone => "process exit",
            EventKind::ProcessExpired => "process expired",
            EventKind::EntityNew => "new",
            EventKind::EntityGone => "gone",
            EventKind::Expired => "expired",
            EventKind::Match => "match",
            EventKind::Unmatch => "unmatch",
            EventKind::TypeMismatch => "type mismatch",
            EventKind::Drops => "drops",
            EventKind::ShortRun => "short run",
        }
    }

    /// Drawn quietly (greyed): worth a line, not attention.
    pub fn is_quiet(self) -> bool {
        matches!(self, EventKind::ShortRun)
    }

    /// Drawn as a problem.
    pub fn is_problem(self) -> bool {
        matches!(self, EventKind::Expired | EventKind::TypeMismatch | EventKind::Drops | EventKind::ProcessExpired)
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When the view that showed it was taken, seconds since the UNIX epoch.
    pub time_s: f64,
    /// What happened.
    pub kind: EventKind,
    /// The topic, the service, or the process for process events.
    pub subject: Arc<str>,
    /// Details.
    pub detail: String,
    /// The process it is about, when it is about one (its logs are one click away in the Events tab).
    pub process: Option<ProcessRef>,
}

/// A process an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    /// Its unit name.
    pub unit: Arc<str>,
    /// Its host.
    pub host: Arc<str>,
    /// Its process id.
    pub pid: u32,
}

/// The events of the first view (`old` is `None`): one [`EventKind::Start`] that says what was already running;
/// afterwards [`diff`].
pub fn events_since(old: Option<&View>, new: &View) -> Vec<Event> {
    match old {
        Some(old) => diff(old, new),
        None => vec![Event {
            time_s: new.time_s,
            kind: EventKind::Start,
            subject: Arc::from("monitor"),
            detail: format!(
                "already running: {} processes, {} topics, {} service endpoints",
                new.processes.len(),
                new.topics.len(),
                new.service_endpoints.len()
            ),
            process: None,
        }],
    }
}

/// The events between `old` and `new`.
pub fn diff(old: &View, new: &View) -> Vec<Event> {
    let mut out = Vec::new();
    let t = new.time_s;
    // The process (host, pid) names, from either view.
    let units: HashMap<(&str, u32), &Arc<str>> =
        old.processes.iter().chain(&new.processes).map(|p| ((&*p.host, p.pid), &p.unit)).collect();
    let who = |host: &Arc<str>, pid: u32| {
        units.get(&(&**host, pid)).map(|unit| ProcessRef { unit: Arc::clone(unit), host: Arc::clone(host), pid })
    };
    let mut ev = |kind, subject: &Arc<str>, detail: String, process: Option<ProcessRef>| {
        out.push(Event { time_s: t, kind, subject: subject.clone(), detail, process })
    };
    let old_procs: HashMap<(&str, u32), _> = old.processes.iter().map(|p| ((&*p.host, p.pid), p)).collect();
    let new_procs: HashSet<(&str, u32)> = new.processes.iter().map(|p| (&*p.host, p.pid)).collect();
    for p in &new.processes {
        if !old_procs.contains_key(&(&*p.host, p.pid)) {
            ev(EventKind::ProcessNew, &p.unit, format!("{} ({})", p.label(), p.version), who(&p.host, p.pid));
        }
    }
    for p in &old.processes {
        if !new_procs.contains(&(&*p.host, p.pid)) {
            if p.registration_age_s > crate::model::STALE_AFTER.as_secs_f64() {
                ev(
                    EventKind::ProcessExpired,
                    &p.unit,
                    format!("{}: no registration for {:.1} s", p.label(), p.registration_age_s),
                    who(&p.host, p.pid),
                );
            } else {
                ev(EventKind::ProcessGone, &p.unit, format!("{} unregistered", p.label()), who(&p.host, p.pid));
            }
        }
    }
    let key = |e: &crate::model::EntityRow| (e.host.clone(), e.pid, e.entity_id);
    let old_ents: HashMap<_, _> = old.entities.iter().map(|e| (key(e), e)).collect();
    let new_ents: HashSet<_> = new.entities.iter().map(key).collect();
    for e in &new.entities {
        if !old_ents.contains_key(&key(e)) {
            let detail = format!("{} {} ({})", e.direction, e.process, e.type_name);
            ev(EventKind::EntityNew, &e.topic, detail, who(&e.host, e.pid));
        }
    }
    for e in &old.entities {
        if !new_ents.contains(&key(e)) {
            if e.registration_age_s > crate::model::STALE_AFTER.as_secs_f64() {
                ev(
                    EventKind::Expired,
                    &e.topic,
                    format!("{} {}: no registration for {:.1} s", e.direction, e.process, e.registration_age_s),
                    who(&e.host, e.pid),
                );
            } else {
                ev(EventKind::EntityGone, &e.topic, format!("{} {}", e.direction, e.process), who(&e.host, e.pid));
            }
        }
    }
    // Service servers and clients, as publishers and subscribers.
    let skey = |e: &crate::model::ServiceEndpointRow| (e.host.clone(), e.pid, e.entity_id, e.role);
    let old_eps: HashMap<_, _> = old.service_endpoints.iter().map(|e| (skey(e), e)).collect();
    let new_eps: HashSet<_> = new.service_endpoints.iter().map(skey).collect();
    for e in &new.service_endpoints {
        if !old_eps.contains_key(&skey(e)) {
            let methods: Vec<&str> = e.methods.iter().map(|m| &*m.name).collect();
            let detail = format!("{} {} ({})", e.role, e.process, methods.join(", "));
            ev(EventKind::EntityNew, &e.service, detail, who(&e.host, e.pid));
        }
    }
    for e in &old.service_endpoints {
        if !new_eps.contains(&skey(e)) {
            if e.registration_age_s > crate::model::STALE_AFTER.as_secs_f64() {
                ev(
                    EventKind::Expired,
                    &e.service,
                    format!("{} {}: no registration for {:.1} s", e.role, e.process, e.registration_age_s),
                    who(&e.host, e.pid),
                );
            } else {
                ev(EventKind::EntityGone, &e.service, format!("{} {}", e.role, e.process), who(&e.host, e.pid));
            }
        }
    }
    let old_conns: HashMap<ConnKey, _> = old.connections.iter().map(|c| (c.key(), c)).collect();
    let new_conns: HashSet<ConnKey> = new.connections.iter().map(|c| c.key()).collect();
    for c in &new.connections {
        match old_conns.get(&c.key()) {
            None => ev(EventKind::Match, &c.topic, format!("{} -> {} via {}", c.publisher, c.subscriber, c.via), None),
            // An eCAL subscriber's drops are its totals, told once per topic below.
            Some(o) if c.measured && c.drops > o.drops => ev(
                EventKind::Drops,
                &c.topic,
                format!(
                    "{} lost ({} -> {} via {}, {} in all)",
                    c.drops - o.drops,
                    c.publisher,
                    c.subscriber,
                    c.via,
                    c.drops
                ),
                // The subscriber that lost them.
                new.entities.iter().find(|e| e.entity_id == c.subscriber_id).and_then(|e| who(&e.host, e.pid)),
            ),
            Some(_) => {}
        }
    }
    for c in &old.connections {
        if !new_conns.contains(&c.key()) {
            ev(EventKind::Unmatch, &c.topic, format!("{} -> {} via {}", c.publisher, c.subscriber, c.via), None);
        }
    }
    for tp in &new.topics {
        let before = old.topic(&tp.name);
        if tp.problems.contains(Problem::TypeMismatch)
            && !before.is_some_and(|b| b.problems.contains(Problem::TypeMismatch))
        {
            let types: Vec<String> =
                new.entities_of(&tp.name).map(|e| format!("{} {}", e.direction, e.type_name)).collect();
            ev(EventKind::TypeMismatch, &tp.name, types.join(", "), None);
        }
        // Drops of subscribers without per-connection figures (eCAL subscribers).
        if !new.connections_of(&tp.name).any(|c| c.measured)
            && let Some(b) = before
            && tp.drops > b.drops
        {
            ev(EventKind::Drops, &tp.name, format!("{} lost ({} in all)", tp.drops - b.drops, tp.drops), None);
        }
    }
    out
}

/// The kept views (oldest first) and events.
#[derive(Debug)]
pub struct History {
    views: VecDeque<Arc<View>>,
    events: VecDeque<Event>,
    retain_s: f64,
    generation: u64,
}

impl Default for History {
    fn default() -> Self {
        History::new(DEFAULT_RETAIN_S)
    }
}

impl History {
    /// Keeps `retain_s` seconds of views.
    pub fn new(retain_s: f64) -> History {
        History { views: VecDeque::new(), events: VecDeque::new(), retain_s, generation: 0 }
    }

    /// Adds the newest view, finds its events, and forgets what is older than the retention.
    pub fn push(&mut self, view: View) {
        self.push_shared(Arc::new(view));
    }

    /// [`History::push`] of a shared view.
    pub fn push_shared(&mut self, view: Arc<View>) {
        let events = events_since(self.views.back().map(|v| &**v), &view);
        self.push_diffed(view, events);
    }

    /// Adds a view whose `events` (its [`diff`] against the newest kept view) were found elsewhere: the refresh
    /// thread diffs, so the UI thread does not.
    pub fn push_diffed(&mut self, view: Arc<View>, events: Vec<Event>) {
        let mut events = events;
        self.fold_short_runs(&mut events);
        for e in events {
            if self.events.len() == MAX_EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(e);
        }
        let newest = view.time_s;
        self.views.push_back(view);
        while self.views.front().is_some_and(|v| newest - v.time_s > self.retain_s) {
            self.views.pop_front();
        }
        self.generation += 1;
    }

    /// A process exiting normally (in `incoming`) that appeared within [`SHORT_RUN_S`] (its process-new event is
    /// among the kept ones): its events since then, kept and incoming, become one [`EventKind::ShortRun`].
    fn fold_short_runs(&mut self, incoming: &mut Vec<Event>) {
        let gone: Vec<(ProcessRef, f64, Arc<str>)> = incoming
            .iter()
            .filter(|e| e.kind == EventKind::ProcessGone)
            .filter_map(|e| e.process.clone().map(|p| (p, e.time_s, e.subject.clone())))
            .collect();
        for (p, t, subject) in gone {
            let Some(start) = self
                .events
                .iter()
                .rposition(|e| e.kind == EventKind::ProcessNew && e.process.as_ref() == Some(&p))
                .filter(|&i| t - self.events[i].time_s <= SHORT_RUN_S)
            else {
                continue;
            };
            let began = self.events[start].time_s;
            let tail: Vec<Event> = self.events.drain(start..).collect();
            let mut folded = 0usize;
            for e in tail {
                if e.process.as_ref() == Some(&p) {
                    folded += 1;
                } else {
                    self.events.push_back(e);
                }
            }
            incoming.retain(|e| {
                let mine = e.process.as_ref() == Some(&p);
                folded += usize::from(mine);
                !mine
            });
            incoming.push(Event {
                time_s: t,
                kind: EventKind::ShortRun,
                subject,
                detail: format!(
                    "{}@{}:{} ran for {:.1} s and exited ({folded} events folded)",
                    p.unit,
                    p.host,
                    p.pid,
                    t - began
                ),
                process: Some(p),
            });
        }
    }

    /// Changes whenever a view is added.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of kept views.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// True before the first view.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// The newest view.
    pub fn latest(&self) -> Option<&Arc<View>> {
        self.views.back()
    }

    /// The view at `index` (0 the oldest kept).
    pub fn get(&self, index: usize) -> Option<&Arc<View>> {
        self.views.get(index)
    }

    /// The kept views, oldest first.
    pub fn views(&self) -> impl DoubleEndedIterator<Item = &Arc<View>> + ExactSizeIterator {
        self.views.iter()
    }

    /// The events, oldest first.
    pub fn events(&self) -> &VecDeque<Event> {
        &self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ProcessRow, View};

    fn process(pid: u32, age_s: f64) -> ProcessRow {
        ProcessRow {
            host: "h".into(),
            pid,
            name: "p".into(),
            path: "/bin/p".into(),
            command_line: "/bin/p".into(),
            unit: format!("u{pid}").into(),
            kind: "shoal",
            version: "shoal".into(),
            registration_age_s: age_s,
            severity: shoal::Severity::Unknown,
            state: "unknown".into(),
            is_self: false,
            kernel_drops: None,
            memory_bytes: None,
            cpu_load: None,
            problems: Default::default(),
        }
    }

    /// A process that unregisters (fresh when it vanished) is an exit, not a problem; one that vanished after its
    /// registration went stale expired, a problem.
    #[test]
    fn a_normal_exit_is_not_a_problem_an_expiry_is() {
        let mut old = View::default();
        old.processes = vec![process(1, 0.4), process(2, 6.0)];
        let events = diff(&old, &View::default());
        let kinds: Vec<(u32, EventKind)> =
            events.iter().map(|e| (e.subject[1..].parse().unwrap_or(0), e.kind)).collect();
        assert_eq!(kinds, [(1, EventKind::ProcessGone), (2, EventKind::ProcessExpired)]);
        assert!(!EventKind::ProcessGone.is_problem() && EventKind::ProcessExpired.is_problem());
        assert_eq!(EventKind::ProcessGone.label(), "process exit");
    }

    /// The first view says what was already running (processes found before the monitor started are not silent).
    #[test]
    fn the_first_view_has_a_start_event() {
        let mut first = View::default();
        first.processes = vec![process(1, 0.1), process(2, 0.2)];
        let events = events_since(None, &first);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::Start);
        assert!(events[0].detail.starts_with("already running: 2 processes"), "{}", events[0].detail);
        assert!(events_since(Some(&first), &first).is_empty());
    }

    fn view_at(time_s: f64, pids: &[u32]) -> Arc<View> {
        let mut v = View::default();
        v.time_s = time_s;
        v.processes = pids.iter().map(|p| process(*p, 0.1)).collect();
        Arc::new(v)
    }

    /// A tool that comes and exits normally within 10 s is one quiet "short run" event, not a new and an exit
    /// (issue 26, defect 6: each `shoal list` run added two); a long-running one's exit and an expiry stay as they
    /// are, and so do other processes' events in between.
    #[test]
    fn a_short_run_folds_into_one_quiet_event() {
        let mut h = History::new(DEFAULT_RETAIN_S);
        for (t, pids) in [
            (0.0, &[1][..]),
            (1.0, &[1, 7]),    // 7: a tool starts
            (2.0, &[1, 7, 8]), // 8: a long-running process
            (3.0, &[1, 8]),    // the tool exits
            (20.0, &[1]),      // 8 exits after 18 s
            (21.0, &[1, 9]),   // 9: another tool...
            (29.0, &[1, 9]),
        ] {
            h.push_shared(view_at(t, pids));
        }
        let kinds: Vec<(EventKind, &str)> = h.events().iter().map(|e| (e.kind, &*e.subject)).collect();
        assert_eq!(
            kinds,
            [
                (EventKind::Start, "monitor"),
                (EventKind::ProcessNew, "u8"),
                (EventKind::ShortRun, "u7"),
                (EventKind::ProcessGone, "u8"),
                (EventKind::ProcessNew, "u9"),
            ]
        );
        let short = &h.events()[2];
        assert!(short.detail.contains("ran for 2.0 s and exited (2 events folded)"), "{}", short.detail);
        assert!(EventKind::ShortRun.is_quiet() && !EventKind::ShortRun.is_problem());
    }
}
