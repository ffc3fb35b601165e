//! Endpoints and processes in detail (issue: monitor round 2, features 8 and 9), against the scripted network: the
//! Topic view's table of every publisher and subscriber, eCAL-to-eCAL connections implied by registration, the
//! process table's CPU and memory, its grouping by host and unit, and a process's details.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use shoal::monitor::{Snapshot, TopicDirection};
use shoal_monitor::app::{MonitorApp, ProcessGroup, Tab};
use shoal_monitor::fixture::{Fixture, imu_descriptor};
use shoal_monitor::model::{Interner, build_view};
use shoal_monitor::source::SnapshotSource;

mod common;

use common::{app_after, harness};

fn topic_view(topic: &str, steps: u32) -> Harness<'static, MonitorApp> {
    let mut app = app_after(steps);
    app.select_topic(Some(topic));
    app.state.tab = Tab::Topic;
    let mut h = harness(app);
    h.run();
    h
}

/// Every publisher and subscriber of /imu has a row: its process, runtime, layers, data clock, type with encoding
/// and descriptor size, connections.
#[test]
fn the_topic_view_lists_every_endpoint_with_layers_clock_and_type() {
    let h = topic_view("/imu", 6);
    h.get_by_label("Endpoints (3)");
    h.get_by_label("shoal_ring,udp"); // the publisher's layers
    assert_eq!(h.get_all_by_label("pb.sensors.Imu (proto)").count(), 3, "one type cell per endpoint");
    let descriptor = shoal_monitor::model::fmt_bytes(imu_descriptor().len() as f64);
    assert_eq!(h.get_all_by_label(&descriptor).count(), 3, "the descriptor's size, {descriptor}");
    // The table is the view's entity rows: their clocks and runtimes are the snapshot's.
    let view = h.state().displayed().expect("view");
    let ends: Vec<_> = view.entities_of("/imu").collect();
    assert_eq!(ends.len(), 3);
    for e in &ends {
        assert_eq!(e.kind, Some("shoal"), "{e:?}");
        assert!(h.get_all_by_label(&e.messages.to_string()).next().is_some(), "clock {}", e.messages);
    }
    let publ = ends.iter().find(|e| e.direction == "pub").expect("publisher");
    assert_eq!((&*publ.layers, &*publ.encoding), ("shoal_ring,udp", "proto"));
    assert_eq!(publ.descriptor_bytes, imu_descriptor().len());
}

/// The eCAL logger's /status read by the eCAL recorder: no shoal subscriber measures it, so the connection is the
/// one the two registrations imply (UDP, both eCAL), with the subscriber's announced figures, said as such.
#[test]
fn an_ecal_to_ecal_connection_shows_in_the_topic_view() {
    let h = topic_view("/status", 8);
    h.get_by_label("udp (implied)");
    assert_eq!(h.get_all_by_label("legacy_logger@lab-pc:2002").count(), 2, "its connection and its endpoint");
    assert!(h.get_all_by_label_contains("ecal_recorder@lab-pc:2003").count() >= 2, "its connection and its endpoint");
    h.get_by_label("eCAL subscriber: its announced figures, layer from the registrations");
    h.get_by_label("not measured");
    // Still no invented figures: the eCAL mean is the subscriber's, said as such.
    h.get_by_label_contains("Its eCAL subscribers announce rate, drops and a mean latency");
    let view = h.state().displayed().expect("view");
    let c: Vec<_> = view.connections_of("/status").collect();
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(!c[0].measured && !c[0].shared_figures);
    assert_eq!((c[0].via, c[0].publisher_id, c[0].subscriber_id), ("udp", 0x5002, 0x5003));
    assert!(c[0].latency.is_none());
}

/// An eCAL subscriber with two publishers: one implied connection each, its figures marked as totals; a shared
/// layer decides (a publisher on shared memory only, on another host, has none); measured connections are not
/// doubled by implied ones.
#[test]
fn implied_connections_follow_the_layers_and_share_the_subscribers_totals() {
    let mut fixture = Fixture::new();
    let mut snap: Snapshot = fixture.snapshot();
    let cam_pub = snap.topics.iter().find(|t| t.topic_name == "/camera" && t.direction == TopicDirection::Publisher);
    let mut second = cam_pub.expect("camera publisher").clone();
    second.entity_id = 0x9001;
    second.pid = 2002;
    second.layers = vec!["shm".into(), "udp".into()];
    let mut far = second.clone();
    far.entity_id = 0x9002;
    far.host_name = "robot-2".into();
    far.layers = vec!["shm".into()];
    let mut sub = snap
        .topics
        .iter()
        .find(|t| t.topic_name == "/camera" && t.direction == TopicDirection::Subscriber)
        .expect("camera subscriber")
        .clone();
    sub.entity_id = 0x9003;
    sub.pid = 2003;
    sub.shoal = None;
    sub.layers = vec!["shm".into(), "udp".into()];
    sub.data_frequency_mhz = 60_000;
    snap.topics.extend([second, far, sub]);
    let view = build_view(&snap, None, &mut Interner::default());
    let conns: Vec<_> = view.connections_of("/camera").collect();
    let implied: Vec<_> = conns.iter().filter(|c| !c.measured).collect();
    assert_eq!(implied.len(), 2, "both local publishers, not the remote one without a shared layer: {conns:?}");
    for c in &implied {
        assert_eq!((c.via, c.subscriber_id, c.shared_figures, c.rate_hz), ("shm", 0x9003, true, 60.0), "{c:?}");
    }
    let measured: Vec<_> = conns.iter().filter(|c| c.measured).collect();
    assert_eq!(measured.len(), 1, "the shoal subscriber's own measurement, once: {conns:?}");
}

/// CPU and memory as the shoal processes announce them, "-" for eCAL's; a click on a unit shows the process's
/// details: command line, executable, use, state and its topics (each a link to the Topic view).
#[test]
fn the_process_table_shows_cpu_and_memory_and_a_click_shows_details() {
    let mut h = harness(app_after(8));
    h.run();
    // demo_pub (pid 1001) announces 130 ‰ of a core and 14 MiB at step 8 (the fixture's figures and wobble).
    let view = h.state().displayed().expect("view");
    let demo = view.processes.iter().find(|p| p.pid == 1001).expect("demo_pub");
    assert_eq!((demo.cpu_load, demo.memory_bytes), (Some(0.13), Some(14 << 20)));
    let camera = view.processes.iter().find(|p| p.pid == 2001).expect("ecal_camera");
    assert_eq!((camera.cpu_load, camera.memory_bytes), (None, None), "eCAL 6 announces neither");
    h.get_by_label("13.0 %");
    h.get_by_label(&shoal_monitor::model::fmt_bytes(f64::from(14u32 << 20)));
    // The unit's link (the executable has the same name).
    h.get_all_by_label("demo_pub").next().expect("unit").click();
    h.run();
    assert_eq!(h.state().state.selected_process.as_ref().map(|(h, p)| (&**h, *p)), Some(("lab-pc", 1001)));
    h.get_by_label("Process demo_pub@lab-pc:1001");
    h.get_by_label("/usr/bin/demo_pub --config /etc/demo_pub.yaml");
    h.get_by_label_contains("CPU 13.0 % of one core · memory");
    h.get_by_label("Publishes (1)");
    h.get_all_by_label("shoal_demo/0").last().expect("topic link").click();
    h.run();
    assert_eq!(h.state().state.tab, Tab::Topic);
    assert_eq!(h.state().state.selected.as_deref(), Some("shoal_demo/0"));

    // An eCAL process says what it does not announce.
    h.state_mut().state.tab = Tab::Overview;
    h.state_mut().state.selected_process = Some(("lab-pc".into(), 2001));
    h.run();
    h.get_by_label("not announced (eCAL 6 processes announce neither CPU nor memory)");
}

/// Grouped by host: a head row per host with its process count and sums; a click folds it. By unit: one head per
/// unit name.
#[test]
fn the_process_table_groups_by_host_and_unit_and_folds() {
    let mut h = harness(app_after(8));
    h.run();
    h.get_by_label("by host").click();
    h.run();
    assert_eq!(h.state().state.process_group, ProcessGroup::Host);
    h.get_by_label("- lab-pc");
    h.get_by_label("- robot-2");
    h.get_by_label("1 process"); // robot-2: navigation
    let view = h.state().displayed().expect("view");
    let on_lab = view.processes.iter().filter(|p| &*p.host == "lab-pc").count();
    h.get_by_label(&format!("{on_lab} processes"));
    assert_eq!(h.get_all_by_label("demo_pub").count(), 2, "unit and executable");
    h.get_by_label("- lab-pc").click();
    h.run();
    h.get_by_label("+ lab-pc");
    assert!(h.query_by_label("demo_pub").is_none(), "folded: lab-pc's processes are hidden");
    assert_eq!(h.get_all_by_label("navigation").count(), 2, "robot-2's process is still shown");
    h.get_by_label("by unit").click();
    h.run();
    h.get_by_label("- demo_pub");
    h.get_by_label("- ecal_camera");
}
