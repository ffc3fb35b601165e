//! What each view costs to rasterise at scale: the Overview, Topic, Plot (five fields of two topics), Services, Graph
//! and Events views of the scale network (1000 generated topics over 200 processes besides the scripted ones, 60 s of
//! history) at 1280x800, tessellated
//! as the window would be. Under software GL (llvmpipe) a frame's time is mostly spent rasterising, and that cost
//! follows the pixels the triangles cover (every one blended) and their count; both are held to a budget here,
//! deterministically, so a change that fills the panels again or strokes every table cell shows as a failure and
//! not only as a slower `scripts/monitor-scale`.

use egui::epaint::{Primitive, WHITE_UV};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use egui_kittest::Harness;
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages, imu_payload, imu_type_info};
use shoal_monitor::signals::{FieldPath, MAX_POINTS, MAX_SIGNALS};
use shoal_monitor::source::{Message, MessageSource};

const W: f32 = 1280.0;
const H: f32 = 800.0;
/// Triangles a view may tessellate to.
const MAX_TRIANGLES: usize = 8000;
/// Pixels its triangles may cover, in screens (1280x800); the panels alone used to cover one.
const MAX_SCREENS: f64 = 0.8;

struct Cost {
    triangles: usize,
    /// Of them, solid shapes (the others are glyphs).
    solid_triangles: usize,
    screens: f64,
}

fn cost(h: &Harness<'_, MonitorApp>) -> Cost {
    let out = h.output();
    // The harness paints a panel behind the app (the window does not: it clears to the panels' colour); leave it
    // out.
    let mut shapes = out.shapes.clone();
    let first_is_harness_frame = shapes.first().is_some_and(|s| match &s.shape {
        egui::Shape::Rect(r) => r.rect.area() > 0.9 * W * H && !r.fill.is_additive() && r.fill.a() == 255,
        _ => false,
    });
    if first_is_harness_frame {
        shapes.remove(0);
    }
    let prims = h.ctx.tessellate(shapes, out.pixels_per_point);
    let mut c = Cost { triangles: 0, solid_triangles: 0, screens: 0.0 };
    for p in &prims {
        let Primitive::Mesh(m) = &p.primitive else { continue };
        for tri in m.indices.chunks_exact(3) {
            let v = [tri[0], tri[1], tri[2]].map(|i| m.vertices[i as usize]);
            let [a, b, d] = v.map(|v| v.pos);
            let bounds = egui::Rect::from_points(&[a, b, d]);
            let visible = bounds.intersect(p.clip_rect);
            c.triangles += 1;
            if v[0].uv == WHITE_UV {
                c.solid_triangles += 1;
            }
            if !visible.is_positive() || !bounds.is_positive() {
                continue;
            }
            let area = ((b.x - a.x) * (d.y - a.y) - (d.x - a.x) * (b.y - a.y)).abs() / 2.0;
            // Clipped triangles: the visible share of their bounds (exact for the rectangles that matter).
            c.screens += f64::from(area * (visible.area() / bounds.area()).min(1.0)) / f64::from(W * H);
        }
    }
    c
}

#[test]
fn every_view_at_scale_stays_within_its_rasterising_budget() {
    let mut app = MonitorApp::manual(Box::new(Fixture::with_scale(1000, 200)), Box::new(FixtureMessages::default()));
    for (topic, path) in
        [("/imu", "accel.x"), ("/imu", "accel.y"), ("/odom", "pose.x"), ("/odom", "pose.y"), ("/odom", "ranges[0]")]
    {
        app.plot_field(topic, FieldPath::parse(path).expect("path")).expect("fits");
    }
    for _ in 0..60 {
        app.refresh_now();
    }
    app.select_topic(Some("/fleet/sensor_0001"));
    let mut h =
        Harness::builder().with_size(egui::vec2(W, H)).build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    let mut report = Vec::new();
    for tab in [Tab::Overview, Tab::Topic, Tab::Plot, Tab::Services, Tab::Graph, Tab::Events] {
        h.state_mut().state.tab = tab;
        h.run();
        let c = cost(&h);
        report.push(format!(
            "{}: {} triangles ({} solid), {:.2} screens",
            tab.title(),
            c.triangles,
            c.solid_triangles,
            c.screens
        ));
        assert!(c.triangles > 500, "{}: only {} triangles: nothing drawn?", tab.title(), c.triangles);
        assert!(
            c.triangles <= MAX_TRIANGLES && c.screens <= MAX_SCREENS,
            "{} over budget ({MAX_TRIANGLES} triangles, {MAX_SCREENS} screens): {}",
            tab.title(),
            report.last().map_or("", String::as_str)
        );
    }
    println!("{}", report.join("\n"));
}

/// The Graph at 1,000 topics in each of its states — the topics grouped, the 1,000-topic group expanded, scrolled
/// to its middle, zoomed out as far as it goes, focused on one topic — within the same budget, and a frame of it
/// (the UI pass and tessellation) costs no more CPU than one of the Overview, give or take.
#[test]
fn the_graph_at_1000_topics_stays_within_the_budget_in_every_state() {
    use egui_kittest::kittest::Queryable;
    let mut app = MonitorApp::manual(Box::new(Fixture::with_scale(1000, 200)), Box::new(FixtureMessages::default()));
    for _ in 0..60 {
        app.refresh_now();
    }
    app.select_topic(Some("/fleet/sensor_0500"));
    let mut h =
        Harness::builder().with_size(egui::vec2(W, H)).build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.state_mut().state.tab = Tab::Overview;
    h.run();
    let overview = frame_time(&mut h);
    h.state_mut().state.tab = Tab::Graph;
    h.run();
    let mut report = vec![format!("Overview: {:.2} ms per frame", overview * 1e3)];
    let mut check = |h: &mut Harness<'_, MonitorApp>, state: &str, min_triangles: usize| {
        let c = cost(h);
        let t = frame_time(h);
        report.push(format!(
            "Graph, {state}: {} triangles ({} solid), {:.2} screens, {:.2} ms per frame",
            c.triangles,
            c.solid_triangles,
            c.screens,
            t * 1e3
        ));
        let line = report.last().cloned().unwrap_or_default();
        assert!(c.triangles >= min_triangles, "nothing drawn? {line}");
        assert!(c.triangles <= MAX_TRIANGLES && c.screens <= MAX_SCREENS, "over budget: {line}");
        assert!(
            t <= 2.0 * overview + 0.002,
            "a frame costs more than the Overview's ({:.2} ms): {line}",
            overview * 1e3
        );
    };
    check(&mut h, "grouped", 500);
    h.get_by_label("+ /fleet… 1000 topics · 1000 live").click();
    h.run();
    h.get_by_label("/fleet/sensor_0000");
    check(&mut h, "group expanded", 500);
    let canvas = h.get_by_label("/fleet/sensor_0000").rect().center();
    for _ in 0..20 {
        h.event(egui::Event::PointerMoved(canvas));
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -800.0),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::NONE,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run();
    }
    assert!(h.query_by_label("/fleet/sensor_0000").is_none(), "scrolled away from the top");
    check(&mut h, "expanded, scrolled to the middle", 500);
    for _ in 0..8 {
        h.get_by_label("Zoom out").click();
        h.run();
    }
    h.get_by_label("10 %");
    check(&mut h, "expanded, zoomed out to 10 %", 500);
    h.get_by_label("Focus on /fleet/sensor_0500").click();
    h.run();
    check(&mut h, "focused on a topic", 100);
    println!("{}", report.join("\n"));
}

/// The median CPU time of a frame (the UI pass and tessellation) over 15 frames, in seconds.
fn frame_time(h: &mut Harness<'_, MonitorApp>) -> f64 {
    let mut times: Vec<f64> = (0..15)
        .map(|_| {
            let t = std::time::Instant::now();
            h.step();
            let out = h.output();
            let _ = h.ctx.tessellate(out.shapes.clone(), out.pixels_per_point);
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// One process publishing and subscribing 2,000 topics, their group expanded and the process in sight: 4,000 edges
/// end at it, and the frame stays within the budget (at most `MAX_EDGES_DRAWN` are drawn).
#[test]
fn the_graph_with_a_process_of_4000_edges_in_sight_stays_within_the_budget() {
    use egui_kittest::kittest::Queryable;
    let mut app = MonitorApp::manual(Box::new(Fixture::with_scale(2000, 1)), Box::new(FixtureMessages::default()));
    app.refresh_now();
    app.refresh_now();
    app.state.tab = Tab::Graph;
    let mut h =
        Harness::builder().with_size(egui::vec2(W, H)).build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.run();
    h.get_by_label_contains("+ /fleet… 2000 topics").click();
    h.run();
    let canvas = h.get_by_label("/fleet/sensor_0000").rect().center();
    let mut scrolls = 0;
    while h.query_all_by_label("node_000@lab-pc:10000").next().is_none() {
        assert!(scrolls < 100, "the process was not reached by scrolling");
        h.event(egui::Event::PointerMoved(canvas));
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -300.0),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::NONE,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run();
        scrolls += 1;
    }
    let c = cost(&h);
    let line = format!("{} triangles ({} solid), {:.2} screens", c.triangles, c.solid_triangles, c.screens);
    println!("Graph, a process with 4000 edges in sight: {line}");
    assert!(c.triangles <= MAX_TRIANGLES && c.screens <= MAX_SCREENS, "over budget: {line}");
}

/// 2024-01-01T00:00:00Z, the fixture's clock (its snapshots are taken one second apart from here).
const FIXTURE_EPOCH_S: u64 = 1_704_067_200;

/// Every followed topic at 1 kHz: each poll (one a refresh) brings one second of `pb.sensors.Imu` messages of each.
#[derive(Default)]
struct KiloHertz {
    topics: Vec<Arc<str>>,
    polls: u64,
}

impl MessageSource for KiloHertz {
    fn follow(&mut self, topics: &[Arc<str>]) {
        self.topics = topics.to_vec();
    }

    fn poll(&mut self, out: &mut Vec<Message>) {
        self.polls += 1;
        let ti = Arc::new(imu_type_info());
        for topic in &self.topics {
            for i in 0..1000u64 {
                let ms = (self.polls - 1) * 1000 + i;
                let t = ms as f64 / 1000.0;
                out.push(Message {
                    topic: topic.clone(),
                    payload: imu_payload(ms, "imu", [t.sin(), (3.0 * t).cos(), 9.81], [t, -t, 0.5]).into(),
                    type_info: ti.clone(),
                    publisher_id: 1,
                    clock: ms,
                    send_time_us: 0,
                    received_at: SystemTime::UNIX_EPOCH + Duration::from_millis(FIXTURE_EPOCH_S * 1000 + ms),
                });
            }
        }
    }
}

/// The Plot tab at its bounds: 16 signals of two topics at 1 kHz, five minutes of them (each signal at about its
/// point bound), drawn over the 5-minute window beside 1,000 topics: within the budget, and a frame costs no more
/// CPU than one of the Overview, give or take.
#[test]
fn the_plot_with_16_signals_at_1_khz_over_5_minutes_stays_within_the_budget() {
    let mut app = MonitorApp::manual(Box::new(Fixture::with_scale(1000, 200)), Box::new(KiloHertz::default()));
    let fields = ["accel.x", "accel.y", "accel.z", "gyro.x", "gyro.y", "gyro.z", "covariance[0]", "stamp_us"];
    for topic in ["/fleet/sensor_0001", "/fleet/sensor_0002"] {
        for f in fields {
            app.plot_field(topic, FieldPath::parse(f).expect("path")).expect("fits");
        }
    }
    assert_eq!(app.signals().list().len(), MAX_SIGNALS);
    for _ in 0..300 {
        app.refresh_now();
    }
    for s in app.signals().list() {
        assert!((MAX_POINTS / 2..=MAX_POINTS).contains(&s.points().len()), "{}: {} points", s.label, s.points().len());
        assert_eq!((s.messages, s.undecodable, s.missing), (300_000, 0, 0), "{}", s.label);
    }
    app.state.window_s = 300.0;
    let mut h =
        Harness::builder().with_size(egui::vec2(W, H)).build_ui_state(|ui, app: &mut MonitorApp| app.ui(ui), app);
    h.state_mut().state.tab = Tab::Overview;
    h.run();
    let overview = frame_time(&mut h);
    h.state_mut().state.tab = Tab::Plot;
    h.run();
    let c = cost(&h);
    let t = frame_time(&mut h);
    let line = format!(
        "Plot, 16 signals at 1 kHz over 5 min: {} triangles ({} solid), {:.2} screens, {:.2} ms per frame (Overview \
         {:.2} ms)",
        c.triangles,
        c.solid_triangles,
        c.screens,
        t * 1e3,
        overview * 1e3
    );
    println!("{line}");
    assert!(c.triangles > 500, "nothing drawn? {line}");
    assert!(c.triangles <= MAX_TRIANGLES && c.screens <= MAX_SCREENS, "over budget: {line}");
    assert!(t <= 2.0 * overview + 0.002, "a frame costs more than the Overview's: {line}");
}
