use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::layer::Bounded;
use super::wire::encode_datagrams;
use super::*;
use crate::config::Config;

fn record(level: LogLevel, content: &str) -> LogRecord {
    LogRecord {
        time_us: 1_700_000_000_000_000,
        host_name: "hostA".into(),
        process_id: 4242,
        process_name: "/usr/bin/robot".into(),
        unit_name: "robot".into(),
        level,
        content: content.into(),
    }
}

/// A configuration on a port of its own, so that tests running at once do not see each other's messages.
fn cfg_on(port: u16) -> Config {
    let mut cfg = Config::default();
    cfg.logging.port = port;
    cfg
}

fn test_port() -> u16 {
    // 20000..=29999, by pid and a counter: distinct per test in one run, rarely shared across runs.
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    20_000 + ((std::process::id() as u16).wrapping_mul(7) % 9_000) + NEXT.fetch_add(1, Ordering::Relaxed) % 1000
}

#[test]
fn levels_map_to_ecal_values_and_back() {
    for l in LogLevel::ALL {
        assert_eq!(LogLevel::from_wire(l.to_wire()), l);
        assert_eq!(LogLevel::parse(&l.name()), Some(l));
        assert_eq!(u32::from(l.bit()).count_ones(), 1);
    }
    assert_eq!(LogLevel::from_wire(3), LogLevel::Other(3));
    assert_eq!(LogLevel::from_tracing(tracing::Level::WARN).to_wire(), 2);
    assert_eq!(LogLevel::from_tracing(tracing::Level::TRACE), LogLevel::Debug2);
    assert_eq!(LogLevel::parse("WARN"), Some(LogLevel::Warning));
    assert_eq!(LogLevel::parse("loud"), None);
}

#[test]
fn record_round_trips_through_the_datagram() {
    let r = record(LogLevel::Warning, "wheel slip ✓");
    let mut id = || 7;
    let datagrams = encode_datagrams(&r, &mut id);
    assert_eq!(datagrams.len(), 1);
    let mut d = LogDecoder::new(true);
    let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    assert_eq!(d.push(Instant::now(), from, &datagrams[0]), Ok(Some(r)));
    assert_eq!(d.counters().records, 1);
}

#[test]
fn records_encode_as_prost_encodes_log_message() {
    // The message of eCAL's logging.proto, as prost derives it: the reference for the hand-written encoder.
    #[derive(Clone, PartialEq, prost::Message)]
    struct LogMessage {
        #[prost(int64, tag = "1")]
        time: i64,
        #[prost(string, tag = "2")]
        host_name: String,
        #[prost(int32, tag = "3")]
        process_id: i32,
        #[prost(string, tag = "4")]
        process_name: String,
        #[prost(string, tag = "5")]
        unit_name: String,
        #[prost(int32, tag = "6")]
        level: i32,
        #[prost(string, tag = "7")]
        content: String,
    }
    let mut odd = record(LogLevel::Other(-5), "");
    odd.process_id = -1;
    odd.time_us = 0;
    odd.unit_name = String::new();
    for r in [record(LogLevel::Fatal, "x ✓"), odd] {
        let reference = prost::Message::encode_to_vec(&LogMessage {
            time: r.time_us,
            host_name: r.host_name.clone(),
            process_id: r.process_id,
            process_name: r.process_name.clone(),
            unit_name: r.unit_name.clone(),
            level: r.level.to_wire(),
            content: r.content.clone(),
        });
        assert_eq!(encode_record(&r), reference);
        assert_eq!(decode_record(&reference).unwrap(), r);
        // The in-place datagram is the one the framing of registration makes.
        let whole = crate::wire::encode_message(LOG_SAMPLE_NAME, &reference, 65_000, &mut || 1).unwrap();
        assert_eq!(encode_datagrams(&r, &mut || 1), whole);
    }
}

#[test]
fn a_fragmented_message_is_reassembled() {
    let r = record(LogLevel::Error, &"x".repeat(100_000));
    let mut n = 0;
    let mut id = || {
        n += 1;
        n
    };
    let datagrams = encode_datagrams(&r, &mut id);
    assert!(datagrams.len() > 2);
    let mut d = LogDecoder::new(true);
    let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let mut got = None;
    for dg in &datagrams {
        if let Some(rec) = d.push(Instant::now(), from, dg).unwrap() {
            got = Some(rec);
        }
    }
    assert_eq!(got, Some(r));
}

#[test]
fn bad_datagrams_are_counted_never_records() {
    let mut d = LogDecoder::new(true);
    let now = Instant::now();
    let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    assert!(d.push(now, lo, b"").is_err());
    assert!(d.push(now, lo, b"ECAL garbage garbage garbage").is_err());
    // A well-framed sample of another name (a registration sample).
    let other = crate::wire::encode_message("__ecal_reg__", b"\x08\x01", 65_000, &mut || 1).unwrap();
    assert!(matches!(d.push(now, lo, &other[0]), Err(LogDecodeError::OtherSample(_))));
    // A log sample whose payload is not a LogMessage (a truncated varint).
    let bad = crate::wire::encode_message(LOG_SAMPLE_NAME, b"\x08\xff", 65_000, &mut || 1).unwrap();
    assert!(matches!(d.push(now, lo, &bad[0]), Err(LogDecodeError::Protobuf(_))));
    // Local mode: another host's message.
    let good = encode_datagrams(&record(LogLevel::Info, "hi"), &mut || 1);
    let remote: SocketAddr = "10.1.2.3:5000".parse().unwrap();
    assert!(matches!(d.push(now, remote, &good[0]), Err(LogDecodeError::OtherHost(_))));
    // Text that is not UTF-8 is data.
    let mut bytes = encode_record(&record(LogLevel::Info, "ab"));
    let last = bytes.len() - 1;
    bytes[last] = 0xff;
    assert_eq!(decode_record(&bytes).unwrap().content, "a\u{fffd}");
    let c = d.counters();
    assert_eq!(
        (c.datagrams, c.records, c.malformed, c.other_samples, c.bad_messages, c.other_host),
        (5, 0, 2, 1, 1, 1)
    );
}

#[test]
fn filter_by_level_process_host_and_text() {
    let r = record(LogLevel::Warning, "Wheel slip detected");
    let f = |f: LogFilter| f.matches(&r);
    assert!(f(LogFilter::default()));
    assert!(f(LogFilter { min_level: Some(LogLevel::Info), ..Default::default() }));
    assert!(f(LogFilter { min_level: Some(LogLevel::Warning), ..Default::default() }));
    assert!(!f(LogFilter { min_level: Some(LogLevel::Error), ..Default::default() }));
    assert!(f(LogFilter { process: Some("ROBOT".into()), ..Default::default() }));
    assert!(!f(LogFilter { process: Some("camera".into()), ..Default::default() }));
    assert!(f(LogFilter { host: Some("hosta".into()), ..Default::default() }));
    assert!(!f(LogFilter { host: Some("hostB".into()), ..Default::default() }));
    assert!(f(LogFilter { text: Some("slip".into()), ..Default::default() }));
    assert!(!f(LogFilter { text: Some("grip".into()), ..Default::default() }));
    // Debug levels rank below info.
    assert!(
        !LogFilter { min_level: Some(LogLevel::Info), ..Default::default() }.matches(&record(LogLevel::Debug1, ""))
    );
}

#[test]
fn bounded_content_cuts_on_a_character_boundary() {
    use std::fmt::Write;
    let mut b = Bounded::new(10);
    write!(b, "ääääää").unwrap(); // 12 bytes
    assert!(b.truncated);
    assert!(b.text.len() <= 10, "{:?}", b.text);
    assert_eq!(b.text, "äää..."); // 9 bytes: a fourth ä would need 8 + 3
    let mut b = Bounded::new(10);
    write!(b, "0123456789").unwrap();
    assert!(!b.truncated);
    assert_eq!(b.text, "0123456789");
}

#[test]
fn level_filter_selects_what_is_queued() {
    let mut cfg = cfg_on(test_port());
    cfg.logging.udp_levels = LogLevel::Warning.bit() | LogLevel::Error.bit();
    let layer = LogLayer::build(&cfg, false).unwrap();
    assert!(!layer.offer_text(LogLevel::Info, "info"));
    assert!(!layer.offer_text(LogLevel::Debug1, "debug"));
    assert!(layer.offer_text(LogLevel::Warning, "warning"));
    assert!(layer.offer_text(LogLevel::Error, "error"));
    let s = layer.stats_handle().stats();
    assert_eq!(s.queued, 2);
    assert_eq!(s.dropped(), 0);
}

#[test]
fn rate_queue_and_size_bounds_count_what_they_refuse() {
    let mut cfg = cfg_on(test_port());
    cfg.logging.max_rate = 50;
    cfg.logging.queue = 20;
    cfg.logging.max_record_bytes = 64;
    let layer = LogLayer::build(&cfg, false).unwrap();
    let stats = layer.stats_handle();
    let start = Instant::now();
    for i in 0..200 {
        layer.offer_text(LogLevel::Warning, &format!("{i} {}", "long ".repeat(i % 30)));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let s = stats.stats();
    // 50 tokens at the start, refilled at 50/s while the loop ran; 20 fit the queue, nothing drains it.
    let tokens = 50 + (elapsed * 50.0).ceil() as u64;
    assert_eq!(s.queued, 20, "{s:?}");
    assert!(s.dropped_queue_full >= 30, "{s:?}");
    assert!(s.queued + s.dropped_queue_full <= tokens, "{s:?}, {tokens} tokens");
    assert_eq!(s.queued + s.dropped_queue_full + s.dropped_rate, 200, "{s:?}");
    assert!(s.dropped_rate >= 200 - tokens, "{s:?}");
    assert!(s.truncated > 0 && s.truncated < 200, "{s:?}");
}

#[test]
fn layer_records_reach_a_receiver_with_every_field() {
    use tracing_subscriber::layer::SubscriberExt;
    let cfg = cfg_on(test_port());
    let mut rx = LogReceiver::bind(&cfg).unwrap();
    let layer = LogLayer::new(&cfg).unwrap().unit_name("unit_test_unit");
    let stats = layer.stats_handle();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(speed = 3, name = "left", "wheel slip");
        tracing::debug!("not selected by the default filter");
        tracing::error!("motor hot");
    });
    assert!(stats.flush(Duration::from_secs(5)));
    let first = rx.recv_timeout(Duration::from_secs(5)).unwrap().expect("the info record");
    assert_eq!(first.level, LogLevel::Info);
    assert_eq!(first.content, "wheel slip speed=3 name=left");
    assert_eq!(first.unit_name, "unit_test_unit");
    assert_eq!(first.process_id, std::process::id() as i32);
    assert_eq!(first.host_name, crate::sys::host_name());
    assert!(first.process_name.contains("shoal"), "{}", first.process_name);
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    assert!((now_us - first.time_us).abs() < 10_000_000, "time {} vs now {now_us}", first.time_us);
    rx.set_filter(LogFilter { text: Some("hot".into()), ..Default::default() });
    let second = rx.recv_timeout(Duration::from_secs(5)).unwrap().expect("the error record");
    assert_eq!((second.level, second.content.as_str()), (LogLevel::Error, "motor hot"));
    assert!(rx.recv_timeout(Duration::from_millis(200)).unwrap().is_none());
    assert_eq!(stats.stats().sent, 2);
}

#[test]
fn ecal_level_filter_keys_parse_as_ecal_writes_them() {
    let levels = |v: &str| {
        Config::parse_str(&format!("[monitoring]\nfilter_log_udp = {v}\n"), "t.ini").map(|c| c.logging.udp_levels)
    };
    assert_eq!(levels("info, warning, error, fatal").unwrap(), 0x0f);
    assert_eq!(levels("Warning,error").unwrap(), 0x06);
    assert_eq!(levels("all").unwrap(), 0xff);
    assert_eq!(levels("").unwrap(), 0);
    assert_eq!(levels("debug1, debug4").unwrap(), 16 | 128);
    assert!(levels("loud").is_err());
    assert_eq!(Config::default().logging.udp_levels, 0x0f);
    let cfg = Config::parse_str("[shoal_logging]\nport = 14555\nmax_rate = 10\nmax_record = 1k\nqueue = 8\n", "t.ini")
        .unwrap();
    assert_eq!(
        (cfg.logging.port, cfg.logging.max_rate, cfg.logging.max_record_bytes, cfg.logging.queue),
        (14555, 10, 1024, 8)
    );
    assert!(Config::parse_str("[shoal_logging]\nmax_record = 32\n", "t.ini").is_err());
}
