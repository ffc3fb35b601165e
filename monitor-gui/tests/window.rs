//! The real window under Xvfb (software GL, glow), with a screenshot taken by ImageMagick's `import`. Installs
//! Xvfb, ImageMagick and Mesa through `scripts/monitor-xvfb-deps` when missing and running as root; prints
//! SKIPPED otherwise.

use std::path::Path;
use std::process::Command;

#[test]
fn the_window_opens_under_xvfb_and_draws_the_overview() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let deps = Command::new(root.join("scripts/monitor-xvfb-deps")).status().expect("run monitor-xvfb-deps");
    if !deps.success() {
        println!("SKIPPED: the window test needs Xvfb, ImageMagick and Mesa, which could not be installed (see above)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("shoal-monitor-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let shot = dir.join("overview.png");
    let runtime = dir.join("xdg");
    std::fs::create_dir_all(&runtime).expect("xdg dir");
    std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let status = Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1024x700x24", "bash", "-c"])
        .arg(r#""$0" --fixture --prefill 20 --size 1024x700 & pid=$!; sleep 5; import -window root "$1"; kill $pid; wait $pid; true"#)
        .arg(env!("CARGO_BIN_EXE_shoal-monitor"))
        .arg(&shot)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("LIBGL_ALWAYS_SOFTWARE", "1")
        .status()
        .expect("run xvfb-run");
    assert!(status.success(), "xvfb-run failed");
    // A drawn window has many colours (text, tables, highlighted rows); a black screen has one.
    let colours = Command::new("convert").arg(&shot).args(["-format", "%k", "info:"]).output().expect("run convert");
    let n: u32 = String::from_utf8_lossy(&colours.stdout).trim().parse().expect("a colour count");
    assert!(n > 50, "the screenshot {} has only {n} colours: the window did not draw", shot.display());
    // The problem colours (red and orange text) are there.
    let red = Command::new("convert")
        .arg(&shot)
        .args(["-fill", "white", "+opaque", "rgb(240,80,70)", "-format", "%[fx:mean*w*h]", "info:"])
        .output()
        .expect("run convert");
    let red: f64 = String::from_utf8_lossy(&red.stdout).trim().parse().unwrap_or(0.0);
    assert!(red > 10.0, "no red (problem) pixels in {}", shot.display());
    std::fs::remove_dir_all(&dir).ok();
}

/// A monitor window that closes (here at the end of `--bench`) unregisters: another process sees it gone at once,
/// not after the 10 s registration timeout.
#[test]
fn a_closing_window_unregisters_the_monitor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let deps = Command::new(root.join("scripts/monitor-xvfb-deps")).status().expect("run monitor-xvfb-deps");
    if !deps.success() {
        println!("SKIPPED: the window test needs Xvfb, ImageMagick and Mesa, which could not be installed (see above)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("shoal-monitor-unreg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let node = shoal::Node::init_with_config("unreg_watch", shoal::Config::default()).expect("node");
    let monitors = |node: &shoal::Node| -> Vec<u32> {
        node.snapshot().processes.iter().filter(|p| p.unit_name == "shoal_monitor").map(|p| p.pid).collect()
    };
    let before = monitors(&node);
    let mut child = Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 800x600x24"])
        .arg(env!("CARGO_BIN_EXE_shoal-monitor"))
        .args(["--bench", "--bench-seconds", "3", "--size", "800x600"])
        .env("XDG_RUNTIME_DIR", &dir)
        .env("LIBGL_ALWAYS_SOFTWARE", "1")
        .spawn()
        .expect("run xvfb-run");
    // It registers while its window is open.
    let mut seen = None;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while seen.is_none() && std::time::Instant::now() < until {
        seen = monitors(&node).into_iter().find(|p| !before.contains(p));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = seen.expect("the monitor registered");
    assert!(child.wait().expect("wait").success(), "the bench run failed");
    let exited = std::time::Instant::now();
    while monitors(&node).contains(&pid) {
        assert!(exited.elapsed() < std::time::Duration::from_secs(3), "still registered 3 s after it exited");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&dir).ok();
}
