//! What peers announce, at its worst: names with terminal escape sequences, a newline, a bidirectional override and a
//! zero-width space are shown escaped (`shoal::monitor::printable`) in the window (through egui_kittest's AccessKit
//! tree) and the headless text, and kept as announced in the headless JSON; counters near `u64::MAX` are summed
//! saturating.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use shoal::monitor::Snapshot;
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages};
use shoal_monitor::model::{Interner, build_view};
use shoal_monitor::source::SnapshotSource;

const TOPIC: &str = "/imu\x1b[2J\u{202e}gnp.exe\nfake row";
const TOPIC_SHOWN: &str = r"/imu\x1b[2J\u{202e}gnp.exe\x0afake row";
const HOST_SHOWN: &str = r"robot-2\x1b]0;pwned\x07";
const TYPE_SHOWN: &str = r"pb.sensors.Imu\u{200b}\x9b31m";
const SERVICE: &str = "calibration\x1b[31m\u{202e}\nfake";
const SERVICE_SHOWN: &str = r"calibration\x1b[31m\u{202e}\x0afake";

/// The fixture's network with `/imu`, the host `robot-2` and the Imu type renamed hostilely.
struct Hostile(Fixture);

impl SnapshotSource for Hostile {
    fn snapshot(&mut self) -> Snapshot {
        let mut s = self.0.next_snapshot();
        for p in &mut s.processes {
            if p.host_name == "robot-2" {
                p.host_name = "robot-2\x1b]0;pwned\x07".into();
            }
        }
        for t in &mut s.topics {
            if t.host_name == "robot-2" {
                t.host_name = "robot-2\x1b]0;pwned\x07".into();
            }
            if t.topic_name == "/imu" {
                t.topic_name = TOPIC.into();
            }
            if t.type_info.name == "pb.sensors.Imu" {
                t.type_info.name = "pb.sensors.Imu\u{200b}\u{9b}31m".into();
            }
        }
        for sv in &mut s.services {
            if sv.host_name == "robot-2" {
                sv.host_name = "robot-2\x1b]0;pwned\x07".into();
            }
            if sv.service_name == "calibration" {
                sv.service_name = SERVICE.into();
                for m in &mut sv.methods {
                    m.name.push_str("\x1b[0m");
                    m.request.name.push('\u{202e}');
                }
            }
        }
        s
    }
}

fn raw_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_control() || matches!(c, '\u{200b}' | '\u{202e}'))
}

#[test]
fn names_with_escape_sequences_are_shown_escaped() {
    let mut app = MonitorApp::manual(Box::new(Hostile(Fixture::new())), Box::new(FixtureMessages::default()));
    for _ in 0..5 {
        app.refresh_now();
    }
    let mut h = Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.run();
    // The Overview: the topic table, the process table and the host grid.
    h.get_by_label(TOPIC_SHOWN);
    assert!(h.get_all_by_label(HOST_SHOWN).count() >= 2, "the host grid and the process table");
    h.get_by_label(&format!("{TYPE_SHOWN} (proto)"));
    assert_eq!(h.query_all_by(|n| n.value().or(n.label()).is_some_and(|l| raw_controls(&l))).count(), 0, "Overview");
    // The Topic view, the services, the graph, the events (in them, any name from the views).
    for tab in [Tab::Topic, Tab::Services, Tab::Graph, Tab::Events] {
        h.state_mut().select_topic(Some(TOPIC));
        h.state_mut().state.tab = tab;
        h.run();
        if matches!(tab, Tab::Topic | Tab::Graph) {
            assert!(h.query_all_by_label_contains(TOPIC_SHOWN).count() >= 1, "{tab:?}");
        }
        if matches!(tab, Tab::Services | Tab::Graph) {
            assert!(h.query_all_by_label_contains(SERVICE_SHOWN).count() >= 1, "{tab:?}");
        }
        if tab == Tab::Services {
            h.get_all_by_label(r"get\x1b[0m").next().expect("the method, escaped");
            assert!(h.query_all_by_label_contains(r"navigation@robot-2\x1b]0;pwned\x07").count() >= 1);
        }
        assert_eq!(h.query_all_by(|n| n.value().or(n.label()).is_some_and(|l| raw_controls(&l))).count(), 0, "{tab:?}");
    }

    // Headless: the text escaped, the JSON as announced (its encoder escapes the controls).
    let mut out = Vec::new();
    let mut source = Hostile(Fixture::new());
    shoal_monitor::headless::run(
        &mut source,
        std::time::Duration::from_millis(60),
        std::time::Duration::from_millis(20),
        false,
        &mut out,
    )
    .expect("run");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(text.contains(TOPIC_SHOWN), "{text}");
    assert!(!text.chars().any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'), "{text:?}");
    let mut out = Vec::new();
    let mut source = Hostile(Fixture::new());
    shoal_monitor::headless::run(
        &mut source,
        std::time::Duration::from_millis(60),
        std::time::Duration::from_millis(20),
        true,
        &mut out,
    )
    .expect("run");
    let line = String::from_utf8(out).expect("utf-8");
    let first: serde_json::Value = serde_json::from_str(line.lines().next().expect("a line")).expect("json");
    assert!(first["topics"].as_array().expect("topics").iter().any(|t| t["name"] == TOPIC), "{first}");
    assert!(first["services"].as_array().expect("services").iter().any(|s| s["name"] == SERVICE), "{first}");
}

#[test]
fn counters_from_the_network_saturate() {
    let mut snap = Fixture::new().next_snapshot();
    for p in &mut snap.processes {
        if let Some(s) = &mut p.shoal {
            s.udp_kernel_drops = u64::MAX - 1;
            s.registration_kernel_drops = u64::MAX - 1;
        }
    }
    let mut with_conns = 0;
    for t in &mut snap.topics {
        t.latency.count = u64::MAX - 1;
        if let Some(s) = &mut t.shoal {
            for c in &mut s.connections {
                c.drops = u64::MAX - 1;
                with_conns += 1;
            }
        }
    }
    assert!(with_conns >= 2, "the fixture has shoal connections");
    let view = build_view(&snap, None, &mut Interner::default());
    assert!(view.processes.iter().filter_map(|p| p.kernel_drops).all(|d| d == u64::MAX), "{:?}", view.processes);
    let demo = view.topic("shoal_demo/0").expect("shoal_demo/0");
    assert_eq!(demo.drops, u64::MAX, "two connections of u64::MAX - 1 drops each");
    // A second view over the first (drops rising is computed against it) does not overflow either.
    let again = build_view(&snap, Some(&view), &mut Interner::default());
    assert_eq!(again.topic("shoal_demo/0").expect("topic").drops, u64::MAX);

    // Call counts at the ends of i64: sums saturate, a rate over the full range is a number, a count going down
    // (a restart, or a peer announcing anything) gives no rate.
    let mut snap = Fixture::new().next_snapshot();
    for s in snap.services.iter_mut().filter(|s| s.service_name == "calibration") {
        for m in &mut s.methods {
            m.call_count = i64::MIN;
        }
    }
    let low = build_view(&snap, None, &mut Interner::default());
    assert_eq!(low.service("calibration").expect("calibration").calls, 0, "negative counts count as none");
    snap.taken_at = snap.taken_at.map(|t| t + std::time::Duration::from_secs(1));
    for s in snap.services.iter_mut().filter(|s| s.service_name == "calibration") {
        for m in &mut s.methods {
            m.call_count = i64::MAX;
        }
    }
    let high = build_view(&snap, Some(&low), &mut Interner::default());
    let calib = high.service("calibration").expect("calibration");
    assert_eq!(calib.calls, 2 * i64::MAX as u64, "two methods of i64::MAX calls each, summed: {calib:?}");
    assert!(calib.call_rate_hz.is_some_and(|r| r.is_finite() && r > 0.0), "{calib:?}");
    let down = build_view(&Fixture::new().next_snapshot(), Some(&high), &mut Interner::default());
    assert_eq!(down.service("calibration").expect("calibration").call_rate_hz, None, "the count went down");
}
