//! Each view of the monitor against the scripted network (`shoal_monitor::fixture`), through egui_kittest's
//! AccessKit tree: find by label, filter, sort, select, the inspector's protobuf decoding, problem highlighting,
//! the graph, the events and freeze. No window and no renderer: these run anywhere.

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable};
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages};

mod common;

use common::{app_after, harness};

/// The Inspector on `topic`, after `steps` refreshes before and `after` refreshes with it open.
fn inspecting(topic: &str, steps: u32, after: u32) -> Harness<'static, MonitorApp> {
    let mut app = app_after(steps);
    app.select_topic(Some(topic));
    app.state.tab = Tab::Inspector;
    let mut h = harness(app);
    h.run();
    for _ in 0..after {
        h.state_mut().refresh_now();
    }
    h.run();
    h
}

fn top(h: &Harness<'_, MonitorApp>, label: &str) -> f32 {
    h.get_by_label(label).rect().top()
}

#[test]
fn overview_lists_hosts_processes_and_topics_with_figures() {
    let mut h = harness(app_after(5));
    h.run();
    for topic in ["/camera", "/cmd_vel", "/imu", "/odom", "/status", "shoal_demo/0"] {
        h.get_by_label(topic);
    }
    assert!(h.get_all_by_label("robot-2").count() >= 2, "the host grid and the process table name robot-2");
    h.get_by_label("shoal_monitor (this monitor)");
    assert!(h.get_all_by_label("eCAL").count() >= 2, "the eCAL processes are marked eCAL");
    h.get_by_label("pb.sensors.Imu (proto)");
    h.get_by_label("shoal_ring,udp");
    h.get_by_label("1.0 MB"); // /camera's size
    h.get_by_label_contains("2 hosts · 9 processes · 6 topics");
}

#[test]
fn filter_narrows_topics() {
    let mut h = harness(app_after(3));
    h.run();
    h.get_by_label("/camera");
    let filter = h.get_by_label("Filter:");
    filter.focus();
    h.run();
    h.get_by_label("Filter:").type_text("imu");
    h.run();
    assert_eq!(h.state().state.filter, "imu");
    h.get_by_label("/imu");
    assert!(h.query_by_label("/camera").is_none(), "the filter hides /camera");
    assert!(h.query_by_label("shoal_demo/0").is_none());
    h.get_by_label_contains("Topics (1 of 6)");
}

#[test]
fn sort_by_rate_puts_the_fastest_topic_first() {
    let mut h = harness(app_after(3));
    h.run();
    // By name: /camera before shoal_demo/0.
    assert!(top(&h, "/camera") < top(&h, "shoal_demo/0"));
    h.get_by_label("Rate").click();
    h.run();
    // By rate, fastest first: shoal_demo/0 (1 kHz), /imu (200 Hz), /camera (30 Hz).
    assert!(top(&h, "shoal_demo/0") < top(&h, "/imu"));
    assert!(top(&h, "/imu") < top(&h, "/camera"));
    h.get_by_label("Rate v").click();
    h.run();
    assert!(top(&h, "/camera") < top(&h, "shoal_demo/0"), "a second click sorts ascending");
}

#[test]
fn selecting_a_topic_opens_its_detail_with_connections() {
    let mut h = harness(app_after(10));
    h.run();
    h.get_by_label("/imu").click();
    h.run();
    assert_eq!(h.state().state.tab, Tab::Topic);
    assert_eq!(h.state().state.selected.as_deref(), Some("/imu"));
    h.get_by_label("Rate (messages/s)");
    h.get_by_label("Latency histogram of the last window (log µs)");
    assert_eq!(h.get_all_by_label("navigation@robot-2:3001").count(), 2, "its connection and its endpoint");
    h.get_by_label("clock not shared"); // the UDP connection crosses hosts
    // One row per connection, and the publisher's own in the endpoint table.
    assert_eq!(h.get_all_by_label("imu_driver@lab-pc:1004").count(), 3, "one row per connection and endpoint");
    h.get_all_by_label("imu_driver@lab-pc:1004").next().expect("row").click();
    h.run();
    assert!(h.state().state.connection.is_some(), "clicking a connection selects it for the plots");
}

#[test]
fn inspector_decodes_protobuf_through_the_descriptor_and_pauses() {
    let mut h = inspecting("/imu", 3, 2);
    h.get_by_label_contains("type pb.sensors.Imu (proto)");
    h.get_by_label("frame_id: \"imu_link\"");
    h.get_by_label("z: 9.81");
    h.get_by_label("message {5}");
    h.get_by_label("Pause").click();
    h.run();
    h.get_by_label_contains("message 3 of 3 kept · clock 3 ·");
    h.state_mut().refresh_now();
    h.run();
    h.get_by_label_contains("message 3 of 3 kept · clock 3 ·"); // paused: the new message is held, not shown
    h.get_by_label_contains("Paused: 1 newer messages arrived");
    h.get_by_label("< Previous").click();
    h.run();
    h.get_by_label_contains("message 2 of 3 kept · clock 2 ·");
    h.get_by_label("Hex").click();
    h.run();
    h.get_by_label_contains("000000  08 ");
}

/// The whole label of the one node whose label contains `needle`.
fn label_containing(h: &Harness<'_, MonitorApp>, needle: &str) -> String {
    let found = std::cell::RefCell::new(Vec::new());
    let _ = h
        .query_all_by(|n| {
            // A label widget keeps its text in the node's value.
            let l = n.value().or(n.label()).unwrap_or_default();
            let hit = l.contains(needle);
            if hit {
                found.borrow_mut().push(l.to_string());
            }
            hit
        })
        .count();
    let found = found.into_inner();
    // (a label's text may appear in two nodes of the tree)
    assert!(!found.is_empty() && found.iter().all(|l| *l == found[0]), "one text with {needle:?}: {found:?}");
    found[0].clone()
}

/// Paused means frozen: with the 100 kept messages full and 150 more arriving, the shown message and its neighbours
/// stay, each Next moves one message, and Resume shows the newest.
#[test]
fn inspector_pause_holds_while_messages_keep_arriving() {
    let mut h = inspecting("/imu", 1, 120);
    h.get_by_label_contains("message 100 of 100 kept");
    h.get_by_label("Pause").click();
    h.run();
    let shown = label_containing(&h, "message 100 of 100 kept");
    for _ in 0..20 {
        h.get_by_label("< Previous").click();
        h.run();
    }
    let at = label_containing(&h, "message 80 of 100 kept");
    for _ in 0..150 {
        h.state_mut().refresh_now();
    }
    h.run();
    assert_eq!(label_containing(&h, "message 80 of 100 kept"), at, "it did not slide");
    h.get_by_label_contains("Paused: 150 newer messages arrived");
    h.get_by_label("Next >").click();
    h.run();
    h.get_by_label("Next >").click();
    h.run();
    h.get_by_label_contains("message 82 of 100 kept");
    h.get_by_label("Resume").click();
    h.run();
    h.state_mut().refresh_now();
    h.run();
    let after = label_containing(&h, "message 100 of 100 kept");
    assert_ne!(after, shown, "Resume shows the newest again: {after}");
}

#[test]
fn inspector_shows_text_payloads_as_text() {
    let h = inspecting("/status", 2, 1);
    h.get_by_label("Text:");
    h.get_by_label_contains("ok, uptime");
}

/// After its publisher went, a topic's row shows no current size or latency: the size is "last", greyed, and
/// the mean latency its subscriber still announces is not shown as one (issue 26, defect 3).
#[test]
fn a_topic_whose_publisher_went_shows_its_last_size_as_such_and_no_latency() {
    let mut h = harness(app_after(65)); // teleop published /cmd_vel in steps 30..60
    h.run();
    let view = h.state().displayed().expect("view");
    let row = view.topic("/cmd_vel").expect("/cmd_vel");
    assert_eq!((row.publishers, row.subscribers, row.no_publisher), (0, 1, true));
    assert!(row.latency_mean_us.is_some(), "the subscriber still announces a mean: {row:?}");
    h.get_by_label("last 48 B");
    assert!(h.query_by_label("eCAL mean 300 µs").is_none(), "no latency for data that does not flow");
    assert!(h.query_by_label("48 B").is_none(), "the size is not shown as a current one");
    h.get_by_label("pb.Twist (proto)");
    h.get_by_label("/cmd_vel").click();
    h.run();
    h.get_by_label("No connection figures: the topic has no publisher now.");
}

/// The Inspector keeps its messages while another tab is shown, and says when the topic has no publisher any more
/// (issue 26, defect 3: it said "No message received yet" though it had held 100).
#[test]
fn the_inspector_keeps_its_messages_across_tabs_and_says_when_the_publisher_is_gone() {
    let kept = |h: &Harness<'_, MonitorApp>| -> usize {
        let l = label_containing(h, "kept · clock");
        l.split(" of ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).expect(&l)
    };
    let mut h = inspecting("/cmd_vel", 40, 5); // teleop publishes /cmd_vel
    let before = kept(&h);
    assert!(before >= 5, "{before}");
    assert!(h.query_by_label_contains("No publisher now").is_none());
    h.state_mut().state.tab = Tab::Overview;
    for _ in 0..25 {
        h.state_mut().refresh_now(); // teleop ends at step 60
    }
    h.run();
    h.state_mut().state.tab = Tab::Inspector;
    h.run();
    // Those kept before, and (the fixture's source delivering on every poll) the ones since the tab came back.
    let after = kept(&h);
    assert!((before..before + 3).contains(&after), "kept {before}, now {after}");
    h.get_by_label_contains("No publisher now: these are the last");
}

#[test]
fn problems_are_named_and_problems_only_hides_healthy_topics() {
    let mut h = harness(app_after(8));
    h.run();
    h.get_by_label("type mismatch"); // /odom
    h.get_by_label("no publisher"); // /cmd_vel before teleop starts
    h.get_by_label("drops rising"); // /camera
    h.get_by_label("healthy — stale"); // legacy_logger's registration is late
    h.get_by_label("warning: frames dropped — bad state");
    h.get_by_label("Problems only").click();
    h.run();
    assert!(h.query_by_label("shoal_demo/0").is_none(), "healthy topics are hidden");
    assert!(h.query_by_label("/imu").is_none());
    h.get_by_label("/odom");
    h.get_by_label("/camera");
    let view = h.state().displayed().expect("view");
    use shoal_monitor::model::{Health, Problem};
    assert_eq!(view.topic("/odom").expect("odom").problems.health(), Health::Error);
    assert!(view.topic("/status").expect("status").problems.contains(Problem::Stale));
    assert_eq!(view.topic("shoal_demo/0").expect("demo").problems.health(), Health::Ok);
}

#[test]
fn graph_shows_processes_and_topics_and_selects_on_click() {
    let mut app = app_after(3);
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    // Each on both sides: imu_driver publishes and serves, navigation subscribes and calls.
    assert_eq!(h.get_all_by_label("imu_driver@lab-pc:1004").count(), 2);
    assert_eq!(h.get_all_by_label("navigation@robot-2:3001").count(), 2);
    h.get_by_label("/odom").click();
    h.run();
    assert_eq!(h.state().state.selected.as_deref(), Some("/odom"));
}

#[test]
fn events_list_matches_unmatches_and_expiries() {
    let mut app = app_after(65);
    app.state.tab = Tab::Events;
    let mut h = harness(app);
    h.run();
    // The kind buttons come before the table's cells.
    h.get_all_by_label("expired").next().expect("kind button").click();
    h.run();
    h.get_by_label("sub ecal_recorder@lab-pc:2003: no registration for 11.3 s");
    h.get_by_label("1 events (newest first)");
    h.get_all_by_label("match").next().expect("kind button").click();
    h.run();
    h.get_by_label("teleop@lab-pc:1005 -> navigation@robot-2:3001 via udp");
    h.get_all_by_label("unmatch").next().expect("kind button").click();
    h.run();
    h.get_by_label("teleop@lab-pc:1005 -> navigation@robot-2:3001 via udp");
}

#[test]
fn freeze_keeps_the_shown_view_and_scrolls_back() {
    let mut h = harness(app_after(5));
    h.run();
    let t0 = h.state().displayed().expect("view").time_s;
    h.get_by_label("Freeze").click();
    h.run();
    h.state_mut().refresh_now();
    h.state_mut().refresh_now();
    h.run();
    assert_eq!(h.state().displayed().expect("view").time_s, t0, "frozen: newer snapshots are not shown");
    assert_eq!(h.state().history().len(), 7, "but they are recorded");
    h.state_mut().state.frozen_at = Some(t0 - 3.0);
    h.run();
    assert_eq!(h.state().displayed().expect("view").time_s, t0 - 3.0, "scrolled back three refreshes");
    h.get_by_label("Frozen (click for live)").click();
    h.run();
    assert_eq!(h.state().displayed().expect("view").time_s, t0 + 2.0, "live again");
}

/// The scale network: 1000 generated topics over 200 processes besides the scripted ones.
fn scale_app(steps: u32) -> MonitorApp {
    let mut app = MonitorApp::manual(Box::new(Fixture::with_scale(1000, 200)), Box::new(FixtureMessages::default()));
    for _ in 0..steps {
        app.refresh_now();
    }
    app
}

#[test]
fn at_scale_only_rows_in_sight_are_laid_out_and_the_filter_finds_any_topic() {
    let mut h = harness(scale_app(2));
    h.run();
    h.get_by_label_contains("Topics (1006 of 1006)");
    h.get_by_label("/camera"); // first by name
    assert!(h.query_by_label("/fleet/sensor_0999").is_none(), "rows out of sight are not laid out");
    h.get_by_label("Filter:").focus();
    h.run();
    h.get_by_label("Filter:").type_text("sensor_0999");
    h.run();
    h.get_by_label_contains("Topics (1 of 1006)");
    assert!(h.query_by_label("/camera").is_none());
    h.get_by_label("/fleet/sensor_0999").click();
    h.run();
    assert_eq!(h.state().state.selected.as_deref(), Some("/fleet/sensor_0999"));
    assert_eq!(h.state().state.tab, Tab::Topic);
    // Its publisher, in the connection table and the endpoint table.
    assert_eq!(h.get_all_by_label("node_199@lab-pc:10199").count(), 2);
}

#[test]
fn at_scale_the_sort_reaches_rows_that_were_out_of_sight() {
    let mut h = harness(scale_app(2));
    h.run();
    assert!(h.query_by_label("/fleet/sensor_0999").is_none());
    h.get_by_label("Topic ^").click(); // by name, descending
    h.run();
    h.get_by_label("shoal_demo/0");
    h.get_by_label("/fleet/sensor_0999");
    assert!(top(&h, "shoal_demo/0") < top(&h, "/fleet/sensor_0999"));
    assert!(h.query_by_label("/camera").is_none(), "now out of sight");
}

/// The Graph at 1,000 topics (issue 26 defect 5): it used to draw the first 60 topics by name and leave out the
/// rest, live ones among them. Now every topic is reachable: shown, or counted in a group node that expands.
#[test]
fn at_scale_the_graph_groups_topics_and_every_one_is_reachable() {
    let mut app = scale_app(2);
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    // A live topic that sorts last by name is shown, and the 1,000 fleet topics are one group with their count.
    h.get_by_label("shoal_demo/0");
    h.get_by_label("+ /fleet… 1000 topics · 1000 live");
    h.get_by_label_contains("1000 of them in 1 collapsed group");
    // The fleet's 200 publishing processes are one node, and its 200 subscribing ones another, not 400 nodes pushed
    // off screen.
    assert_eq!(h.get_all_by_label("+200 processes of /fleet…").count(), 2);
    // The topics with problems come first.
    assert!(top(&h, "/odom") < top(&h, "shoal_demo/0"), "a topic with a problem above a healthy one");
    h.get_by_label("+ /fleet… 1000 topics · 1000 live").click();
    h.run();
    h.get_by_label("/fleet/sensor_0000");
    assert!(h.query_by_label("/fleet/sensor_0999").is_none(), "out of sight: not laid out");
    // Scrolling the canvas reaches the last one.
    let canvas = h.get_by_label("/fleet/sensor_0000").rect().center();
    let mut scrolls = 0;
    while h.query_by_label("/fleet/sensor_0999").is_none() {
        assert!(scrolls < 200, "the last fleet topic was not reached by scrolling");
        h.event(egui::Event::PointerMoved(canvas));
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -600.0),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::NONE,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run();
        scrolls += 1;
    }
    h.get_by_label("/fleet/sensor_0999").click();
    h.run();
    assert_eq!(h.state().state.selected.as_deref(), Some("/fleet/sensor_0999"));
}

#[test]
fn at_scale_the_graph_focuses_on_a_topic_and_on_a_process() {
    let mut app = scale_app(2);
    app.state.tab = Tab::Graph;
    app.select_topic(Some("/fleet/sensor_0999"));
    let mut h = harness(app);
    h.run();
    h.get_by_label("Focus on /fleet/sensor_0999").click();
    h.run();
    // The topic, its publisher (left) and its subscriber (right), nothing else.
    h.get_by_label("/fleet/sensor_0999");
    let (publisher, subscriber) =
        (h.get_by_label("node_199@lab-pc:10199").rect(), h.get_by_label("node_000@lab-pc:10000").rect());
    let topic = h.get_by_label("/fleet/sensor_0999").rect();
    assert!(publisher.right() < topic.left() && topic.right() < subscriber.left());
    for r in [publisher, subscriber, topic] {
        assert!(
            egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1400.0, 900.0)).contains_rect(r),
            "{r:?} on screen"
        );
    }
    assert!(h.query_by_label("/camera").is_none());
    assert!(h.query_by_label_contains("/fleet…").is_none());
    // A click on the publisher: it and the topics it takes part in (publishes 0199, 0399, …; subscribes 0198, …).
    h.get_by_label("node_199@lab-pc:10199").click();
    h.run();
    h.get_by_label_contains("Focus on node_199@lab-pc:10199");
    for t in
        ["/fleet/sensor_0199", "/fleet/sensor_0599", "/fleet/sensor_0999", "/fleet/sensor_0198", "/fleet/sensor_0998"]
    {
        h.get_by_label(t);
    }
    assert!(h.query_by_label("/fleet/sensor_0000").is_none());
    assert!(h.query_by_label("node_000@lab-pc:10000").is_none(), "not a direct neighbour");
    // A click on one of its topics moves the focus there: the topic's subscriber comes in.
    h.get_by_label("/fleet/sensor_0599").click();
    h.run();
    assert_eq!(h.state().state.selected.as_deref(), Some("/fleet/sensor_0599"));
    h.get_by_label_contains("Focus on /fleet/sensor_0599");
    h.get_by_label("node_000@lab-pc:10000");
    assert!(h.query_by_label("/fleet/sensor_0999").is_none());
    h.get_by_label("Show all").click();
    h.run();
    h.get_by_label("+ /fleet… 1000 topics · 1000 live");
}

#[test]
fn at_scale_the_graph_follows_the_filter() {
    let mut app = scale_app(2);
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    h.state_mut().state.filter = "sensor_0999".into();
    h.run();
    h.get_by_label("/fleet/sensor_0999");
    h.get_by_label("node_199@lab-pc:10199");
    h.get_by_label("node_000@lab-pc:10000");
    h.get_by_label_contains("1 of 1006 topics");
    assert!(h.query_by_label("/camera").is_none(), "the layout follows the filter");
    assert!(h.query_by_label_contains("/fleet…").is_none(), "one topic: no group");
}

#[test]
fn the_graph_zooms_with_its_buttons_and_ctrl_scroll_and_pans_with_a_drag() {
    let mut app = app_after(3);
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    let w0 = h.get_by_label("/odom").rect().width();
    h.get_by_label("Zoom out").click();
    h.run();
    let w1 = h.get_by_label("/odom").rect().width();
    assert!((w1 * 1.5 - w0).abs() < 1.0, "{w0} -> {w1}");
    let at = h.get_by_label("/odom").rect().center();
    h.event(egui::Event::PointerMoved(at));
    h.event(egui::Event::Zoom(2.0));
    h.run();
    let w2 = h.get_by_label("/odom").rect().width();
    assert!((w2 - 2.0 * w1).abs() < 1.0, "{w1} -> {w2}");
    h.get_by_label("Fit").click();
    h.run();
    assert!((h.get_by_label("/odom").rect().width() - w0).abs() < 1.0, "fit: back to full size");
    // A drag (here starting on a node) pans.
    let before = h.get_by_label("/odom").rect();
    let from = before.center();
    let to = from + egui::vec2(100.0, 80.0);
    h.event(egui::Event::PointerMoved(from));
    h.event(egui::Event::PointerButton {
        pos: from,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: egui::Modifiers::NONE,
    });
    h.run();
    for i in 1..=5 {
        h.event(egui::Event::PointerMoved(from + (to - from) * (i as f32 / 5.0)));
        h.run();
    }
    h.event(egui::Event::PointerButton {
        pos: to,
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: egui::Modifiers::NONE,
    });
    h.run();
    let after = h.get_by_label("/odom").rect();
    assert!((after.min - before.min - (to - from)).length() < 1.0, "{before:?} -> {after:?}");
    assert_eq!(h.state().state.selected, None, "a drag is not a click");
}

fn event_count(h: &Harness<'_, MonitorApp>) -> usize {
    let node = h.get_by_label_contains("events (newest first)");
    // A label's text is its AccessKit value.
    let text = node.accesskit_node().value().unwrap_or_default();
    text.split(' ').next().and_then(|n| n.parse().ok()).expect("a count")
}

#[test]
fn the_events_table_follows_new_views_and_the_filter() {
    let mut app = app_after(10);
    app.state.tab = Tab::Events;
    let mut h = harness(app);
    h.run();
    let all = event_count(&h);
    assert!(all > 0);
    for _ in 0..25 {
        h.state_mut().refresh_now(); // teleop starts at step 30
    }
    h.run();
    let more = event_count(&h);
    assert!(more > all, "new views bring new events ({all} before, {more} after)");
    h.get_by_label("teleop@lab-pc:1005 -> navigation@robot-2:3001 via udp");
    h.state_mut().state.filter = "teleop".into();
    h.run();
    let teleop = event_count(&h);
    assert!(teleop >= 2 && teleop < more, "the filter keeps teleop's events ({teleop} of {more})");
    assert!(h.query_by_label_contains("lost (").is_none(), "the camera's drops are filtered out");
}

#[test]
fn the_services_view_model_has_servers_clients_methods_types_and_call_rates() {
    use shoal_monitor::fixture::{CALIB_GET_RATE, CALIB_SERVICE};
    use shoal_monitor::model::{Interner, Problem, build_view};
    let mut fixture = Fixture::new();
    let mut interner = Interner::default();
    let first = build_view(&fixture.next_snapshot(), None, &mut interner);
    // One registration seen: the counts are known, the rates not yet ("—", never 0).
    let get = |v: &shoal_monitor::model::View, service: &str, role: &str, pid: u32, method: &str| {
        v.endpoints_of(service)
            .find(|e| e.role == role && e.pid == pid)
            .and_then(|e| e.methods.iter().find(|m| &*m.name == method))
            .cloned()
            .unwrap_or_else(|| panic!("{service} {role} {pid} {method}"))
    };
    assert_eq!(get(&first, CALIB_SERVICE, "server", 1004, "get").call_rate_hz, None);
    assert!(first.services.iter().all(|s| s.call_rate_hz.is_none()));
    let mut view = first;
    for _ in 0..9 {
        view = build_view(&fixture.next_snapshot(), Some(&view), &mut interner);
    }
    let names: Vec<&str> = view.services.iter().map(|s| &*s.name).collect();
    assert_eq!(names, ["calibration", "camera/control", "logger/control", "map_server"]);
    let calib = view.service(CALIB_SERVICE).expect("calibration");
    assert_eq!((calib.servers, calib.clients, calib.methods), (1, 2, 2));
    assert!(calib.problems.is_empty(), "{:?}", calib.problems);
    // The server's endpoint: process, host, unit, port, kind.
    let server = view.endpoints_of(CALIB_SERVICE).next().expect("server first");
    assert_eq!((server.role, &*server.process, &*server.unit), ("server", "imu_driver@lab-pc:1004", "imu_driver"));
    assert_eq!((server.kind, server.tcp_port.is_some_and(|p| p > 0)), (Some("shoal"), true));
    let m = get(&view, CALIB_SERVICE, "server", 1004, "get");
    assert_eq!((&*m.request.name, &*m.request.encoding), ("pb.calib.Request", "proto"));
    assert_eq!(&*m.response.name, "pb.calib.Calibration");
    assert_eq!(m.request.text(), "proto:pb.calib.Request");
    // The rate derived from successive call counts is the scripted one; the counts go up.
    assert_eq!(m.call_rate_hz, Some(CALIB_GET_RATE), "{m:?}");
    assert!(m.calls >= (CALIB_GET_RATE * 9.0) as i64, "{m:?}");
    assert_eq!(get(&view, CALIB_SERVICE, "client", 3001, "get").call_rate_hz, Some(4.0));
    assert_eq!(get(&view, CALIB_SERVICE, "client", 1002, "get").call_rate_hz, Some(1.0));
    let next = build_view(&fixture.next_snapshot(), Some(&view), &mut interner);
    assert_eq!(get(&next, CALIB_SERVICE, "server", 1004, "get").calls - m.calls, CALIB_GET_RATE as i64);
    // Errors: no registration announces them, so not known (None, "—"), never 0.
    assert!(view.service_endpoints.iter().flat_map(|e| &e.methods).all(|m| m.errors.is_none()));
    // eCAL's server; the stale logger's server, its rate marked stale; a client without a server.
    let cam = view.endpoints_of("camera/control").next().expect("camera server");
    assert_eq!((cam.kind, cam.stale), (Some("eCAL"), false));
    let logger = view.endpoints_of("logger/control").next().expect("logger server");
    assert!(logger.stale && logger.registration_age_s > 3.0, "{logger:?}");
    assert!(view.service("logger/control").expect("logger").problems.contains(Problem::Stale));
    let map = view.service("map_server").expect("map");
    assert_eq!((map.servers, map.clients, map.methods, map.call_rate_hz), (0, 1, 0, None));
    assert!(map.problems.contains(Problem::NoServer));
    assert_eq!(view.service_totals(), (3, 3, 4));
}

#[test]
fn the_services_tab_shows_servers_clients_methods_and_rates_and_selects_a_service() {
    let mut app = app_after(10);
    app.state.tab = Tab::Services;
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("Services (4 of 4) · 3 servers · 3 clients · 4 methods");
    for s in ["calibration", "camera/control", "logger/control", "map_server"] {
        // Its row in the service table, and in the endpoint table on its first line.
        assert_eq!(h.get_all_by_label(s).count(), 2, "{s}");
    }
    h.get_by_label("imu_driver@lab-pc:1004");
    assert_eq!(h.get_all_by_label("navigation@robot-2:3001").count(), 2, "calibration's and map_server's client");
    h.get_all_by_label("proto:pb.calib.Request").next().expect("request type");
    h.get_all_by_label("raw:exposure_req").next().expect("eCAL's raw request type");
    h.get_by_label("6.0/s"); // calibration: get 5/s + set 1/s
    h.get_all_by_label("5.0/s").next().expect("the server's get");
    h.get_all_by_label("4.0/s").next().expect("navigation's get");
    assert!(h.query_all_by_label_contains("/s (stale)").count() >= 1, "the stale logger's rate is marked stale");
    h.get_by_label("no server");
    assert!(h.get_all_by_label("—").count() >= 6, "errors are not known: —");
    h.get_all_by_label("map_server").next().expect("the service table's row").click();
    h.run();
    assert_eq!(h.state().state.selected_service.as_deref(), Some("map_server"));
    h.get_by_label_contains("Servers and clients of map_server");
    assert!(h.query_by_label("imu_driver@lab-pc:1004").is_none(), "only map_server's endpoints");
    h.get_by_label("get_map");
    h.get_all_by_label("map_server").next().expect("the service table's row").click();
    h.run();
    assert_eq!(h.state().state.selected_service, None, "a second click shows every service again");
}

#[test]
fn the_overview_counts_services_and_the_graph_draws_them() {
    let mut h = harness(app_after(5));
    h.run();
    h.get_by_label_contains("Services: 4 · 3 servers · 3 clients · 4 methods · 2 with problems");
    h.get_by_label_contains("6 topics · 4 services ·");
    h.state_mut().state.tab = Tab::Graph;
    h.run();
    h.get_by_label("calibration (service)");
    h.get_by_label("map_server (service)");
    // imu_driver serves calibration (right) and publishes /imu (left): a node on each side.
    assert_eq!(h.get_all_by_label("imu_driver@lab-pc:1004").count(), 2);
    h.get_by_label("calibration (service)").click();
    h.run();
    assert_eq!(h.state().state.selected_service.as_deref(), Some("calibration"));
}

/// A topic nobody subscribes to is a note, not a problem: 1,000 published-only topics do not make 1,000 "with
/// problems", are not coloured, and "Problems only" hides them (the row still says "no subscriber").
#[test]
fn topics_without_subscribers_are_noted_not_counted_as_problems() {
    use shoal::monitor::TopicDirection;
    use shoal_monitor::model::{Health, Interner, Problem, build_view};
    use shoal_monitor::source::SnapshotSource as _;
    let mut fixture = Fixture::with_scale(1000, 200);
    let mut snap = fixture.snapshot();
    snap.topics.retain(|t| !(t.topic_name.starts_with("/fleet/") && t.direction == TopicDirection::Subscriber));
    let view = build_view(&snap, None, &mut Interner::default());
    let unsubscribed = view.topics.iter().filter(|t| t.subscribers == 0 && t.publishers > 0).count();
    assert!(unsubscribed >= 1000, "{unsubscribed} topics without subscribers");
    let counted = view.problem_count();
    assert!(counted < 20, "{counted} with problems");
    let t = view.topics.iter().find(|t| t.name.starts_with("/fleet/")).expect("a fleet topic");
    assert!(t.problems.contains(Problem::NoSubscribers), "still said");
    assert_eq!(t.problems.health(), Health::Ok);
    assert!(!t.problems.need_attention(), "not counted, not kept by Problems only");
}

#[test]
fn the_logs_tab_lists_every_process_s_records_newest_first_and_filters_them() {
    use shoal::logging::LogLevel;
    use shoal_monitor::source::ScriptedLogs;
    let logs = ScriptedLogs::default();
    logs.0.lock().unwrap().extend(shoal_monitor::fixture::fixture_logs(1_700_000_000_000_000));
    let mut app = app_after(2).with_logs(Box::new(logs.clone()));
    app.state.tab = Tab::Logs;
    let mut h = harness(app);
    h.run();
    h.get_by_label("6 of 6 log records (newest first; 0 dropped)");
    h.get_by_label("cannot write /data/run_0042.hdf5: no space left");
    assert_eq!(h.get_all_by_label("ecal_recorder:2003").count(), 2);
    // Newest first.
    assert!(top(&h, "cannot write /data/run_0042.hdf5: no space left") < top(&h, "map loaded: 4096 x 4096 cells"));
    // Level: warning and above.
    h.get_by_label("warning+").click();
    h.run();
    h.get_by_label("3 of 6 log records (newest first; 0 dropped)");
    assert!(h.query_by_label("joystick connected").is_none());
    h.get_by_label("localisation drift 0.4 m, relocalising");
    // A record that arrives later is shown, filtered alike.
    logs.0.lock().unwrap().extend(shoal_monitor::fixture::fixture_logs(1_700_000_010_000_000).into_iter().take(1));
    h.run();
    h.get_by_label("3 of 7 log records (newest first; 0 dropped)");
    // By process, host and text (the filter of `shoal log`).
    h.state_mut().state.logs.min_level = None;
    h.state_mut().state.logs.process = Some("NAVIG".into());
    h.run();
    h.get_by_label("4 of 7 log records (newest first; 0 dropped)");
    h.state_mut().state.logs.host = Some("lab-pc".into());
    h.run();
    h.get_by_label("0 of 7 log records (newest first; 0 dropped)");
    h.state_mut().state.logs = shoal::logging::LogFilter { text: Some("DISK".into()), ..Default::default() };
    h.run();
    h.get_by_label("1 of 7 log records (newest first; 0 dropped)");
    assert_eq!(h.state().logs().filter(|r| r.level == LogLevel::Fatal).count(), 1);
}

/// No figure where there is no measurement: a topic only eCAL subscribes to shows eCAL's announced mean, said as
/// eCAL's, in the Overview and the Topic view alike, and no latency plots (no axes to read an invented latency from).
#[test]
fn an_ecal_only_topic_shows_ecals_mean_as_such_and_no_latency_plots() {
    let mut h = harness(app_after(8));
    h.run();
    h.get_by_label("eCAL mean 111.0 µs"); // /status, read by the eCAL recorder only
    h.state_mut().select_topic(Some("/status"));
    h.state_mut().state.tab = Tab::Topic;
    h.run();
    h.get_by_label_contains(
        "Its eCAL subscribers announce rate, drops and a mean latency since they started: 111.0 µs",
    );
    h.get_by_label_contains("No latency measured in this window");
    assert!(h.query_by_label("Latency histogram of the last window (log µs)").is_none(), "no empty plots");
    // A topic shoal measures keeps its plots.
    h.state_mut().select_topic(Some("shoal_demo/0"));
    h.run();
    h.get_by_label("Latency histogram of the last window (log µs)");
}

/// The Events tab links a process's problems to its logs: the "logs" button of the eCAL recorder's expiry opens the
/// Logs tab filtered to that process (by unit and host).
#[test]
fn an_event_links_to_the_logs_of_its_process() {
    use shoal_monitor::source::ScriptedLogs;
    let logs = ScriptedLogs::default();
    logs.0.lock().unwrap().extend(shoal_monitor::fixture::fixture_logs(1_700_000_000_000_000));
    let mut app = app_after(65).with_logs(Box::new(logs));
    app.state.tab = Tab::Events;
    let mut h = harness(app);
    h.run();
    h.get_all_by_label("expired").next().expect("kind button").click();
    h.run();
    h.get_by_label("sub ecal_recorder@lab-pc:2003: no registration for 11.3 s");
    h.get_by_label("logs").click();
    h.run();
    assert_eq!(h.state().state.tab, Tab::Logs);
    assert_eq!(h.state().state.logs.process.as_deref(), Some("ecal_recorder"));
    h.get_by_label("2 of 6 log records (newest first; 0 dropped)");
    assert_eq!(h.get_all_by_label("ecal_recorder:2003").count(), 2);
}

/// Figures of a stale registration are shown as such: the stale eCAL logger's rate and bandwidth on /status carry
/// their age ("… s ago", greyed), a live topic's do not.
#[test]
fn a_stale_topics_figures_say_how_old_they_are() {
    let mut h = harness(app_after(8));
    h.run();
    let view = h.state().displayed().expect("view");
    let status = view.topic("/status").expect("/status");
    let age = status.stale_figures_s.expect("the logger's registration is late");
    assert!(age > shoal_monitor::model::STALE_AFTER.as_secs_f64(), "{age}");
    assert!(view.topic("shoal_demo/0").expect("demo").stale_figures_s.is_none());
    let rate = label_containing(&h, &format!("Hz · {age:.0} s ago"));
    assert!(rate.starts_with("1"), "/status's last announced rate, 1 Hz: {rate}");
    assert!(h.query_all_by_label_contains(" s ago").count() >= 2, "rate and bandwidth");
}

/// The graph's groups are by first name segment; names of one segment, and odd names, are not grouped.
#[test]
fn topics_group_by_the_first_segment_of_their_names() {
    use shoal_monitor::app::name_prefix;
    assert_eq!(name_prefix("/robot1/imu/raw"), Some("/robot1"));
    assert_eq!(name_prefix("demo.A"), Some("demo"));
    assert_eq!(name_prefix("shoal_demo/0"), Some("shoal_demo"));
    for name in ["/camera", "camera", "", "/", "//x", "./x", ".x"] {
        assert_eq!(name_prefix(name), None, "{name:?}");
    }
}

/// In a narrow window every node of the graph is inside it (a long line of text above the canvas once widened it
/// and pushed the right column out).
#[test]
fn in_a_narrow_window_the_graph_keeps_its_nodes_on_screen() {
    let mut app = app_after(3);
    app.state.tab = Tab::Graph;
    let mut h = Harness::builder()
        .with_size(egui::vec2(1024.0, 700.0))
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.run();
    let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1024.0, 700.0));
    let nodes: Vec<egui::Rect> = h.get_all_by_label_contains("@").map(|n| n.rect()).collect();
    assert!(nodes.len() >= 10, "{} process nodes", nodes.len());
    for r in nodes {
        assert!(screen.contains_rect(r), "{r:?} off screen");
    }
}

/// The scale network where the first 100 fleet topics are renamed `orphan_NNNN` (one name segment: not grouped) and
/// lose their publishers, and the last 100 are renamed `/spare/sensor_NNNN`, of which `/spare/sensor_0999` loses its
/// publisher: 101 topics with a problem ("no publisher"), a healthy group `/fleet` and a group `/spare` with a
/// problem.
struct Orphans(Fixture);

impl shoal_monitor::source::SnapshotSource for Orphans {
    fn snapshot(&mut self) -> shoal::monitor::Snapshot {
        use shoal::monitor::TopicDirection;
        let mut s = self.0.next_snapshot();
        let index = |name: &str| name.strip_prefix("/fleet/sensor_").and_then(|n| n.parse::<u32>().ok());
        s.topics.retain(|t| {
            t.direction != TopicDirection::Publisher || !index(&t.topic_name).is_some_and(|i| i < 100 || i == 999)
        });
        for t in &mut s.topics {
            match index(&t.topic_name) {
                Some(i) if i < 100 => t.topic_name = format!("orphan_{i:04}"),
                Some(i) if i >= 900 => t.topic_name = format!("/spare/sensor_{i:04}"),
                _ => {}
            }
        }
        s
    }
}

/// Problems are not hidden in a group: a group says how many of its topics have one, takes the worst colour and
/// comes first with the topics that have problems, and they come first when it expands. A healthy group below
/// them, expanded far down the column, is shown where it is, not at the top of the column.
#[test]
fn at_scale_the_graph_puts_problems_first_and_counts_them_in_groups() {
    let mut app =
        MonitorApp::manual(Box::new(Orphans(Fixture::with_scale(1000, 200))), Box::new(FixtureMessages::default()));
    app.refresh_now();
    app.refresh_now();
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    let spare = "+ /spare… 100 topics · 100 live · 1 with problems";
    h.get_by_label(spare);
    h.get_by_label("orphan_0000");
    assert!(h.query_by_label_contains("/fleet…").is_none(), "the healthy group comes after 100 topics with problems");
    h.get_by_label(spare).click();
    h.run();
    let first = h.get_by_label("/spare/sensor_0999").rect().top();
    assert!(first < h.get_by_label("/spare/sensor_0900").rect().top(), "the topic with a problem first");
    h.get_by_label("- /spare… 100 topics · 100 live · 1 with problems").click();
    h.run();
    // Scrolled down to the healthy group and expanded, it stays in sight.
    let group = "+ /fleet… 800 topics · 800 live";
    let canvas = h.get_by_label("orphan_0000").rect().center();
    let mut scrolls = 0;
    while h.query_by_label(group).is_none() {
        assert!(scrolls < 50, "the group was not reached by scrolling");
        h.event(egui::Event::PointerMoved(canvas));
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -100.0),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::NONE,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run();
        scrolls += 1;
    }
    h.get_by_label(group).click();
    h.run();
    h.get_by_label("- /fleet… 800 topics · 800 live");
    h.get_by_label("/fleet/sensor_0100");
}

#[test]
fn the_graph_focuses_on_the_selected_service() {
    let mut app = app_after(5);
    app.state.tab = Tab::Graph;
    app.select_service(Some("calibration"));
    let mut h = harness(app);
    h.run();
    h.get_by_label("Focus on calibration (service)").click();
    h.run();
    h.get_by_label("calibration (service)");
    // Its server (right) and its two clients (left), nothing else.
    h.get_by_label("imu_driver@lab-pc:1004");
    h.get_by_label("navigation@robot-2:3001");
    h.get_by_label("demo_sub_a@lab-pc:1002");
    assert!(h.query_by_label("/odom").is_none());
    assert!(h.query_by_label("map_server (service)").is_none());
    h.get_by_label("Show all").click();
    h.run();
    h.get_by_label("/odom");
}

/// The small network with 60 more services, `svc/calib_NN`, each a copy of the calibration server.
struct ManyServices(Fixture);

impl shoal_monitor::source::SnapshotSource for ManyServices {
    fn snapshot(&mut self) -> shoal::monitor::Snapshot {
        let mut s = self.0.next_snapshot();
        let server = s.services.iter().find(|e| e.service_name == "calibration").cloned().expect("calibration");
        for i in 0..60u64 {
            let mut e = server.clone();
            e.service_name = format!("svc/calib_{i:02}");
            e.entity_id = 0x7000 + i;
            s.services.push(e);
        }
        s
    }
}

#[test]
fn many_services_are_grouped_like_topics() {
    let mut app = MonitorApp::manual(Box::new(ManyServices(Fixture::new())), Box::new(FixtureMessages::default()));
    for _ in 0..3 {
        app.refresh_now();
    }
    app.state.tab = Tab::Graph;
    let mut h = harness(app);
    h.run();
    let group = h.get_by_label_contains("+ svc… 60 services");
    group.click();
    h.run();
    h.get_by_label("svc/calib_00 (service)");
    h.get_by_label("calibration (service)");
}

/// Clicks the first node labelled `text` (a label's text may be in two nodes) and runs the frames after.
fn click_label(h: &mut Harness<'_, MonitorApp>, text: &str) {
    h.get_all_by_label(text).next().unwrap_or_else(|| panic!("no {text:?}")).click();
    h.run();
}

/// The fixture's `/imu` accel.x of message `n`.
fn imu_x(n: u32) -> f64 {
    (f64::from(n) * 0.1).sin()
}

fn signal_labels(h: &Harness<'_, MonitorApp>) -> Vec<String> {
    h.state().signals().list().iter().map(|s| s.label.clone()).collect()
}

fn points(h: &Harness<'_, MonitorApp>) -> Vec<usize> {
    h.state().signals().list().iter().map(|s| s.points().len()).collect()
}

/// A click on a number of the decoded message plots it (issue 26, feature 7): the Plot tab lists it with its
/// latest value and the points taken since, one per message; a click again in the Inspector stops it.
#[test]
fn picking_a_field_in_the_inspector_plots_it() {
    // Shown: message 3, accel.x = sin(0.3).
    let mut h = inspecting("/imu", 3, 2);
    h.get_by_label_contains("clock 3 ·");
    click_label(&mut h, &format!("x: {}", imu_x(3)));
    assert_eq!(signal_labels(&h), ["/imu:accel.x"]);
    // Picking polls once (message 4), then one message per refresh: 5 to 9.
    for _ in 0..5 {
        h.state_mut().refresh_now();
    }
    h.state_mut().state.tab = Tab::Plot;
    h.run();
    assert!(h.query_all_by_label("/imu:accel.x").next().is_some());
    h.get_by_label(&format!("latest {:.4} · 6 points", imu_x(9)));
    assert_eq!(points(&h), [6]);
    let last = h.state().signals().list()[0].last.expect("a value");
    assert_eq!(last.1, imu_x(9));
    // Clicked again (the Inspector shows message 9 now): no longer plotted.
    h.state_mut().state.tab = Tab::Inspector;
    h.run();
    click_label(&mut h, &format!("x: {}", imu_x(9)));
    assert!(h.state().signals().is_empty());
    h.state_mut().state.tab = Tab::Plot;
    h.run();
    h.get_by_label_contains("No field plotted");
}

/// Fields of two topics are plotted at once and keep being taken while another tab is shown; Remove and Clear all
/// stop them, and their topics are no longer followed.
#[test]
fn fields_of_several_topics_keep_being_taken_on_other_tabs_and_can_be_removed() {
    let mut h = inspecting("/imu", 3, 1); // message 2 shown
    click_label(&mut h, &format!("x: {}", imu_x(2)));
    h.state_mut().select_topic(Some("/odom"));
    h.run(); // the Inspector follows /odom now: message 4 (the pick took message 3)
    let a = |n: u32| f64::from(n) * std::f64::consts::TAU / 40.0;
    h.get_by_label_contains("type pb.Odometry (proto)");
    click_label(&mut h, &format!("x: {}", 2.0 * a(4).cos()));
    // That pick polled: message 5 shown.
    click_label(&mut h, &format!("[2]: {}", 3.0 + a(5).cos()));
    assert_eq!(signal_labels(&h), ["/imu:accel.x", "/odom:pose.x", "/odom:ranges[2]"]);
    h.state_mut().state.tab = Tab::Overview;
    h.run();
    let before = points(&h);
    for _ in 0..10 {
        h.state_mut().refresh_now();
    }
    h.run();
    let after = points(&h);
    assert_eq!(after, before.iter().map(|n| n + 10).collect::<Vec<_>>(), "taken on the Overview too");
    h.state_mut().state.tab = Tab::Plot;
    h.run();
    for l in ["/imu:accel.x", "/odom:pose.x", "/odom:ranges[2]"] {
        assert!(h.query_all_by_label(l).next().is_some(), "{l} is listed");
    }
    h.get_by_label("3 of 16 signals");
    click_label(&mut h, "Remove");
    assert_eq!(signal_labels(&h), ["/odom:pose.x", "/odom:ranges[2]"]);
    assert_eq!(h.state().signals().topics(), [std::sync::Arc::<str>::from("/odom")]);
    assert!(h.query_all_by_label("/imu:accel.x").next().is_none());
    click_label(&mut h, "Clear all");
    assert!(h.state().signals().is_empty());
    h.get_by_label_contains("No field plotted");
}

/// At most 16 signals: a 17th pick is refused with a message, nothing is dropped.
#[test]
fn a_pick_beyond_the_signal_bound_is_refused_with_a_message() {
    use shoal_monitor::signals::{FieldPath, MAX_SIGNALS};
    let mut h = inspecting("/imu", 3, 2);
    for i in 0..MAX_SIGNALS {
        h.state_mut().plot_field("/fleet/x", FieldPath::parse(&format!("v[{i}]")).expect("path")).expect("fits");
    }
    click_label(&mut h, &format!("x: {}", imu_x(3)));
    assert_eq!(h.state().signals().list().len(), MAX_SIGNALS);
    h.get_by_label("Not plotted: at most 16 signals are plotted: remove one first.");
}

/// A signal whose topic has no publisher any more is shown as such, greyed, with its last value's age.
#[test]
fn a_signal_whose_topic_lost_its_publisher_is_shown_stale() {
    let mut h = inspecting("/cmd_vel", 40, 1); // teleop publishes /cmd_vel in steps 30..60; message 2 shown
    click_label(&mut h, &format!("linear_x: {}", 0.5 + 0.1 * (2.0f64 * 0.3).sin()));
    assert_eq!(signal_labels(&h), ["/cmd_vel:linear_x"]);
    h.state_mut().state.tab = Tab::Plot;
    h.run();
    h.get_by_label_contains("latest ");
    assert!(h.query_by_label_contains("no publisher now").is_none());
    for _ in 0..25 {
        h.state_mut().refresh_now(); // step 66: teleop has ended
    }
    h.run();
    h.get_by_label_contains("no publisher now · last value ");
    assert!(h.query_by_label_contains("latest ").is_none());
}

/// The fixture's messages with every other one cut short (it does not decode), and 7 lost before the monitor took
/// them.
#[derive(Default)]
struct Lossy(FixtureMessages);

impl shoal_monitor::source::MessageSource for Lossy {
    fn follow(&mut self, topics: &[std::sync::Arc<str>]) {
        self.0.follow(topics);
    }

    fn poll(&mut self, out: &mut Vec<shoal_monitor::source::Message>) {
        let from = out.len();
        self.0.poll(out);
        for m in &mut out[from..] {
            if m.clock % 2 == 1 {
                m.payload = m.payload[..m.payload.len() - 3].into();
            }
        }
    }

    fn lost(&self, _topic: &str) -> u64 {
        7
    }
}

/// Messages that do not decode, that lack the field and that were lost are counted and shown with the signal.
#[test]
fn a_signal_shows_what_was_not_plotted() {
    use shoal_monitor::signals::FieldPath;
    let mut app = MonitorApp::manual(Box::new(Fixture::new()), Box::new(Lossy::default()));
    app.plot_field("/imu", FieldPath::parse("accel.x").expect("path")).expect("fits");
    app.plot_field("/imu", FieldPath::parse("accel.w").expect("path")).expect("fits");
    for _ in 0..4 {
        app.refresh_now(); // messages 1 to 4: 1 and 3 cut short
    }
    app.state.tab = Tab::Plot;
    let mut h = harness(app);
    h.run();
    h.get_by_label(&format!(
        "latest {:.4} · 2 points · 2 not decoded · 7 of the topic lost before the monitor took them",
        imu_x(4)
    ));
    h.get_by_label(
        "no value yet · 0 points · 2 not decoded · 2 without the field · 7 of the topic lost before the monitor took them",
    );
}
