//! The Overview tab: the hosts and the service counts, then the process table and the topic table (in their own
//! files).

use shoal::monitor::printable as shown;

use super::MonitorApp;
use crate::model::View;

impl MonitorApp {
    pub(super) fn overview(&mut self, ui: &mut egui::Ui, view: &View) {
        hosts(ui, view);
        services_line(ui, view);
        ui.separator();
        ui.strong(format!("Processes ({} of {})", self.order.processes.len(), view.processes.len()));
        self.process_table(ui, view);
        ui.separator();
        ui.strong(format!("Topics ({} of {})", self.order.topics.len(), view.topics.len()));
        self.topic_table(ui, view);
    }
}

/// Per host its processes and publishers + subscribers.
fn hosts(ui: &mut egui::Ui, view: &View) {
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
}

/// Servers, clients and methods over every service (the Services tab shows them).
fn services_line(ui: &mut egui::Ui, view: &View) {
    let (servers, clients, methods) = view.service_totals();
    let problems = view.services.iter().filter(|s| s.problems.need_attention()).count();
    let text = format!(
        "Services: {} · {servers} servers · {clients} clients · {methods} methods · {problems} with problems",
        view.services.len()
    );
    let health = view.services.iter().map(|s| s.problems.health()).max().unwrap_or(crate::model::Health::Ok);
    ui.label(egui::RichText::new(text).color(super::widgets::health_color(health)));
}
