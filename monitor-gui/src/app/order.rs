//! The tables' order: which topics, processes and services pass the filter, sorted by the chosen column, and the
//! lines of the Services tab's endpoint table; found again only when a view arrives or the filter, the sort or the
//! selected service changes.

use std::sync::Arc;

use super::MonitorApp;
use super::topic_table::TopicCol;
use super::widgets::contains_ci;
use crate::model::View;

#[derive(Debug, Default, PartialEq)]
struct OrderKey {
    generation: u64,
    view_time: f64,
    filter: String,
    problems_only: bool,
    sort: Option<(TopicCol, bool)>,
    service: Option<Arc<str>>,
}

#[derive(Debug, Default)]
pub(super) struct Order {
    key: OrderKey,
    /// Changes whenever the order is computed again.
    pub(super) version: u64,
    pub(super) topics: Vec<usize>,
    pub(super) processes: Vec<usize>,
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
