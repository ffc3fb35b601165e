//! Save and share: Export… writes what the monitor knows as a saved snapshot (JSON) and a PNG of the window;
//! `--open FILE` shows that state again, frozen, in the window and as `--headless --json`; damaged, foreign and newer
//! files are one line saying what to do.

use std::path::{Path, PathBuf};
use std::process::Command;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use shoal_monitor::app::{MonitorApp, Tab};
use shoal_monitor::fixture::{Fixture, FixtureMessages, fixture_logs};
use shoal_monitor::headless::view_json;
use shoal_monitor::saved::{FORMAT_VERSION, SavedError, SavedSnapshot, png_bytes};
use shoal_monitor::source::ScriptedLogs;

#[allow(dead_code)] // the other window tests use the rest
mod common;

use common::harness;

/// A fresh directory under the target directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("saved-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The scripted network after `steps` refreshes, with its log records.
fn live_app(steps: u32) -> MonitorApp {
    let logs = ScriptedLogs::default();
    logs.0.lock().expect("logs").extend(fixture_logs(1_700_000_000_000_000));
    let mut app =
        MonitorApp::manual(Box::new(Fixture::new()), Box::new(FixtureMessages::default())).with_logs(Box::new(logs));
    for _ in 0..steps {
        app.refresh_now();
    }
    app
}

/// Every event the app keeps, oldest first.
fn events(app: &MonitorApp) -> Vec<shoal_monitor::history::Event> {
    app.history().events().iter().cloned().collect()
}

/// The fixture at step 55 (drops rising on /camera, the eCAL recorder stale, teleop gone, call rates, a type
/// mismatch) saved and opened again: the same view (same content, the same JSON, ages included), the same events
/// and log records, the history of each topic's figures, and `--open FILE --headless --json` prints that view.
#[test]
fn a_saved_snapshot_opens_as_the_same_view() {
    let dir = scratch("round-trip");
    let mut live = harness(live_app(55));
    live.run(); // polls the log records
    let live = live.state();
    let shown = live.displayed().expect("a view");
    assert!(shown.topics.iter().any(|t| !t.problems.is_empty()), "the fixture has problems to carry");
    assert!(shown.services.iter().any(|s| s.call_rate_hz.is_some()), "and call rates");
    let saved = live.saved_snapshot().expect("something to save");
    let path = dir.join("bug.json");
    saved.save(&path).expect("save");

    let opened_file = SavedSnapshot::load(&path).expect("open");
    assert!(opened_file == saved, "the file holds what was saved");
    assert_eq!(opened_file.version, FORMAT_VERSION);
    assert_eq!(opened_file.history.times_s.len(), live.history().len());
    let camera = &opened_file.history.topics["/camera"];
    assert_eq!(camera.rate_hz.len(), live.history().len());
    assert!(camera.drops.last().copied().flatten().is_some_and(|d| d > 0));
    assert!(!opened_file.logs.is_empty() && opened_file.logs.len() == live.logs().count());

    let opened = MonitorApp::opened(&opened_file, &path);
    let view = opened.displayed().expect("the opened view");
    assert!(view.same_content(&shown), "the view built from the file is the one exported");
    let live_json = view_json(&shown, &events(live));
    assert_eq!(view_json(&view, &events(&opened)), live_json, "figures, ages, events");

    // A configuration no node starts with: the live monitor fails, `--open` starts none and does not.
    let broken_ini = dir.join("broken.ini");
    std::fs::write(&broken_ini, "[network]\nnetwork_enabled = maybe\n").expect("write");
    let live_out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--headless", "--json", "--seconds", "1"])
        .env("ECAL_INI", &broken_ini)
        .output()
        .expect("run shoal-monitor");
    assert_eq!(live_out.status.code(), Some(1), "a live monitor starts a node, which refuses the configuration");
    assert!(String::from_utf8_lossy(&live_out.stderr).contains("starting the shoal node"));
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--headless", "--json", "--open"])
        .arg(&path)
        .env("ECAL_INI", &broken_ini)
        .output()
        .expect("run shoal-monitor --open");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).expect("utf-8").lines().collect();
    assert_eq!(lines.len(), 1, "one line, at once");
    let printed: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(printed, live_json, "--headless --json of the opened file");
    assert!(err.contains("taken at") && err.contains("not live"), "the banner on stderr: {err}");
}

/// The window of an opened file: the banner instead of Freeze, the saved figures and log records, and nothing
/// moves: no refresh, the registration ages stay those of the moment it was taken.
#[test]
fn an_opened_snapshot_is_frozen_with_a_banner() {
    let dir = scratch("window");
    let saved = live_app(55).saved_snapshot().expect("saved");
    let path = dir.join("frozen.json");
    saved.save(&path).expect("save");
    let opened = MonitorApp::opened(&SavedSnapshot::load(&path).expect("open"), &path);
    let before = opened.displayed().expect("view");
    let mut h = harness(opened);
    h.run();
    let banner = h.state().opened_banner().expect("a banner").to_owned();
    assert!(banner.starts_with(&format!("Opened {}, taken at ", path.display())), "{banner}");
    assert!(banner.ends_with(" on lab-pc — not live"), "{banner}");
    h.get_by_label(&banner);
    assert!(h.query_by_label("Freeze").is_none(), "nothing live to freeze");
    h.get_by_label("/camera");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    h.state_mut().refresh_now();
    h.run();
    assert_eq!(h.state().history().len(), 2, "no refresh adds a view");
    let after = h.state().displayed().expect("view");
    assert_eq!(view_json(&after, &[]), view_json(&before, &[]), "ages do not grow");
    h.state_mut().state.tab = Tab::Logs;
    h.run();
    assert_eq!(h.state().logs().count(), saved.logs.len());
}

/// Export… in the window: the typed path gets the JSON and, beside it with the same stem, the PNG of the next
/// frame; the row says where each went, or one line saying what to do when it cannot write.
#[test]
fn export_writes_the_json_and_a_screenshot_beside_it() {
    let dir = scratch("export");
    let mut h = harness(live_app(5));
    h.run();
    h.get_by_label("Export…").click();
    h.run();
    let stem = dir.join("report");
    h.get_by_label("Export to:").focus();
    h.run();
    h.get_by_label("Export to:").type_text(&stem.display().to_string());
    h.run();
    h.get_by_label("Save JSON").click();
    h.run();
    let json = dir.join("report.json");
    let saved = SavedSnapshot::load(&json).expect("the JSON was written");
    assert_eq!(saved.snapshot.taken_at, h.state().saved_snapshot().expect("saved").snapshot.taken_at);
    h.get_by_label(&format!("Wrote {}", json.display()));

    h.get_by_label("Screenshot").click();
    h.step();
    let request = screenshot_request(&h);
    // What the integration hands back after painting (kittest renders only with a GPU feature).
    let image = egui::ColorImage::new([3, 2], vec![egui::Color32::from_rgb(10, 20, 30); 6]);
    request.complete(std::sync::Arc::new(image.clone()));
    h.run();
    let png = dir.join("report.png");
    let decoded = decode_png(&std::fs::read(&png).expect("the PNG was written"));
    assert_eq!(decoded, image);
    h.get_by_label(&format!("Wrote {}", png.display()));

    // A directory that does not exist: one line that says what to do, nothing written.
    h.get_by_label("Export to:").focus();
    h.run();
    h.get_by_label("Export to:").type_text("/nonexistent");
    h.run();
    h.get_by_label("Save JSON").click();
    h.run();
    let err = h.get_by_label_contains("choose a path in a writable directory");
    assert!(err.value().unwrap_or_default().contains("cannot write"), "{:?}", err.value());
}

/// The Screenshot callback the last frame asked for.
fn screenshot_request(h: &Harness<'_, MonitorApp>) -> egui::ScreenshotCallback {
    h.output()
        .viewport_output
        .values()
        .flat_map(|v| &v.commands)
        .find_map(|c| match c {
            egui::ViewportCommand::Screenshot(cb) => Some(cb.clone()),
            _ => None,
        })
        .expect("a screenshot was asked for")
}

/// Without a typed path, Save JSON and Screenshot write `shoal-monitor-<time>.json` and `.png` with one stem in the
/// current directory, even when a refresh came between them; after the row is closed and opened again, the next
/// export takes the newer time.
#[test]
fn without_a_path_the_json_and_png_share_a_timestamped_stem() {
    let dir = scratch("default-name");
    // The only test here that depends on the current directory (the others give absolute paths).
    std::env::set_current_dir(&dir).expect("cd");
    let mut h = harness(live_app(5));
    h.run();
    let time = h.state().displayed().expect("view").time_s;
    let stem = shoal_monitor::saved::default_file_name(time).trim_end_matches(".json").to_owned();
    h.get_by_label("Export…").click();
    h.run();
    h.get_by_label("Save JSON").click();
    h.run();
    h.state_mut().refresh_now(); // a second later
    h.run();
    h.get_by_label("Screenshot").click();
    h.step();
    screenshot_request(&h).complete(std::sync::Arc::new(egui::ColorImage::new([1, 1], vec![egui::Color32::RED])));
    h.run();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [format!("{stem}.json"), format!("{stem}.png")]);
    h.get_by_label("Export…").click();
    h.run();
    h.get_by_label("Export…").click();
    h.run();
    h.get_by_label("Save JSON").click();
    h.run();
    let later = shoal_monitor::saved::default_file_name(time + 1.0);
    assert!(dir.join(&later).exists(), "{later} after the row was opened again");
}

fn decode_png(bytes: &[u8]) -> egui::ColorImage {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Rgba, png::BitDepth::Eight));
    egui::ColorImage::from_rgba_unmultiplied([info.width as usize, info.height as usize], &buf[..info.buffer_size()])
}

/// The PNG encoder keeps every pixel, translucent ones included.
#[test]
fn screenshots_encode_to_png_and_back() {
    let pixels: Vec<egui::Color32> =
        (0..12u8).map(|i| egui::Color32::from_rgba_unmultiplied(i * 20, 255 - i * 20, i, 255 - i * 10)).collect();
    let image = egui::ColorImage::new([4, 3], pixels);
    assert_eq!(decode_png(&png_bytes(&image).expect("encode")), image);
}

/// Damaged, foreign and newer files and a missing one: an error that says what to do, never a panic; a file cut
/// anywhere or with a byte changed either is refused or opens into a view.
#[test]
fn bad_files_are_refused_with_what_to_do() {
    let dir = scratch("bad");
    let saved = live_app(12).saved_snapshot().expect("saved");
    let bytes = saved.to_json();
    let step = (bytes.len() / 300).max(1);
    for cut in (0..bytes.len()).step_by(step) {
        match SavedSnapshot::from_json(&bytes[..cut]) {
            Err(SavedError::Format(m)) => assert!(m.contains("saved"), "{m}"),
            other => panic!("a file cut at {cut} of {}: {other:?}", bytes.len()),
        }
    }
    for at in (0..bytes.len()).step_by(step) {
        let mut b = bytes.clone();
        b[at] = b[at].wrapping_add(1);
        if let Ok(s) = SavedSnapshot::from_json(&b) {
            let _ = s.views();
        }
    }
    let newer = String::from_utf8(bytes.clone()).expect("utf-8").replacen(
        &format!("\"version\":{FORMAT_VERSION}"),
        &format!("\"version\":{}", FORMAT_VERSION + 1),
        1,
    );
    let e = SavedSnapshot::from_json(newer.as_bytes()).expect_err("newer");
    assert!(matches!(e, SavedError::Newer(v) if v == FORMAT_VERSION + 1));
    assert!(e.to_string().contains("open it with a newer shoal-monitor"), "{e}");
    let e = SavedSnapshot::from_json(br#"{"format":"mcap","version":1}"#).expect_err("foreign");
    assert!(e.to_string().contains("not a saved monitor snapshot"), "{e}");

    // The binary: one line each, exit code 1, no backtrace.
    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let newer_file = dir.join("newer.json");
    std::fs::write(&newer_file, newer).expect("write");
    for (file, says) in [
        (dir.join("missing.json"), "cannot read"),
        (truncated, "open a file the monitor's Export… wrote"),
        (newer_file, "open it with a newer shoal-monitor"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shoal-monitor"))
            .args(["--headless", "--json", "--open"])
            .arg(&file)
            .env("RUST_BACKTRACE", "1")
            .output()
            .expect("run shoal-monitor");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(says), "{err}");
        assert!(out.stdout.is_empty());
    }
}
