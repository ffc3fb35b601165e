//! `shoal-monitor`: the window, or `--headless` JSON lines.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages, fixture_logs};
use shoal_monitor::headless;
use shoal_monitor::saved::SavedSnapshot;
use shoal_monitor::signals::FieldPath;
use shoal_monitor::source::{MessageSource, NodeMessages, NodeSnapshots, ReceivedLogs, ScriptedLogs, SnapshotSource};

/// The shoal monitor: processes, topics and services of this host (and the network in network mode), shoal's and
/// eCAL's, with rate, drops and latency, and call counts and rates.
#[derive(Debug, Parser)]
#[command(name = "shoal-monitor", version)]
struct Args {
    /// No window: print what it would show every refresh, then exit after --seconds.
    #[arg(long)]
    headless: bool,
    /// With --headless: one JSON object a line.
    #[arg(long)]
    json: bool,
    /// With --headless: run this long.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Time between snapshots, ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Show a snapshot saved with Export… (frozen, not live: no node is started) instead of a live node; with
    /// --headless, print it once.
    #[arg(long, value_name = "FILE")]
    open: Option<std::path::PathBuf>,
    /// Show the scripted network (tests, screenshots) instead of a live node.
    #[arg(long)]
    fixture: bool,
    /// With --fixture: add generated topics and processes, `TOPICS,PROCESSES` (scale measurement: 1000,200).
    #[arg(long, value_parser = parse_pair)]
    fixture_scale: Option<(usize, usize)>,
    /// With --fixture: take this many snapshots at start (history for the plots).
    #[arg(long, default_value_t = 0)]
    prefill: u32,
    /// The tab to open: overview, topic, inspector, plot, services, graph, events, logs.
    #[arg(long, default_value = "overview")]
    tab: String,
    /// The topic to select.
    #[arg(long)]
    select: Option<String>,
    /// Plot this numeric field (`TOPIC:PATH`, e.g. `/odom:pose.x` or `/scan:ranges[3]`) from the start, as a click
    /// on it in the Inspector does; repeat for more (at most 16).
    #[arg(long = "plot", value_name = "TOPIC:PATH", value_parser = parse_field)]
    plot: Vec<(String, FieldPath)>,
    /// The service to select (the Services tab then shows its servers and clients only).
    #[arg(long)]
    select_service: Option<String>,
    /// The Topic view's plot window, seconds (30, 60 or 300).
    #[arg(long, default_value_t = 60.0)]
    window_s: f64,
    /// Window size, `WIDTHxHEIGHT`.
    #[arg(long, default_value = "1280x800", value_parser = parse_size)]
    size: (f32, f32),
    /// With --fixture: hold the network still after the prefill (every later snapshot is the last one again, only
    /// its time advances): the idle measurement.
    #[arg(long)]
    fixture_still: bool,
    /// Repaint continuously for --bench-seconds, then print one line of frame times to stderr and exit (scale
    /// measurement).
    #[arg(long)]
    bench: bool,
    /// With --bench: measure this long, after a 2 s warm-up.
    #[arg(long, default_value_t = 15)]
    bench_seconds: u64,
    /// With --bench: draw only one label instead of the monitor (the cost of an almost empty frame: clearing,
    /// presenting, the event loop), the baseline the views are compared with.
    #[arg(long)]
    bench_blank: bool,
}

fn parse_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or("expected TOPICS,PROCESSES")?;
    Ok((a.trim().parse().map_err(|e| format!("{e}"))?, b.trim().parse().map_err(|e| format!("{e}"))?))
}

fn parse_field(s: &str) -> Result<(String, FieldPath), String> {
    let (topic, path) = s.rsplit_once(':').ok_or("expected TOPIC:PATH")?;
    if topic.is_empty() {
        return Err("expected TOPIC:PATH: the topic is empty".into());
    }
    Ok((topic.to_owned(), FieldPath::parse(path)?))
}

fn parse_size(s: &str) -> Result<(f32, f32), String> {
    let (a, b) = s.split_once('x').ok_or("expected WIDTHxHEIGHT")?;
    Ok((a.parse().map_err(|e| format!("{e}"))?, b.parse().map_err(|e| format!("{e}"))?))
}

/// Errors are printed as one message with their causes (never a backtrace, whatever `RUST_BACKTRACE` says).
fn main() {
    if let Err(e) = run() {
        eprintln!("shoal-monitor: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,winit=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let interval = Duration::from_millis(args.interval_ms.max(50));
    if (args.fixture_still || args.fixture_scale.is_some()) && !args.fixture {
        bail!("--fixture-still and --fixture-scale change the scripted network: add --fixture");
    }
    if args.bench_blank && !args.bench {
        bail!("--bench-blank is the baseline of --bench: add --bench");
    }
    let Some(tab) = Tab::from_name(&args.tab) else {
        bail!("unknown tab `{}` (overview, topic, inspector, plot, services, graph, events, logs)", args.tab);
    };
    if let Some(path) = &args.open {
        if args.fixture {
            bail!("--open shows a saved snapshot, --fixture the scripted network: give one of them");
        }
        let saved = SavedSnapshot::load(path)?;
        if args.headless {
            eprintln!("shoal-monitor: {}", saved.banner(path));
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            return headless::print_saved(&saved, args.json, &mut out).context("writing to stdout");
        }
        let mut app = MonitorApp::opened(&saved, path);
        app.state.tab = tab;
        app.select_topic(args.select.as_deref());
        app.select_service(args.select_service.as_deref());
        app.state.window_s = args.window_s;
        return run_window(app, &args);
    }
    let (mut snapshots, messages): (Box<dyn SnapshotSource + Send>, Box<dyn MessageSource>) = if args.fixture {
        let mut f = match args.fixture_scale {
            Some((t, p)) => Fixture::with_scale(t, p),
            None => Fixture::new(),
        };
        if args.fixture_still {
            // Live during the prefill (history for the plots), still from there on.
            f.hold_still_after(u64::from(args.prefill.max(1)));
        }
        (Box::new(f), Box::new(FixtureMessages::default()))
    } else {
        let node =
            shoal::Node::init("shoal_monitor").context("starting the shoal node (check ecal.ini and /dev/shm)")?;
        (Box::new(NodeSnapshots(node.clone())), Box::new(NodeMessages::new(node)))
    };
    if args.headless {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        return headless::run(&mut *snapshots, Duration::from_secs(args.seconds), interval, args.json, &mut out)
            .context("writing to stdout");
    }
    check_display()?;
    let mut app = MonitorApp::new(snapshots, messages, interval);
    if args.fixture {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(0));
        let logs = ScriptedLogs::default();
        logs.0.lock().unwrap_or_else(|e| e.into_inner()).extend(fixture_logs(now_us - 3_000_000));
        app = app.with_logs(Box::new(logs));
    } else {
        // Every process's log messages, from eCAL's log port (the configuration's port and addresses).
        match shoal::Config::load().map_err(anyhow::Error::from).and_then(|c| Ok(ReceivedLogs::start(&c)?)) {
            Ok(logs) => app = app.with_logs(Box::new(logs)),
            Err(e) => tracing::warn!("no Logs view: cannot receive log messages: {e:#}"),
        }
    }
    for (topic, path) in &args.plot {
        app.plot_field(topic, path.clone()).map_err(|e| anyhow::anyhow!("--plot {topic}:{path}: {e}"))?;
    }
    for _ in 0..args.prefill {
        app.refresh_now();
    }
    app.state.tab = tab;
    app.select_topic(args.select.as_deref());
    app.select_service(args.select_service.as_deref());
    app.state.window_s = args.window_s;
    run_window(app, &args)
}

/// Fails with what to do instead when there is no display to open a window on.
fn check_display() -> Result<()> {
    let has_display = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    if !has_display("DISPLAY") && !has_display("WAYLAND_DISPLAY") {
        bail!(
            "no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset): use `shoal-monitor --headless \
             --json` for JSON lines on stdout, or run under a display (`xvfb-run -a shoal-monitor` for a virtual one)"
        );
    }
    Ok(())
}

/// Opens the window on `app` and runs it until it closes.
fn run_window(mut app: MonitorApp, args: &Args) -> Result<()> {
    check_display()?;
    let options = eframe::NativeOptions {
        renderer: eframe::Renderer::Glow,
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([args.size.0, args.size.1])
            .with_title("shoal monitor"),
        // Dithering hides banding in gradients; the monitor draws flat colours only, and under software GL the
        // dithering shader costs on every pixel.
        dithering: false,
        ..Default::default()
    };
    let bench =
        args.bench.then(|| Bench::new(Duration::from_secs(args.bench_seconds.max(1)), args.bench_blank, &args.tab));
    eframe::run_native(
        "shoal monitor",
        options,
        Box::new(move |cc| {
            let ctx = cc.egui_ctx.clone();
            app.start_refresh_thread(move || ctx.request_repaint())?;
            Ok(Box::new(Runner { app, bench }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}

/// The frame-time measurement of `--bench`: the UI repaints continuously; each frame's wall time is the time from
/// the start of one frame's UI pass to the start of the next, which covers the UI, tessellation, painting and the
/// buffer swap (where llvmpipe rasterises and the image goes to the X server).
struct Bench {
    label: String,
    warm_up_until: Instant,
    measure: Duration,
    blank: bool,
    /// The line is printed (the window closes after this frame).
    done: bool,
    started: Option<(Instant, std::collections::BTreeMap<String, f64>)>,
    last_frame: Option<(u64, Instant)>,
    /// Wall time per frame, ms.
    frame_ms: Vec<f64>,
    /// eframe's `cpu_usage` per frame (UI + tessellation + issuing the GL calls, swap excluded), ms.
    ui_ms: Vec<f64>,
}

impl Bench {
    fn new(measure: Duration, blank: bool, tab: &str) -> Bench {
        Bench {
            label: if blank { "blank".into() } else { tab.to_lowercase() },
            warm_up_until: Instant::now() + Duration::from_secs(2),
            measure,
            blank,
            done: false,
            started: None,
            last_frame: None,
            frame_ms: Vec::new(),
            ui_ms: Vec::new(),
        }
    }

    /// Called at the start of every UI pass; true once the measurement is over (the line is printed).
    fn frame(&mut self, ctx: &egui::Context, frame: &eframe::Frame) -> bool {
        let now = Instant::now();
        let nr = ctx.cumulative_frame_nr();
        if self.last_frame.is_some_and(|(n, _)| n == nr) {
            return false; // a second pass of the same frame
        }
        if now < self.warm_up_until {
            self.last_frame = Some((nr, now));
            return false;
        }
        if self.started.is_none()
            && let Some(gl) = frame.gl()
        {
            use eframe::glow::HasContext as _;
            // SAFETY: eframe keeps its GL context current on this thread while it runs the UI pass, and
            // RENDERER is a valid name for glGetString.
            let renderer = unsafe { gl.get_parameter_string(eframe::glow::RENDERER) };
            eprintln!("bench: renderer {renderer}");
        }
        let started = self.started.get_or_insert_with(|| (now, thread_cpu_s())).0;
        if let Some((_, t)) = self.last_frame {
            self.frame_ms.push(now.duration_since(t).as_secs_f64() * 1000.0);
            if let Some(c) = frame.info().cpu_usage {
                self.ui_ms.push(f64::from(c) * 1000.0);
            }
        }
        self.last_frame = Some((nr, now));
        if now.duration_since(started) < self.measure {
            return false;
        }
        let wall = now.duration_since(started).as_secs_f64();
        let n = self.frame_ms.len().max(1) as f64;
        let before = self.started.as_ref().map(|s| &s.1);
        let by_thread: Vec<(String, f64)> = thread_cpu_s()
            .into_iter()
            .map(|(name, s)| {
                let d = s - before.and_then(|b| b.get(&name)).copied().unwrap_or(0.0);
                (name, d)
            })
            .filter(|(_, d)| *d > 0.0)
            .collect();
        let cpu: f64 = by_thread.iter().map(|(_, d)| d).sum();
        let threads: Vec<String> = by_thread.iter().map(|(name, d)| format!("{name} {:.2}", d * 1000.0 / n)).collect();
        let pct = |v: &mut Vec<f64>, q: f64| {
            v.sort_by(f64::total_cmp);
            v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
        };
        eprintln!(
            "bench: {} frames {} ({:.1}/s) · frame ms p50 {:.2} p95 {:.2} max {:.2} · ui+tessellation ms p50 {:.2} p95 {:.2} \
             · process CPU {:.2} ms/frame ({:.0} % of one core; by thread, ms/frame: {})",
            self.label,
            self.frame_ms.len(),
            n / wall,
            pct(&mut self.frame_ms, 0.5),
            pct(&mut self.frame_ms, 0.95),
            pct(&mut self.frame_ms, 1.0),
            pct(&mut self.ui_ms, 0.5),
            pct(&mut self.ui_ms, 0.95),
            cpu * 1000.0 / n,
            cpu * 100.0 / wall,
            threads.join(", "),
        );
        true
    }
}

/// CPU time of this process so far, seconds, by thread name (the UI thread is `shoal-monitor`; llvmpipe's
/// rasteriser threads are `llvmpipe-N`): the time on a CPU the scheduler reports in `/proc/self/task/*/schedstat`.
fn thread_cpu_s() -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for t in tasks.flatten() {
        let ns = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()));
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        // llvmpipe-0, llvmpipe-1, … together.
        let name = name.trim().trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches('-').to_owned();
        *out.entry(name).or_insert(0.0) += ns.unwrap_or(0) as f64 / 1e9;
    }
    out
}

struct Runner {
    app: MonitorApp,
    bench: Option<Bench>,
}

impl eframe::App for Runner {
    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        shoal_monitor::app::clear_color(visuals)
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        let Some(b) = &mut self.bench else {
            self.app.ui(ui);
            return;
        };
        if !b.done && b.frame(ui.ctx(), frame) {
            b.done = true;
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        }
        if b.blank {
            // Like the monitor's panels: unfilled, over the clear colour.
            let frame = egui::Frame::central_panel(ui.style()).fill(egui::Color32::TRANSPARENT);
            egui::CentralPanel::default().frame(frame).show(ui, |ui| ui.label("bench baseline: an almost empty frame"));
        } else {
            self.app.ui(ui);
        }
        ui.ctx().request_repaint();
    }
}
