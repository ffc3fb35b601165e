//! Layout, synchronisation, writer → reader through real pthread objects, growth, multi-buffer, acknowledge,
//! untrusted headers and cleanup.

use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::memfile::{
    BadHeader, INT_HDR_SIZE, InternalHeader, MSG_HDR_SIZE, MemFileHeader, MemfileReader, MemfileWriter, ReadError,
};
use super::sync::{InnerBudget, NamedSync, SHM_DIR, SYNC_FILE_SIZE, SyncObject};
use super::*;
use crate::registration::Direction;

#[test]
fn sync_object_layout_matches_glibc_x86_64() {
    // eCAL: struct alignas(8) { pthread_mutex_t mtx; pthread_cond_t cvar; uint8_t flag; }
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    {
        assert_eq!(size_of::<libc::pthread_mutex_t>(), 40);
        assert_eq!(size_of::<libc::pthread_cond_t>(), 48);
        assert_eq!(SYNC_FILE_SIZE, 96);
        assert_eq!(offset_of!(SyncObject, flag), 88);
    }
    assert_eq!(offset_of!(SyncObject, mtx), 0);
    assert_eq!(offset_of!(SyncObject, cvar), size_of::<libc::pthread_mutex_t>());
    assert_eq!(offset_of!(SyncObject, flag), size_of::<libc::pthread_mutex_t>() + size_of::<libc::pthread_cond_t>());
    assert_eq!(align_of::<SyncObject>(), 8);
}

#[test]
fn memfile_header_layouts() {
    assert_eq!(INT_HDR_SIZE, 24);
    assert_eq!(offset_of!(InternalHeader, int_hdr_size), 0);
    assert_eq!(offset_of!(InternalHeader, reserved), 2);
    assert_eq!(offset_of!(InternalHeader, cur_data_size), 8);
    assert_eq!(offset_of!(InternalHeader, max_data_size), 16);
    assert_eq!(MSG_HDR_SIZE, 64);
    assert_eq!(offset_of!(MemFileHeader, hdr_size), 0);
    assert_eq!(offset_of!(MemFileHeader, data_size), 8);
    assert_eq!(offset_of!(MemFileHeader, id), 16);
    assert_eq!(offset_of!(MemFileHeader, clock), 24);
    assert_eq!(offset_of!(MemFileHeader, time), 32);
    assert_eq!(offset_of!(MemFileHeader, hash), 40);
    assert_eq!(offset_of!(MemFileHeader, options), 48);
    assert_eq!(offset_of!(MemFileHeader, ack_timeout_ms), 56);
}

fn shm_exists(name: &str) -> bool {
    std::path::Path::new(SHM_DIR).join(name).exists()
}

fn unique(tag: &str) -> String {
    format!("shoal_test_ecalshm_{tag}_{}_{:x}", std::process::id(), rand::random::<u32>())
}

#[test]
fn flag_lock_and_event_semantics() {
    let name = unique("sync");
    let a = NamedSync::open_or_create(&name).expect("create");
    assert!(a.created());
    let b = NamedSync::open_or_create(&name).expect("open");
    assert!(!b.created());
    assert_eq!(std::fs::metadata(format!("{SHM_DIR}/{name}")).expect("stat").len(), 96.max(SYNC_FILE_SIZE as u64));
    // Flag lock: exclusive across handles, timed.
    assert!(a.lock(Duration::from_millis(10)));
    let t = Instant::now();
    assert!(!b.lock(Duration::from_millis(30)));
    assert!(t.elapsed() >= Duration::from_millis(25));
    // Released from another thread: a waiter gets it.
    let b = Arc::new(b);
    let b2 = Arc::clone(&b);
    let waiter = std::thread::spawn(move || b2.lock(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(20));
    a.unlock();
    assert!(waiter.join().expect("join"));
    b.unlock();
    // Event: auto-reset, one wake per set.
    assert!(!a.wait(Duration::ZERO, None));
    b.set();
    assert!(a.wait(Duration::from_millis(10), None));
    assert!(!a.wait(Duration::from_millis(10), None));
    // A stopping waiter returns at once when woken and consumes nothing.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b3, s2) = (Arc::clone(&b), Arc::clone(&stop));
    let w = std::thread::spawn(move || {
        let t = Instant::now();
        (b3.wait(Duration::from_secs(5), Some(&s2)), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::Release);
    assert!(a.wake_within(InnerBudget::start()));
    let (got, took) = w.join().expect("join");
    assert!(!got);
    assert!(took < Duration::from_secs(2));
    a.unlink();
    assert!(!shm_exists(&name));
}

#[test]
fn a_peer_that_died_holding_the_inner_mutex_blocks_nobody_for_good() {
    let name = unique("deadowner");
    let a = Arc::new(NamedSync::open_or_create(&name).expect("create"));
    // A waiter sits in pthread_cond_timedwait on the event (it will have to re-acquire the mutex to return).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a2, s2) = (Arc::clone(&a), Arc::clone(&stop));
    let w = std::thread::spawn(move || {
        let t = Instant::now();
        (a2.wait(Duration::from_secs(60), Some(&s2)), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    // Another process locks the mutex and dies holding it (the mutex is not robust, as eCAL creates it).
    // SAFETY: the child only locks a process-shared mutex in an inherited shared mapping and exits at once.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        a.lock_inner_and_leak();
        // SAFETY: leaving the child without running any destructor or atexit handler of the test process.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(a.owner_tid(), child, "glibc's __owner field is where sync.rs reads it");
    // Signalling the waiter needs the mutex: after the timed lock fails, the dead owner's lock is released (a
    // stopping waiter consumes nothing: it returns false).
    stop.store(true, Ordering::Release);
    a.set();
    let (got, took) = w.join().expect("join");
    assert!(!got);
    assert!(took < Duration::from_secs(10), "the waiter came back after {took:?}");
    assert_eq!(a.owner_tid(), 0);
    // The object works again.
    a.set();
    assert!(a.wait(Duration::from_millis(100), None));
    a.unlink();
}

#[test]
fn sync_file_too_small_is_rejected() {
    let name = unique("small");
    std::fs::write(format!("{SHM_DIR}/{name}"), [0u8; 10]).expect("write");
    assert!(matches!(NamedSync::open_or_create(&name), Err(sync::SyncOpenError::TooSmall { size: 10, .. })));
    let _ = std::fs::remove_file(format!("{SHM_DIR}/{name}"));
}

/// Collects what a reader pushes.
#[derive(Default)]
struct TestInbox {
    samples: Mutex<Vec<Sample>>,
    cond: Condvar,
}

impl Inbox for TestInbox {
    fn push(&self, sample: Sample) {
        self.samples.lock().expect("lock").push(sample);
        self.cond.notify_all();
    }
    fn reads_ring_of(&self, _publisher_id: u64) -> bool {
        false
    }
    fn count_drops(&self, _n: u64) {}
}

impl TestInbox {
    fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        let mut g = self.samples.lock().expect("lock");
        while g.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self.cond.wait_timeout(g, left).expect("wait").0;
        }
        g.clone()
    }
}

fn ecal_sub(pid: u32) -> RemoteTopic {
    RemoteTopic::for_test(pid, 7, vec![Layer::new(LayerKind::Shm, true, false, LayerPar::None)], Direction::Subscriber)
}

fn pattern(clock: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (clock as usize * 31 + i) as u8).collect()
}

struct Pair {
    writer: EcalShmWriter,
    reader: EcalShmReader,
    inbox: Arc<TestInbox>,
    publisher: u64,
}

/// A writer serving this process's pid and a reader observing its memfiles (two threads, real pthread objects).
fn pair(opts: ShmWriterOptions) -> Pair {
    let pid = std::process::id();
    let mut writer = EcalShmWriter::new("t", opts);
    let sub = ecal_sub(pid);
    assert!(writer.accepts(&ecal_sub(pid + 1), true));
    assert!(!writer.accepts(&ecal_sub(pid + 1), false));
    assert!(!writer.accepts(
        &RemoteTopic::for_test(
            pid + 1,
            7,
            vec![Layer::new(LayerKind::Shm, false, false, LayerPar::None)],
            Direction::Subscriber
        ),
        true
    ));
    assert!(writer.advert().is_none(), "not started before a target");
    writer.set_targets(&[&sub]);
    let advert = writer.advert().expect("started");
    let publisher = 0xABCD;
    let inbox = Arc::new(TestInbox::default());
    let factory = EcalShmReaderFactory::new();
    let pubr = RemoteTopic::for_test(pid, publisher, vec![advert], Direction::Publisher);
    assert!(factory.connect_shm("t", inbox.clone(), &pubr, false).is_none(), "shm is same-host only");
    let reader = factory.connect_shm("t", inbox.clone(), &pubr, true).expect("connect");
    Pair { writer, reader, inbox, publisher }
}

impl Pair {
    fn send(&mut self, clock: u64, len: usize) {
        if self.writer.prepare(len) {
            // What the publisher does: re-register; what the subscriber does on the new registration: follow.
            let pubr = RemoteTopic::for_test(
                std::process::id(),
                self.publisher,
                vec![self.writer.advert().expect("advert")],
                Direction::Publisher,
            );
            self.reader.update(&pubr);
        }
        let meta = SampleMeta { publisher_id: self.publisher, clock, send_time_us: clock as i64 * 10 };
        self.writer.write(&pattern(clock, len), &meta).expect("write");
    }

    fn names(&self) -> Vec<String> {
        self.writer.memfile_names()
    }
}

fn check_delivered(samples: &[Sample], sizes: &[usize]) {
    assert_eq!(samples.len(), sizes.len());
    for (i, (s, &len)) in samples.iter().zip(sizes).enumerate() {
        let clock = i as u64 + 1;
        assert_eq!(s.clock, clock);
        assert_eq!(s.send_time_us(), clock as i64 * 10);
        assert_eq!(s.publisher_id, 0xABCD);
        assert_eq!(s.payload(), &pattern(clock, len)[..], "message {clock}");
    }
}

fn files_of(names: &[String], pid: u32) -> Vec<String> {
    let mut all = Vec::new();
    for n in names {
        for f in [n.clone(), format!("{n}_mtx"), format!("{n}_{pid}_evt"), format!("{n}_{pid}_ack_evt")] {
            if shm_exists(&f) {
                all.push(f);
            }
        }
    }
    all
}

#[test]
fn writer_to_reader_with_acknowledge_in_order() {
    let opts = ShmWriterOptions { ack_timeout_ms: 2000, ..ShmWriterOptions::default() };
    let mut p = pair(opts);
    let names = p.names();
    assert_eq!(names.len(), 1);
    let pid = std::process::id();
    assert!(names[0].starts_with(&format!("shoal_{pid}_ecal")), "the owner pid in the name: {}", names[0]);
    assert_eq!(files_of(&names, pid).len(), 4, "memfile, _mtx, _evt, _ack_evt");
    assert_eq!(std::fs::metadata(format!("{SHM_DIR}/{}", names[0])).expect("stat").len(), 24 + 64 + 4096);
    let sizes: Vec<usize> = (0..200).map(|i| i * 7 % 3000).collect();
    for (i, &len) in sizes.iter().enumerate() {
        p.send(i as u64 + 1, len);
    }
    let got = p.inbox.wait_for(sizes.len(), Duration::from_secs(10));
    check_delivered(&got, &sizes);
    assert_eq!(p.reader.drops(), 0);
    assert_eq!(p.reader.duplicates(), 0);
    drop(p.reader);
    drop(p.writer);
    assert!(files_of(&names, pid).is_empty(), "left: {:?}", files_of(&names, pid));
}

#[test]
fn growth_recreates_under_new_names_and_cleans_up() {
    let opts = ShmWriterOptions { ack_timeout_ms: 5000, ..ShmWriterOptions::default() };
    let mut p = pair(opts);
    let first = p.names();
    let sizes = [1000, 1024, 64 * 1024, 64 * 1024 + 1, 1024 * 1024, 10, 1024 * 1024];
    let mut seen = vec![first.clone()];
    for (i, &len) in sizes.iter().enumerate() {
        p.send(i as u64 + 1, len);
        if *seen.last().expect("names") != p.names() {
            seen.push(p.names());
        }
    }
    let got = p.inbox.wait_for(sizes.len(), Duration::from_secs(10));
    check_delivered(&got, &sizes);
    // 4160 fits 1024; 64 KiB and 1 MiB need new files (64 KiB + 50 % also holds 64 KiB + 1).
    assert_eq!(seen.len(), 3, "{seen:?}");
    let pid = std::process::id();
    let old: Vec<String> = seen[..2].iter().flatten().cloned().collect();
    assert!(files_of(&old, pid).is_empty(), "superseded memfiles removed: {:?}", files_of(&old, pid));
    assert_eq!(p.reader.observed(), p.names());
    let last = p.names();
    let size = std::fs::metadata(format!("{SHM_DIR}/{}", last[0])).expect("stat").len();
    assert_eq!(size, 24 + 64 + 1024 * 1024 + 512 * 1024);
    drop(p.reader);
    drop(p.writer);
    assert!(files_of(&last, pid).is_empty());
}

#[test]
fn multi_buffer_round_robin_delivers_everything() {
    let opts = ShmWriterOptions { buffer_count: 3, ack_timeout_ms: 2000, ..ShmWriterOptions::default() };
    let mut p = pair(opts);
    assert_eq!(p.names().len(), 3);
    assert_eq!(p.reader.observed().len(), 3);
    let sizes: Vec<usize> = (0..60).map(|i| 100 + i).collect();
    for (i, &len) in sizes.iter().enumerate() {
        p.send(i as u64 + 1, len);
    }
    let got = p.inbox.wait_for(sizes.len(), Duration::from_secs(10));
    check_delivered(&got, &sizes);
    let names = p.names();
    drop(p.reader);
    drop(p.writer);
    assert!(files_of(&names, std::process::id()).is_empty());
}

#[test]
fn two_subscribers_share_one_observer() {
    let opts = ShmWriterOptions { ack_timeout_ms: 2000, ..ShmWriterOptions::default() };
    let mut p = pair(opts);
    let inbox2 = Arc::new(TestInbox::default());
    let pubr = RemoteTopic::for_test(
        std::process::id(),
        p.publisher,
        vec![p.writer.advert().expect("advert")],
        Direction::Publisher,
    );
    let r2 = EcalShmReaderFactory::new().connect_shm("t", inbox2.clone(), &pubr, true).expect("connect");
    for c in 1..=20 {
        p.send(c, 50);
    }
    check_delivered(&p.inbox.wait_for(20, Duration::from_secs(10)), &[50; 20]);
    check_delivered(&inbox2.wait_for(20, Duration::from_secs(10)), &[50; 20]);
    // The second subscriber leaves; the first keeps receiving.
    drop(r2);
    p.send(21, 50);
    assert_eq!(p.inbox.wait_for(21, Duration::from_secs(10)).len(), 21);
}

#[test]
fn sink_drops_duplicates_and_out_of_order() {
    let inbox = Arc::new(TestInbox::default());
    let sink = Sink {
        inbox: inbox.clone(),
        publisher_id: 1,
        type_info: Arc::new(TypeInfo::default()),
        topic: Arc::from("t"),
        last_clock: Mutex::new(None),
        drops: AtomicU64::new(0),
        duplicates: AtomicU64::new(0),
    };
    let p: Arc<[u8]> = Arc::from(&b"x"[..]);
    for c in [5, 6, 6, 4, 9, 10] {
        sink.offer(c, 0, Payload::Shared(Arc::clone(&p)));
    }
    let clocks: Vec<u64> = inbox.samples.lock().expect("lock").iter().map(|s| s.clock).collect();
    assert_eq!(clocks, [5, 6, 9, 10]);
    assert_eq!(sink.duplicates.load(Ordering::Relaxed), 1);
    // 4 arrived out of order; 7 and 8 were never seen.
    assert_eq!(sink.drops.load(Ordering::Relaxed), 3);
}

/// Writes a raw memfile (header bytes chosen by the test) of `file_len` bytes.
fn raw_memfile(name: &str, file_len: usize, int_hdr: (u16, u64, u64), msg: Option<(u16, u64, u64)>) {
    let mut b = vec![0u8; file_len];
    b[0..2].copy_from_slice(&int_hdr.0.to_le_bytes());
    b[8..16].copy_from_slice(&int_hdr.1.to_le_bytes());
    b[16..24].copy_from_slice(&int_hdr.2.to_le_bytes());
    if let Some((hdr_size, data_size, clock)) = msg {
        b[24..26].copy_from_slice(&hdr_size.to_le_bytes());
        b[32..40].copy_from_slice(&data_size.to_le_bytes());
        b[48..56].copy_from_slice(&clock.to_le_bytes());
    }
    std::fs::write(format!("{SHM_DIR}/{name}"), b).expect("write memfile");
}

#[test]
fn bad_headers_are_rejected_without_reading_out_of_bounds() {
    let name = unique("bad");
    type Case = ((u16, u64, u64), Option<(u16, u64, u64)>, fn(&ReadError) -> bool);
    let cases: Vec<Case> = vec![
        // int_hdr_size too small.
        ((8, 100, 100), None, |e| matches!(e, ReadError::Bad(BadHeader::IntHdrSize(8)))),
        // cur_data_size beyond the file.
        ((24, 1 << 40, 1 << 40), Some((64, 1, 1)), |e| matches!(e, ReadError::Bad(BadHeader::DataArea { .. }))),
        // int_hdr_size pushing the data area past the end.
        ((60000, 10, 10), None, |e| matches!(e, ReadError::Bad(BadHeader::DataArea { .. }))),
        // message header too small.
        ((24, 100, 200), Some((4, 1, 1)), |e| matches!(e, ReadError::Bad(BadHeader::MsgHdrSize(4)))),
        // data_size beyond cur_data_size (and beyond the file).
        ((24, 100, 200), Some((64, u64::MAX - 10, 1)), |e| matches!(e, ReadError::Bad(BadHeader::Message { .. }))),
        // header larger than the valid data.
        ((24, 30, 200), Some((64, 0, 1)), |e| matches!(e, ReadError::Bad(BadHeader::Message { .. }))),
    ];
    for (i, (ih, mh, ok)) in cases.into_iter().enumerate() {
        raw_memfile(&name, 256, ih, mh);
        let mut r = MemfileReader::open(&name).expect("open");
        match r.read(Duration::from_millis(50), 0) {
            Err(e) => assert!(ok(&e), "case {i}: {e}"),
            Ok(m) => panic!("case {i}: accepted {m:?}"),
        }
        drop(r);
        let _ = std::fs::remove_file(format!("{SHM_DIR}/{name}_mtx"));
    }
    // A valid one, and the clock filter.
    raw_memfile(&name, 256, (24, 64 + 5, 200), Some((64, 5, 3)));
    let mut r = MemfileReader::open(&name).expect("open");
    let m = r.read(Duration::from_millis(50), 0).expect("read").expect("message");
    assert_eq!((m.header.clock, m.payload.len()), (3, 5));
    assert!(r.read(Duration::from_millis(50), 3).expect("read").is_none());
    // Too small to be a memfile at all.
    std::fs::write(format!("{SHM_DIR}/{name}"), [0u8; 3]).expect("write");
    assert!(MemfileReader::open(&name).is_err());
    // Names from registration are file names, never paths.
    assert!(MemfileReader::open("../etc/passwd").is_err());
    assert!(MemfileReader::open("").is_err());
    drop(r);
    let _ = std::fs::remove_file(format!("{SHM_DIR}/{name}"));
    let _ = std::fs::remove_file(format!("{SHM_DIR}/{name}_mtx"));
}

#[test]
fn observer_counts_bad_headers_and_keeps_running() {
    let name = format!("ecal_{:x}{}", rand::random::<u32>(), std::process::id());
    raw_memfile(&name, 256, (24, 1 << 40, 1 << 40), Some((64, 1, 1)));
    let inbox = Arc::new(TestInbox::default());
    let layer = Layer::new(LayerKind::Shm, true, true, LayerPar::Shm { memory_files: vec![name.clone()] });
    let pubr = RemoteTopic::for_test(std::process::id(), 1, vec![layer], Direction::Publisher);
    let r = EcalShmReaderFactory::new().connect_shm("t", inbox.clone(), &pubr, true).expect("connect");
    let evt = NamedSync::open_or_create(&format!("{name}_{}_evt", std::process::id())).expect("event");
    evt.set();
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.bad_headers() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.bad_headers(), 1);
    // Now a valid message: delivered.
    raw_memfile(&name, 256, (24, 64 + 3, 192), Some((64, 3, 9)));
    evt.set();
    let got = inbox.wait_for(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].clock, 9);
    // The memfile disappears (its writer is gone): the reader removes the files it created.
    std::fs::remove_file(format!("{SHM_DIR}/{name}")).expect("rm");
    drop(r);
    drop(evt);
    let left = files_of(std::slice::from_ref(&name), std::process::id());
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn writer_targets_come_and_go() {
    let pid = std::process::id();
    let mut w = EcalShmWriter::new("t", ShmWriterOptions::default());
    let a = ecal_sub(pid);
    w.set_targets(&[&a]);
    let names = w.memfile_names();
    assert_eq!(files_of(&names, pid).len(), 4);
    // A writer waits at most the memfile lock timeout when a reader holds the lock, then re-creates.
    let r = MemfileReader::open(&names[0]).expect("open");
    assert!(r.lock_object().lock(Duration::from_millis(10)));
    let meta = SampleMeta { publisher_id: 1, clock: 1, send_time_us: 0 };
    w.write(b"abc", &meta).expect("write after re-creation");
    assert_ne!(w.memfile_names(), names, "re-created");
    assert!(w.prepare(3), "re-registration requested");
    assert!(!w.prepare(3));
    r.lock_object().unlock();
    drop(r);
    assert!(files_of(&names, pid).is_empty(), "{:?}", files_of(&names, pid));
    // Departed targets are no longer signalled but keep their events until the memfile goes.
    w.set_targets(&[]);
    assert!(w.advert().is_some(), "stays started");
    let names = w.memfile_names();
    assert_eq!(files_of(&names, pid).len(), 4);
    drop(w);
    assert!(files_of(&names, pid).is_empty());
}

#[test]
fn memfile_writer_refuses_oversized_payload() {
    let mut w = MemfileWriter::create(64 + 10).expect("create");
    let h = MemFileHeader { clock: 1, ..MemFileHeader::default() };
    assert!(w.write(&h, &[1u8; 10], InnerBudget::start()));
    assert!(!w.write(&h, &[1u8; 11], InnerBudget::start()));
    let name = w.name().to_string();
    drop(w);
    assert!(!shm_exists(&name) && !shm_exists(&format!("{name}_mtx")));
}

#[test]
fn writer_options_default_to_the_configuration_defaults() {
    let f = EcalShmWriterFactory::new(&crate::config::LayersConfig::default());
    assert_eq!(f.opts, ShmWriterOptions::default());
    let layers =
        crate::config::LayersConfig { memfile_buffer_count: 3, memfile_ack_timeout_ms: 500, ..Default::default() };
    let f = EcalShmWriterFactory::new(&layers);
    assert_eq!((f.opts.buffer_count, f.opts.ack_timeout_ms), (3, 500));
}

#[test]
fn a_memfile_serves_a_bounded_number_of_processes_and_forgets_the_dead() {
    // Pids above any the kernel hands out here stand for processes that are gone (or never were).
    let claimed: BTreeSet<u32> = (4_190_000..4_190_000 + MAX_TARGET_PROCESSES as u32 + 40).collect();
    let mut b = Buffer::create(64, &claimed).expect("buffer");
    assert_eq!(b.events.len(), MAX_TARGET_PROCESSES, "at most MAX_TARGET_PROCESSES served");
    let name = b.file.name().to_owned();
    let first = 4_190_000u32;
    assert!(shm_exists(&format!("{name}_{first}_evt")));
    // A departed process that no longer exists loses its event files at once.
    b.disconnect(first, InnerBudget::start());
    assert_eq!(b.events.len(), MAX_TARGET_PROCESSES - 1);
    assert!(!shm_exists(&format!("{name}_{first}_evt")) && !shm_exists(&format!("{name}_{first}_ack_evt")));
    // A live process still gets in.
    let me = std::process::id();
    b.connect(me, InnerBudget::start(), Instant::now() + sync::FLOCK_TIMEOUT);
    assert!(b.events.contains_key(&me));
    // Departed live processes keep their events (eCAL's rule), but make room when the table is full.
    b.disconnect(me, InnerBudget::start());
    assert!(b.events.contains_key(&me));
    b.connect(
        4_190_000 + MAX_TARGET_PROCESSES as u32 + 100,
        InnerBudget::start(),
        Instant::now() + sync::FLOCK_TIMEOUT,
    );
    assert!(!b.events.contains_key(&me), "a departed process made room");
    drop(b);
    assert!(!shm_exists(&format!("{name}_{}_evt", first + 1)), "the writer removes the events it owns");
}

#[test]
fn a_memfile_truncated_by_a_peer_is_survived_and_mapped_again() {
    let mut w = MemfileWriter::create(64 << 10).expect("create");
    let hdr = MemFileHeader { clock: 1, ..MemFileHeader::default() };
    assert!(w.write(&hdr, &[5u8; 30_000], InnerBudget::start()));
    let mut r = MemfileReader::open(w.name()).expect("open");
    let m = r.read(Duration::from_millis(200), 0).expect("read").expect("message");
    assert_eq!(m.payload, vec![5u8; 30_000]);
    let path = format!("{SHM_DIR}/{}", w.name());
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(0).expect("truncate");
    // The writer's own mapping faults too; the guard gives it zero pages and it carries on.
    assert!(w.write(&MemFileHeader { clock: 2, ..hdr }, &[6u8; 30_000], InnerBudget::start()));
    match r.read(Duration::from_millis(200), 0) {
        Err(ReadError::Truncated) => {}
        other => panic!("expected Truncated, got {other:?}"),
    }
    assert_eq!(r.truncations(), 1);
    // Mapped again at 0 bytes: nothing to read, no fault.
    assert!(matches!(r.read(Duration::from_millis(200), 0), Ok(None)));
    // The file grows back (a peer sizing it again): read again, through a fresh mapping.
    std::fs::OpenOptions::new().write(true).open(&path).expect("open").set_len(64 << 10).expect("grow");
    assert!(matches!(r.read(Duration::from_millis(200), 0), Err(ReadError::Bad(BadHeader::IntHdrSize(0)))));
    assert_eq!(r.truncations(), 1);
    drop(r);
    drop(w);
}

/// A creation `flock` held by someone else (any local user who can open the predictable event file can) costs a
/// writer at most [`sync::FLOCK_TIMEOUT`], once: the process is not served over this memfile, the others are.
#[test]
fn a_held_creation_flock_delays_the_writer_at_most_its_deadline() {
    use std::os::fd::AsRawFd;
    let pid = std::process::id();
    let mut w = EcalShmWriter::new("t", ShmWriterOptions::default());
    let a = ecal_sub(pid);
    w.set_targets(&[&a]);
    let name = w.memfile_names().remove(0);
    // pid 1 is alive, so its departure below leaves its (foreign) file alone.
    let victim = ecal_sub(1);
    let path = format!("{SHM_DIR}/{name}_1_evt");
    let held = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).expect("create");
    // SAFETY: flock on a valid descriptor we own; a separate open file description from any the writer makes.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);

    // Directly: a typed error after the deadline.
    let t = Instant::now();
    let before = sync::flock_timeouts();
    let err = NamedSync::open_or_create(&format!("{name}_1_evt")).expect_err("locked");
    assert!(matches!(err, sync::SyncOpenError::LockTimeout { .. }), "{err}");
    let took = t.elapsed();
    assert!(took >= sync::FLOCK_TIMEOUT && took < sync::FLOCK_TIMEOUT + Duration::from_secs(2), "{took:?}");
    assert!(sync::flock_timeouts() > before);
    assert_eq!(crate::shm_lock_timeouts(), sync::flock_timeouts());

    // Through the writer (what the I/O thread does under the publisher's lock when a subscriber matches).
    let t = Instant::now();
    w.set_targets(&[&a, &victim]);
    let took = t.elapsed();
    assert!(took < sync::FLOCK_TIMEOUT + Duration::from_secs(2), "{took:?}");
    let meta = SampleMeta { publisher_id: 1, clock: 1, send_time_us: 0 };
    let t = Instant::now();
    w.write(b"abc", &meta).expect("the other target is still served");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // Not tried again at the next match change.
    let t = Instant::now();
    w.set_targets(&[&a, &victim]);
    assert!(t.elapsed() < sync::FLOCK_TIMEOUT, "{:?}", t.elapsed());
    w.set_targets(&[&a]);
    assert!(shm_exists(&format!("{name}_1_evt")), "a live process's file is not the writer's to remove");
    drop(w);
    drop(held);
    std::fs::remove_file(&path).expect("rm");
}

/// Creation `flock`s held on the event files of several subscriber processes (a registration can claim any number
/// of them) cost one target change [`sync::FLOCK_TIMEOUT`] in all, not that much per process (before: 4 × 250 ms
/// here, up to 256 × 2 × 250 ms on the I/O thread under the publisher's lock).
#[test]
fn held_creation_flocks_of_many_processes_cost_a_target_change_one_deadline() {
    use std::os::fd::AsRawFd;
    let pid = std::process::id();
    let mut w = EcalShmWriter::new("t", ShmWriterOptions::default());
    let a = ecal_sub(pid);
    w.set_targets(&[&a]);
    let name = w.memfile_names().remove(0);
    // pid 1 is alive (its files are left alone when it stops being a target); the others name no process.
    let victims: Vec<RemoteTopic> = [1, 4_194_301, 4_194_302, 4_194_303].into_iter().map(ecal_sub).collect();
    let held: Vec<(String, std::fs::File)> = victims
        .iter()
        .map(|v| {
            let path = format!("{SHM_DIR}/{name}_{}_evt", v.key.pid);
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).expect("create");
            // SAFETY: flock on a valid descriptor we own; a separate open file description from any the writer makes.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            (path, f)
        })
        .collect();
    let mut targets = vec![&a];
    targets.extend(victims.iter());
    let t = Instant::now();
    w.set_targets(&targets);
    let took = t.elapsed();
    assert!(took < sync::FLOCK_TIMEOUT + Duration::from_millis(200), "{took:?}");
    w.write(b"abc", &SampleMeta { publisher_id: 1, clock: 1, send_time_us: 0 }).expect("the own process is served");
    w.set_targets(&[&a]);
    drop(w);
    for (path, f) in held {
        drop(f);
        std::fs::remove_file(&path).expect("rm");
    }
}

/// A live process that locks `sync`'s inner pthread mutex and keeps it (its owner is alive, so nothing may release
/// it); killed by the returned guard.
struct InnerHolder(libc::pid_t);

impl InnerHolder {
    fn hold(s: &NamedSync) -> InnerHolder {
        // SAFETY: the child only locks a process-shared mutex in an inherited shared mapping and sleeps until killed.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            s.lock_inner_and_leak();
            loop {
                // SAFETY: pause only sleeps until a signal arrives.
                unsafe { libc::pause() };
            }
        }
        let t = Instant::now();
        while s.owner_tid() != child {
            assert!(t.elapsed() < Duration::from_secs(10), "the holder did not lock");
            std::thread::sleep(Duration::from_millis(1));
        }
        InnerHolder(child)
    }
}

impl Drop for InnerHolder {
    fn drop(&mut self) {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// Someone who can open a subscriber process's event file, or a memfile's `_mtx`, locks its inner mutex and keeps
/// it. A send (under the publisher's lock) still returns within its inner-mutex budget: the held event is skipped
/// (the message counts as a drop, the other subscriber process is still signalled), the held flag lock makes the
/// writer re-create the memfile, and each skip is counted.
#[test]
fn a_held_inner_mutex_delays_a_send_at_most_its_budget() {
    let pid = std::process::id();
    let mut w = EcalShmWriter::new("t", ShmWriterOptions::default());
    // pid 1 is alive: its events stay while the test runs.
    let (a, victim) = (ecal_sub(pid), ecal_sub(1));
    w.set_targets(&[&a, &victim]);
    let name = w.memfile_names().remove(0);
    let own_evt = NamedSync::open_or_create(&format!("{name}_{pid}_evt")).expect("own event");
    let limit = sync::SEND_INNER_WAIT + Duration::from_millis(150);

    let held_evt = NamedSync::open_or_create(&format!("{name}_1_evt")).expect("victim's event");
    let holder = InnerHolder::hold(&held_evt);
    let before = crate::shm_inner_lock_skips();
    let t = Instant::now();
    let err = w.write(b"abc", &SampleMeta { publisher_id: 1, clock: 1, send_time_us: 0 }).expect_err("a drop");
    let took = t.elapsed();
    assert!(took < limit, "the send took {took:?}");
    assert!(
        matches!(&err, LayerWriteError::Shm(ShmWriteError::NotSignalled { clock: 1, processes }) if processes == &[1]),
        "{err:?}"
    );
    assert!(crate::shm_inner_lock_skips() > before);
    assert!(own_evt.wait(Duration::ZERO, None), "the other subscriber process was signalled");
    // Every later send is bounded too.
    let t = Instant::now();
    assert!(w.write(b"abc", &SampleMeta { publisher_id: 1, clock: 2, send_time_us: 0 }).is_err());
    assert!(t.elapsed() < limit, "{:?}", t.elapsed());
    drop(holder);

    w.set_targets(&[&a]);
    let mtx = NamedSync::open_or_create(&format!("{name}_mtx")).expect("the memfile's _mtx");
    let holder = InnerHolder::hold(&mtx);
    let before = crate::shm_inner_lock_skips();
    let t = Instant::now();
    w.write(b"abc", &SampleMeta { publisher_id: 1, clock: 3, send_time_us: 0 }).expect("written to a new memfile");
    let took = t.elapsed();
    assert!(took < limit, "the send took {took:?}");
    assert!(crate::shm_inner_lock_skips() > before);
    assert_ne!(w.memfile_names(), vec![name.clone()], "re-created under a new name");
    drop(holder);
    drop(w);
    assert!(!shm_exists(&name) && !shm_exists(&format!("{name}_mtx")));
}

/// Someone who can open this process's event file of a memfile it observes locks the event's inner mutex and keeps
/// it: the observer thread cannot be woken and, at the end of its wait turn, sleeps re-acquiring the mutex. The
/// subscriber's detach (its drop, here) still returns within [`OBSERVER_STOP_WAIT`] and the wake-up's inner-mutex
/// budget, leaving the thread behind (before: 2 s for the wake-up plus 3 s for the thread).
#[test]
fn a_subscriber_detaching_from_an_observer_whose_event_mutex_is_held_returns_within_the_stop_wait() {
    let pid = std::process::id();
    let mut p = pair(ShmWriterOptions::default());
    p.send(1, 50);
    check_delivered(&p.inbox.wait_for(1, Duration::from_secs(10)), &[50]);
    let name = p.names().remove(0);
    let evt = NamedSync::open_or_create(&format!("{name}_{pid}_evt")).expect("our event");
    let holder = InnerHolder::hold(&evt);
    // Let the observer's wait turn end (OBSERVER_WAIT): it then blocks re-acquiring the held mutex.
    std::thread::sleep(super::OBSERVER_WAIT + Duration::from_millis(100));
    let t = Instant::now();
    drop(p.reader);
    let took = t.elapsed();
    let limit = super::OBSERVER_STOP_WAIT + 2 * sync::SEND_INNER_WAIT + Duration::from_millis(150);
    assert!(took < limit, "the detach took {took:?} (limit {limit:?})");
    // The holder dies; its mutex is released as that of a dead owner, and the thread left behind ends.
    drop(holder);
    assert!(evt.recover_dead_owner(), "the holder's lock is released");
    drop(p.writer);
}

/// A publisher announces several memfiles whose `_mtx` files a local user keeps flocked: connecting to it (on the
/// I/O thread) waits one [`sync::FLOCK_TIMEOUT`] in all, not that much per memfile (before: 4 × 250 ms here, up to
/// 16 × 750 ms per registration update).
#[test]
fn held_creation_flocks_of_announced_memfiles_cost_a_connection_one_deadline() {
    use std::os::fd::AsRawFd;
    let names: Vec<String> =
        (0..4).map(|i| format!("ecal_{:x}{}_{i}", rand::random::<u32>(), std::process::id())).collect();
    let held: Vec<std::fs::File> = names
        .iter()
        .map(|n| {
            raw_memfile(n, 256, (24, 64, 192), None);
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(format!("{SHM_DIR}/{n}_mtx"))
                .expect("create _mtx");
            // SAFETY: flock on a valid descriptor we own; a separate open file description from any the reader makes.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            f
        })
        .collect();
    let layer = Layer::new(LayerKind::Shm, true, true, LayerPar::Shm { memory_files: names.clone() });
    let pubr = RemoteTopic::for_test(std::process::id(), 1, vec![layer], Direction::Publisher);
    let inbox = Arc::new(TestInbox::default());
    let t = Instant::now();
    let r = EcalShmReaderFactory::new().connect_shm("t", inbox, &pubr, true);
    let took = t.elapsed();
    assert!(took < sync::FLOCK_TIMEOUT + Duration::from_millis(200), "{took:?}");
    assert!(r.is_none_or(|r| r.observed().is_empty()), "no memfile whose lock file is held is observed");
    drop(held);
    for n in &names {
        for f in [n.clone(), format!("{n}_mtx")] {
            let _ = std::fs::remove_file(format!("{SHM_DIR}/{f}"));
        }
    }
}

/// What [`memfile_and_its_lock_are_created_with_their_final_mode`] runs under `strace`: creates a memfile (and its
/// `_mtx`) and removes it. Does nothing unless the outer test set `SHOAL_TEST_STRACE_INNER`.
#[test]
fn create_a_memfile_when_traced() {
    if std::env::var_os("SHOAL_TEST_STRACE_INNER").is_none() {
        return;
    }
    let w = MemfileWriter::create(4096).expect("memfile");
    drop(w);
}

/// eCAL memfiles and their lock files are created with their final mode (`[shoal_security] shm_access`, owner-only
/// by default), never with the default 0666 & umask and narrowed afterwards: a window in which another user could
/// open them. Checked on the `open` calls themselves, traced with `strace` (skipped when it is not installed).
#[test]
#[allow(clippy::print_stderr)] // says SKIPPED, as the other tests that need a tool do
fn memfile_and_its_lock_are_created_with_their_final_mode() {
    if std::process::Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIPPED memfile_and_its_lock_are_created_with_their_final_mode: strace is not installed");
        return;
    }
    let out = std::env::temp_dir().join(format!("shoal_strace_{}.txt", std::process::id()));
    let status = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=open,openat", "-o"])
        .arg(&out)
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "transport::ecal_shm::tests::create_a_memfile_when_traced", "--test-threads", "1"])
        .env("SHOAL_TEST_STRACE_INNER", "1")
        .output()
        .expect("run strace");
    let trace = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    assert!(status.status.success(), "the traced test ran: {}", String::from_utf8_lossy(&status.stderr));
    let created: Vec<&str> = trace.lines().filter(|l| l.contains("/dev/shm/shoal_") && l.contains("O_CREAT")).collect();
    assert!(created.len() >= 2, "the memfile and its lock were created: {trace}");
    for line in created {
        assert!(line.contains(", 0600)"), "created with mode 0600 (shm_access = owner): {line}");
    }
}
