//! Names from the network reach a terminal only escaped (`shoal::monitor::printable`): a peer whose unit, topic and
//! type names carry terminal escape sequences (clear screen, window title, C1 CSI), a newline, a bidirectional
//! override and a zero-width space, seen through `shoal list`, `process list`, `topic list`, `topic info`, `topic
//! echo` and an error message. Nothing of it reaches stdout or stderr raw, and every escaped name is there.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shoal::TypeInfo;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

fn shoal(args: &[&str]) -> Output {
    Command::new(SHOAL).args(args).stdin(Stdio::null()).output().expect("run shoal")
}

/// Characters that must not reach a terminal from a peer: C0 controls other than the newline ending a line, DEL,
/// C1 controls, bidirectional controls, invisible format characters.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

fn clean(what: &str, o: &Output) {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(raw_controls(&out).is_empty(), "{what}: raw controls {:?} on stdout:\n{out}", raw_controls(&out));
    assert!(raw_controls(&err).is_empty(), "{what}: raw controls {:?} on stderr:\n{err}", raw_controls(&err));
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn names_with_escape_sequences_are_printed_escaped() {
    let pid = std::process::id();
    let unit = "unit\x1b]0;pwned\x07";
    let topic = format!("evil_{pid}\x1b[2J\u{202e}txt.exe\nfake row");
    let type_name = "type\x1b[31mred\u{9b}1m\u{200b}";
    let (topic_shown, type_shown) =
        (format!(r"evil_{pid}\x1b[2J\u{{202e}}txt.exe\x0afake row"), r"type\x1b[31mred\x9b1m\u{200b}");
    let node = shoal::Node::init(unit).expect("node");
    let mut publisher = node.publisher(&topic).type_info(TypeInfo::raw(type_name)).create().expect("publisher");
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = publisher.send(format!("message {i}").as_bytes());
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    for args in [&["topic", "list"][..], &["list"], &["process", "list"]] {
        let o = shoal(&[args, &["--wait-ms", "1500"]].concat());
        clean(&format!("{args:?}"), &o);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout);
        if args[0] == "process" {
            assert!(out.contains(r"unit\x1b]0;pwned\x07"), "{args:?}:\n{out}");
        } else {
            assert!(out.contains(&topic_shown), "{args:?}:\n{out}");
            assert!(out.contains(type_shown), "{args:?}:\n{out}");
        }
    }

    let o = shoal(&["topic", "info", &topic, "--wait-ms", "1500"]);
    clean("topic info", &o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("topic {topic_shown}: 1 publisher(s)")), "{out}");
    assert!(out.contains(&format!("unit {}", r"unit\x1b]0;pwned\x07")), "{out}");
    assert!(out.contains(type_shown), "{out}");

    let o = shoal(&["topic", "echo", &topic, "-n", "1", "--timeout", "20"]);
    clean("topic echo", &o);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!(", {type_shown}]")), "{o:?}");

    // An error naming similar topics: the peer's name is escaped there too.
    let o = shoal(&["topic", "info", &format!("evil_{pid}"), "--wait-ms", "1500"]);
    clean("topic info (not found)", &o);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&topic_shown), "{o:?}");

    stop.store(true, Ordering::Relaxed);
    sender.join().expect("sender");
}
