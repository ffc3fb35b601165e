//! `shoal-monitor`: the window, or `--headless` JSON lines.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages};
use shoal_monitor::headless;
use shoal_monitor::source::{MessageSource, NodeMessages, NodeSnapshots, SnapshotSource};

/// The shoal monitor: processes and topics of this host (and the network in network mode), shoal's and eCAL's,
/// with rate, drops and latency.
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
    /// Show the scripted network (tests, screenshots) instead of a live node.
    #[arg(long)]
    fixture: bool,
    /// With --fixture: add generated topics and processes, `TOPICS,PROCESSES` (scale measurement: 1000,200).
    #[arg(long, value_parser = parse_pair)]
    fixture_scale: Option<(usize, usize)>,
    /// With --fixture: take this many snapshots at start (history for the plots).
    #[arg(long, default_value_t = 0)]
    prefill: u32,
    /// The tab to open: overview, topic, inspector, graph, events.
    #[arg(long, default_value = "overview")]
    tab: String,
    /// The topic to select.
    #[arg(long)]
    select: Option<String>,
    /// The Topic view's plot window, seconds (30, 60 or 300).
    #[arg(long, default_value_t = 60.0)]
    window_s: f64,
    /// Window size, `WIDTHxHEIGHT`.
    #[arg(long, default_value = "1280x800", value_parser = parse_size)]
    size: (f32, f32),
    /// Repaint continuously and print frame times to stderr every 5 s (scale measurement).
    #[arg(long)]
    bench: bool,
}

fn parse_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or("expected TOPICS,PROCESSES")?;
    Ok((a.trim().parse().map_err(|e| format!("{e}"))?, b.trim().parse().map_err(|e| format!("{e}"))?))
}

fn parse_size(s: &str) -> Result<(f32, f32), String> {
    let (a, b) = s.split_once('x').ok_or("expected WIDTHxHEIGHT")?;
    Ok((a.parse().map_err(|e| format!("{e}"))?, b.parse().map_err(|e| format!("{e}"))?))
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,winit=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let interval = Duration::from_millis(args.interval_ms.max(50));
    let Some(tab) = Tab::from_name(&args.tab) else {
        bail!("unknown tab `{}` (overview, topic, inspector, graph, events)", args.tab);
    };
    let (mut snapshots, messages): (Box<dyn SnapshotSource + Send>, Box<dyn MessageSource>) = if args.fixture {
        let f = match args.fixture_scale {
            Some((t, p)) => Fixture::with_scale(t, p),
            None => Fixture::new(),
        };
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
    let mut app = MonitorApp::new(snapshots, messages, interval);
    for _ in 0..args.prefill {
        app.refresh_now();
    }
    app.state.tab = tab;
    app.select_topic(args.select.as_deref());
    app.state.window_s = args.window_s;
    let options = eframe::NativeOptions {
        renderer: eframe::Renderer::Glow,
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([args.size.0, args.size.1])
            .with_title("shoal monitor"),
        ..Default::default()
    };
    let bench = args.bench;
    eframe::run_native(
        "shoal monitor",
        options,
        Box::new(move |cc| {
            let ctx = cc.egui_ctx.clone();
            app.start_refresh_thread(move || ctx.request_repaint())?;
            Ok(Box::new(Runner { app, bench: bench.then(Bench::default) }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}

#[derive(Default)]
struct Bench {
    since: Option<std::time::Instant>,
    frames: u32,
    cpu: Vec<f32>,
}

struct Runner {
    app: MonitorApp,
    bench: Option<Bench>,
}

impl eframe::App for Runner {
    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        self.app.ui(ui);
        if let Some(b) = &mut self.bench {
            ui.ctx().request_repaint();
            b.frames += 1;
            if let Some(c) = frame.info().cpu_usage {
                b.cpu.push(c * 1000.0);
            }
            let since = *b.since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= Duration::from_secs(5) {
                b.cpu.sort_by(f32::total_cmp);
                let pct = |q: f64| b.cpu.get(((b.cpu.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0.0);
                eprintln!(
                    "bench: {:.1} frames/s, frame cpu ms p50 {:.2} p99 {:.2} max {:.2}",
                    b.frames as f64 / since.elapsed().as_secs_f64(),
                    pct(0.5),
                    pct(0.99),
                    pct(1.0)
                );
                *b = Bench::default();
            }
        }
    }
}
