//! The tables' order: which topics and processes pass the filter, sorted by the chosen column; found again only
//! when a view arrives or the filter or sort changes.

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
}

#[derive(Debug, Default)]
pub(super) struct Order {
    key: OrderKey,
    /// Changes whenever the order is computed again.
    pub(super) version: u64,
    pub(super) topics: Vec<usize>,
    pub(super) processes: Vec<usize>,
}

impl MonitorApp {
    pub(super) fn update_order(&mut self, view: &View) {
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
}
