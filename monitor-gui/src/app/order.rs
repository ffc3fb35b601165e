//! The tables' order: which topics, processes and services pass the filter, sorted by the chosen column, and the
//! lines of the Services tab's endpoint table; found again only when a view arrives or the filter, the sort or the
//! selected service changes.

use std::sync::Arc;

use super::topic_table::TopicCol;
use super::widgets::contains_ci;
use super::{MonitorApp, ProcessGroup};
use crate::model::View;

#[derive(Debug, Default, PartialEq)]
struct OrderKey {
    generation: u64,
    view_time: f64,
    filter: String,
    problems_only: bool,
    sort: Option<(TopicCol, bool)>,
    service: Option<Arc<str>>,
    group: ProcessGroup,
    /// Changes of the folded groups (the set itself is not cloned every frame).
    folded_version: u64,
}

/// A line of the process table.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ProcLine {
    /// A group's head: its name, how many processes pass the filter in it, the sum of their CPU loads and memory
    /// (over those that announce them; `None` when none does), and whether it is folded.
    Group { name: Arc<str>, members: usize, cpu_load: Option<f64>, memory_bytes: Option<u64>, folded: bool },
    /// A process (index into the view's processes).
    Process(usize),
}

#[derive(Debug, Default)]
pub(super) struct Order {
    key: OrderKey,
    /// Changes whenever the order is computed again.
    pub(super) version: u64,
    pub(super) topics: Vec<usize>,
    pub(super) processes: Vec<usize>,
    /// The process table's lines: the processes in `processes`, under their groups' heads when grouped.
    pub(super) process_lines: Vec<ProcLine>,
    /// Indices into the view's services.
    pub(super) services: Vec<usize>,
    /// The Services tab's endpoint lines: (index into the view's service endpoints, index into its methods;
    /// `None` for an endpoint that announces none), for the selected service or else every service in order.
    pub(super) service_lines: Vec<(usize, Option<usize>)>,
}

impl MonitorApp {
    pub(super) fn update_order(&mut self, view: &View) {
        let key = OrderKey {
            generation: self.history.generation(),
            view_time: view.time_s,
            filter: self.state.filter.to_lowercase(),
            problems_only: self.state.problems_only,
            sort: Some(self.state.sort),
            service: self.state.selected_service.clone(),
            group: self.state.process_group,
            folded_version: self.state.folded_version,
        };
        if key == self.order.key {
            return;
        }
        let f = key.filter.as_str();
        self.order.topics.clear();
        self.order.topics.extend((0..view.topics.len()).filter(|&i| {
            let t = &view.topics[i];
            (!key.problems_only || t.problems.need_attention())
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
            (!key.problems_only || p.problems.need_attention())
                && (f.is_empty() || contains_ci(&p.unit, f) || contains_ci(&p.name, f) || contains_ci(&p.host, f))
        }));
        self.order.process_lines = process_lines(view, &self.order.processes, key.group, self.state.folded_groups());
        self.order.services.clear();
        self.order.services.extend((0..view.services.len()).filter(|&i| {
            let s = &view.services[i];
            (!key.problems_only || s.problems.need_attention())
                && (f.is_empty()
                    || contains_ci(&s.name, f)
                    || view
                        .endpoints_of(&s.name)
                        .any(|e| contains_ci(&e.process, f) || e.methods.iter().any(|m| contains_ci(&m.name, f))))
        }));
        self.order.service_lines.clear();
        let shown: Vec<&Arc<str>> = match &key.service {
            Some(sel) if view.service(sel).is_some() => vec![sel],
            _ => self.order.services.iter().map(|&i| &view.services[i].name).collect(),
        };
        for name in shown {
            for ei in view.endpoint_range(name) {
                let n = view.service_endpoints[ei].methods.len();
                if n == 0 {
                    self.order.service_lines.push((ei, None));
                }
                self.order.service_lines.extend((0..n).map(|mi| (ei, Some(mi))));
            }
        }
        self.order.key = key;
        self.order.version += 1;
    }
}

/// The process table's lines for the processes `shown` (indices into `view.processes`, by host and pid): each
/// process, or under `group` each group's head followed by its processes (none when it is in `folded`).
fn process_lines(
    view: &View,
    shown: &[usize],
    group: ProcessGroup,
    folded: &std::collections::BTreeSet<Arc<str>>,
) -> Vec<ProcLine> {
    let key_of = |i: usize| -> &Arc<str> {
        let p = &view.processes[i];
        match group {
            ProcessGroup::Unit => &p.unit,
            _ => &p.host,
        }
    };
    if group == ProcessGroup::None {
        return shown.iter().map(|&i| ProcLine::Process(i)).collect();
    }
    let mut sorted = shown.to_vec();
    // Stable: within a group the processes stay by host and pid.
    sorted.sort_by(|&a, &b| key_of(a).cmp(key_of(b)));
    let mut lines = Vec::with_capacity(sorted.len() + 8);
    for members in sorted.chunk_by(|&a, &b| key_of(a) == key_of(b)) {
        let name = key_of(members[0]).clone();
        let procs = || members.iter().map(|&i| &view.processes[i]);
        let sum = |f: fn(&crate::model::ProcessRow) -> Option<f64>| {
            procs().filter_map(f).fold(None, |acc: Option<f64>, x| Some(acc.unwrap_or(0.0) + x))
        };
        // Announced figures: summed saturating (a peer may announce anything).
        let memory = procs()
            .filter_map(|p| p.memory_bytes)
            .fold(None, |acc: Option<u64>, b| Some(acc.unwrap_or(0).saturating_add(b)));
        let is_folded = folded.contains(&name);
        lines.push(ProcLine::Group {
            name,
            members: members.len(),
            cpu_load: sum(|p| p.cpu_load),
            memory_bytes: memory,
            folded: is_folded,
        });
        if !is_folded {
            lines.extend(members.iter().map(|&i| ProcLine::Process(i)));
        }
    }
    lines
}
