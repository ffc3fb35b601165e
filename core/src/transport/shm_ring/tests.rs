use std::io::{BufRead, BufReader, Write};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use super::layout::{
    CacheLine, DoorbellHeader, NEXT_PATH_CAP, SEGMENT_HEADER_SIZE, SLOT_HEADER_SIZE, SegmentHeader, SlotHeader,
};
use super::*;
use crate::config::ShmRingConfig;

fn cfg(slot_count: u32, slot_size: usize) -> ShmRingConfig {
    ShmRingConfig {
        enabled: true,
        slot_count,
        slot_size,
        huge_pages: crate::config::HugePages::Off,
        huge_pages_path: PathBuf::from("/dev/hugepages"),
    }
}

/// Payload of sample `clock`: deterministic, so readers can verify every byte.
fn pattern(clock: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (clock as u8).wrapping_mul(31).wrapping_add(i as u8)).collect()
}

fn pattern_len(clock: u64) -> usize {
    8 + (clock as usize * 7) % 56
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shoal_ring_test_{}_{}_{}",
        tag,
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn read_one(r: &mut RingReader) -> ReadOutcome<(Vec<u8>, SampleInfo)> {
    r.try_read_with(|v| (v.payload().to_vec(), v.info()))
}

#[test]
fn layout_is_as_asserted() {
    assert_eq!(size_of::<CacheLine<u32>>(), 64);
    assert_eq!(offset_of!(SegmentHeader, magic), 0);
    assert_eq!(offset_of!(SegmentHeader, version), 8);
    assert_eq!(offset_of!(SegmentHeader, header_size), 12);
    assert_eq!(offset_of!(SegmentHeader, slot_count), 16);
    assert_eq!(offset_of!(SegmentHeader, slot_header_size), 20);
    assert_eq!(offset_of!(SegmentHeader, slot_size), 24);
    assert_eq!(offset_of!(SegmentHeader, slot_stride), 32);
    assert_eq!(offset_of!(SegmentHeader, writer_pid), 40);
    assert_eq!(offset_of!(SegmentHeader, doorbell_name_len), 44);
    assert_eq!(offset_of!(SegmentHeader, publisher_id), 48);
    assert_eq!(offset_of!(SegmentHeader, generation), 56);
    assert_eq!(offset_of!(SegmentHeader, base_seq), 64);
    assert_eq!(offset_of!(SegmentHeader, segment_size), 72);
    assert_eq!(offset_of!(SegmentHeader, doorbell_name), 80);
    assert_eq!(offset_of!(SegmentHeader, write_seq), 128);
    assert_eq!(offset_of!(SegmentHeader, superseded), 192);
    assert_eq!(offset_of!(SegmentHeader, next_path_len), 196);
    assert_eq!(offset_of!(SegmentHeader, next_path), 200);
    assert_eq!(200 + NEXT_PATH_CAP, 448);
    assert_eq!(offset_of!(SegmentHeader, flow), 448);
    assert_eq!(offset_of!(super::layout::FlowHeader, timeout_ms), 0);
    assert_eq!(offset_of!(super::layout::FlowHeader, writer_waiting), 4);
    assert_eq!(offset_of!(super::layout::FlowHeader, progress), 8);
    assert_eq!(offset_of!(super::layout::FlowHeader, wake_at), 16);
    assert_eq!(offset_of!(SegmentHeader, readers), 512);
    assert_eq!(size_of::<super::layout::ReaderSlot>(), 64);
    assert_eq!(offset_of!(super::layout::ReaderSlot, read_report), 24);
    assert_eq!(SEGMENT_HEADER_SIZE, 512 + 64 * super::layout::MAX_RELIABLE_READERS);
    assert_eq!(SEGMENT_HEADER_SIZE % 64, 0);

    assert_eq!(offset_of!(SlotHeader, seq), 0);
    assert_eq!(offset_of!(SlotHeader, len), 8);
    assert_eq!(offset_of!(SlotHeader, send_time_ns), 16);
    assert_eq!(offset_of!(SlotHeader, clock), 24);
    assert_eq!(offset_of!(SlotHeader, chunk_seq), 32);
    assert_eq!(offset_of!(SlotHeader, chunk), 40);
    assert_eq!(offset_of!(SlotHeader, flags), 44);
    assert_eq!(offset_of!(SlotHeader, stream_seq), 48);
    assert_eq!(offset_of!(SlotHeader, written), 56);
    assert_eq!(SLOT_HEADER_SIZE, 64);
    assert_eq!(layout::slot_stride(1), Some(128));
    assert_eq!(layout::slot_stride(64), Some(128));
    assert_eq!(layout::slot_stride(65), Some(192));
    assert_eq!(layout::ring_bytes(4, 64), Some(SEGMENT_HEADER_SIZE as u64 + 4 * 128));

    assert_eq!(offset_of!(DoorbellHeader, magic), 0);
    assert_eq!(offset_of!(DoorbellHeader, version), 8);
    assert_eq!(offset_of!(DoorbellHeader, owner_pid), 12);
    assert_eq!(offset_of!(DoorbellHeader, spin_only), 16);
    assert_eq!(offset_of!(DoorbellHeader, rung), 20);
    assert_eq!(offset_of!(DoorbellHeader, spin_ends), 24);
    assert_eq!(offset_of!(DoorbellHeader, seq), 64);
    assert_eq!(offset_of!(DoorbellHeader, waiters), 128);
    assert_eq!(size_of::<DoorbellHeader>(), 192);
}

#[test]
fn invalid_config_rejected() {
    assert!(matches!(RingWriter::create(&cfg(3, 64), 1), Err(RingCreateError::InvalidSlotCount(3))));
    assert!(matches!(RingWriter::create(&cfg(1, 64), 1), Err(RingCreateError::InvalidSlotCount(1))));
    assert!(matches!(RingWriter::create(&cfg(8, 0), 1), Err(RingCreateError::InvalidSlotSize(0))));
    assert!(matches!(RingWriter::create(&cfg(1 << 20, 1 << 30), 1), Err(RingCreateError::TooLarge { .. })));
}

#[test]
fn round_trip_loan_commit_write_and_copy() {
    let mut w = RingWriter::create(&cfg(8, 256), 0xABCD).unwrap();
    assert!(w.segment_name().starts_with("/dev/shm/shoal_"));
    assert!(w.segment_name().ends_with("_g0"));
    assert_eq!((w.generation(), w.slot_count(), w.slot_size()), (0, 8, 256));
    let mut r = RingReader::open(w.segment_name()).unwrap();
    assert_eq!(r.publisher_id(), 0xABCD);
    assert_eq!(r.writer_pid(), std::process::id());
    assert!(r.writer_alive());
    assert!(!r.has_data());
    assert_eq!(read_one(&mut r), ReadOutcome::Empty);

    let buf = w.loan(5).unwrap();
    buf.copy_from_slice(b"hello");
    let p = w.commit(5, 1_700_000_000_000_000, 7).unwrap();
    assert_eq!(p, Published { seq: 0, segment_changed: false });
    let p = w.write(b"world!", -3, 8).unwrap();
    assert_eq!(p.seq, 1);
    // Commit shorter than the loan.
    w.loan(100).unwrap()[..2].copy_from_slice(b"ok");
    let _ = w.commit(2, 5, 9).unwrap();
    let _ = w.write(b"", 6, 10).unwrap();

    assert!(r.has_data());
    let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!("no sample") };
    assert_eq!(bytes, b"hello");
    assert_eq!(
        info,
        SampleInfo { seq: 0, len: 5, send_time_ns: 1_700_000_000_000_000, clock: 7, publisher_id: 0xABCD }
    );
    let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!("no sample") };
    assert_eq!((bytes.as_slice(), info.send_time_ns, info.clock), (&b"world!"[..], -3, 8));
    let mut copy = vec![1, 2, 3];
    let ReadOutcome::Sample(info) = r.try_read_into(&mut copy) else { panic!("no sample") };
    assert_eq!((copy.as_slice(), info.clock, info.seq), (&b"ok"[..], 9, 2));
    let ReadOutcome::Sample(info) = r.try_read_into(&mut copy) else { panic!("no sample") };
    assert!(copy.is_empty());
    assert_eq!((info.len, info.clock), (0, 10));
    assert_eq!(read_one(&mut r), ReadOutcome::Empty);
    assert!(!r.has_data());
    assert_eq!(r.drops(), 0);
}

#[test]
fn commit_errors() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    assert_eq!(w.commit(0, 0, 0), Err(CommitError::NoLoan));
    w.loan(10).unwrap();
    assert_eq!(w.commit(11, 0, 0), Err(CommitError::LenExceedsLoan { len: 11, loaned: 10 }));
    assert_eq!(w.commit(10, 0, 0).unwrap().seq, 0);
    assert_eq!(w.commit(10, 0, 0), Err(CommitError::NoLoan));
    assert!(matches!(w.loan(usize::MAX), Err(SlotError::TooLarge { .. })));
    assert_eq!(w.generation(), 0);
}

#[test]
fn reader_starts_at_current_position() {
    let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
    for i in 0..5 {
        let _ = w.write(&[i], 0, u64::from(i)).unwrap();
    }
    let mut r = RingReader::open(w.segment_name()).unwrap();
    assert_eq!(r.position(), 5);
    assert_eq!(read_one(&mut r), ReadOutcome::Empty);
    let _ = w.write(&[42], 0, 42).unwrap();
    let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!() };
    assert_eq!((bytes, info.seq), (vec![42], 5));
}

#[test]
fn one_writer_four_readers_same_data() {
    let mut w = RingWriter::create(&cfg(16, 64), 9).unwrap();
    let mut readers: Vec<_> = (0..4).map(|_| RingReader::open(w.segment_name()).unwrap()).collect();
    for clock in 0..12 {
        let _ = w.write(&pattern(clock, pattern_len(clock)), clock as i64, clock).unwrap();
    }
    for r in &mut readers {
        for clock in 0..12 {
            let ReadOutcome::Sample((bytes, info)) = read_one(r) else { panic!("missing {clock}") };
            assert_eq!(bytes, pattern(clock, pattern_len(clock)));
            assert_eq!((info.clock, info.seq, info.publisher_id), (clock, clock, 9));
        }
        assert_eq!(read_one(r), ReadOutcome::Empty);
        assert_eq!(r.drops(), 0);
    }
}

#[test]
fn one_writer_four_reader_threads_concurrent() {
    const TOTAL: u64 = 20_000;
    let mut w = RingWriter::create(&cfg(64, 64), 3).unwrap();
    let name = w.segment_name().to_owned();
    let start = Arc::new(Barrier::new(5));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let mut r = RingReader::open(&name).unwrap();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let deadline = Instant::now() + Duration::from_secs(20);
                let (mut got, mut last) = (0u64, None);
                while r.position() < TOTAL {
                    assert!(Instant::now() < deadline, "reader stuck at {}", r.position());
                    let outcome = r.try_read_with(|v| {
                        // Never panic in here: the bytes may be torn.
                        let ok = v.payload().to_vec() == pattern(v.clock(), pattern_len(v.clock()));
                        (ok, v.clock(), v.seq())
                    });
                    match outcome {
                        ReadOutcome::Sample((ok, clock, seq)) => {
                            assert!(ok, "validated sample {seq} has wrong bytes");
                            assert_eq!(clock, seq);
                            assert!(last.is_none_or(|l| seq > l));
                            last = Some(seq);
                            got += 1;
                        }
                        ReadOutcome::Empty => std::thread::yield_now(),
                        ReadOutcome::Torn => {}
                        ReadOutcome::Ended => panic!("ended"),
                    }
                }
                (got, r.drops())
            })
        })
        .collect();
    start.wait();
    for clock in 0..TOTAL {
        let _ = w.write(&pattern(clock, pattern_len(clock)), 0, clock).unwrap();
        if clock % 64 == 0 {
            std::thread::yield_now();
        }
    }
    for h in handles {
        let (got, drops) = h.join().unwrap();
        assert_eq!(got + drops, TOTAL, "every sample is either read or counted as dropped");
        assert!(got > 0);
    }
}

#[test]
fn overrun_counted_exactly() {
    let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    for clock in 0..13u64 {
        let _ = w.write(&clock.to_le_bytes(), 0, clock).unwrap();
    }
    assert!(r.has_data());
    let mut clocks = Vec::new();
    while let ReadOutcome::Sample((_, info)) = read_one(&mut r) {
        clocks.push(info.clock);
    }
    // An overrun reader resumes in the middle of the ring (half a ring of slack), not at the oldest slot.
    assert_eq!(r.drops(), 9);
    assert_eq!(clocks, (9..13).collect::<Vec<_>>());
    // A second lap while the reader is idle.
    for clock in 13..40u64 {
        let _ = w.write(&clock.to_le_bytes(), 0, clock).unwrap();
    }
    let ReadOutcome::Sample((_, info)) = read_one(&mut r) else { panic!() };
    assert_eq!(info.clock, 36);
    assert_eq!(r.drops(), 9 + 23);
}

#[test]
fn torn_read_detected() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[1; 16], 0, 0).unwrap();
    let outcome = r.try_read_with(|v| {
        let first = v.payload().to_vec();
        // The writer laps the reader while it is "reading": slot 0 gets overwritten.
        for clock in 1..=4 {
            let _ = w.write(&[0xEE; 16], 0, clock).unwrap();
        }
        first
    });
    assert_eq!(outcome, ReadOutcome::Torn);
    assert_eq!(r.drops(), 1);
    // Same with a loan in progress (odd sequence) during the read.
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[2; 8], 0, 5).unwrap();
    let outcome = r.try_read_with(|_| {
        for clock in 6..9 {
            let _ = w.write(&[3; 8], 0, clock).unwrap();
        }
        w.loan(8).unwrap().fill(0xFF);
    });
    assert_eq!(outcome, ReadOutcome::Torn);
    assert_eq!(r.drops(), 1);
    let _ = w.commit(8, 0, 9).unwrap();
    let ReadOutcome::Sample((_, info)) = read_one(&mut r) else { panic!() };
    assert_eq!(info.clock, 6);
}

/// Every read of a ring payload view, on a slot nobody overwrites: the view copies exactly what is asked for and
/// never lends the slot as a slice.
#[test]
fn ring_payload_view_reads_by_copying() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let bytes: Vec<u8> = (10u8..50).collect();
    let _ = w.write(&bytes, 0, 0).unwrap();
    let outcome = r.try_read_with(|v| {
        let p = v.payload();
        assert_eq!((p.len(), p.is_empty()), (40, false));
        assert!(p.as_slice().is_none(), "a ring slot is never lent as a slice");
        assert_eq!(p.read_array::<4>(36), Some([46, 47, 48, 49]));
        assert_eq!(p.read_array::<4>(37), None, "past the end");
        assert_eq!(p.read_array::<4>(usize::MAX), None, "offset overflow");
        let mut dst = [0u8; 8];
        assert_eq!(p.read_at(36, &mut dst), 4);
        assert_eq!(dst, [46, 47, 48, 49, 0, 0, 0, 0]);
        assert_eq!(p.read_at(40, &mut dst), 0);
        assert!(p.copy_range(2, &mut dst));
        assert_eq!(dst, [12, 13, 14, 15, 16, 17, 18, 19]);
        let mut whole = [0u8; 40];
        assert!(!p.copy_to_slice(&mut dst), "wrong length");
        assert!(p.copy_to_slice(&mut whole));
        let mut scratch = vec![1, 2, 3];
        let slice = p.slice_or_copy(&mut scratch).to_vec();
        let mut extended = vec![7];
        p.extend_vec(&mut extended);
        (whole.to_vec(), slice, p.to_vec(), extended, format!("{p:?}"))
    });
    let ReadOutcome::Sample((whole, slice, vec, extended, debug)) = outcome else { panic!("{outcome:?}") };
    assert_eq!((&whole, &slice, &vec), (&bytes, &bytes, &bytes));
    assert_eq!(extended[0], 7);
    assert_eq!(&extended[1..], &bytes[..]);
    assert_eq!(debug, "PayloadView { len: 40, stable: false }");
}

/// A reader sees the writer's loan of the next slot as a write under way until it is published (what a blocking
/// receive polls through after an early wake-up), and not the loan of a slot it has read past.
#[test]
fn a_loan_of_the_next_slot_reads_as_writing_until_it_is_published() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    assert!(!r.writing() && !r.has_data(), "an empty ring");
    w.loan(10).unwrap().fill(7);
    assert!(r.writing(), "loaned, not published");
    assert!(!r.has_data());
    assert_eq!(read_one(&mut r), ReadOutcome::Empty, "nothing to read while it is written");
    let _ = w.commit(10, 0, 1).unwrap();
    assert!(!r.writing() && r.has_data(), "published");
    assert!(matches!(read_one(&mut r), ReadOutcome::Sample((b, _)) if b == [7; 10]));
    assert!(!r.writing() && !r.has_data(), "read");
    // The write announced before its copy: the hook runs with the slot marked, the copy follows it.
    let mut marked = false;
    let _ = w.write_announced(&[9; 20], 0, 2, || marked = true).unwrap();
    assert!(marked);
    assert!(matches!(read_one(&mut r), ReadOutcome::Sample((b, _)) if b == [9; 20]));
}

/// A watch of the next slot sees what a read would find there: nothing while nothing changes or while a loan is
/// filled, a sample published, a large copy under way (streamed: readable as it comes), the segment superseded; and
/// it stays valid after its reader is gone (it keeps the mapping).
#[test]
fn a_watch_of_the_next_slot_sees_a_sample_published_a_streamed_write_and_the_segment_superseded() {
    let mut w = RingWriter::create(&cfg(4, 128 << 10), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let watch = r.watch_next().expect("a reader that did not end");
    assert!(!watch.changed() && !watch.changed(), "nothing written");
    w.loan(10).unwrap().fill(7);
    assert!(!watch.changed(), "a loan being filled: nothing to read yet");
    let _ = w.commit(10, 0, 1).unwrap();
    assert!(watch.changed(), "published");
    let watch = r.watch_next().unwrap();
    assert!(watch.changed(), "a watch taken after the publication sees the sample at once");
    assert!(matches!(read_one(&mut r), ReadOutcome::Sample((b, _)) if b == [7; 10]));
    let watch = r.watch_next().unwrap();
    assert!(!watch.changed(), "read: the next slot is empty");
    let seen_while_written = std::cell::Cell::new(false);
    let big = pattern(2, super::writer::STREAM_MIN_LEN);
    let _ = w.write_announced(&big, 0, 2, || seen_while_written.set(watch.changed())).unwrap();
    assert!(seen_while_written.get(), "a streamed write is seen while it is written");
    assert!(matches!(read_one(&mut r), ReadOutcome::Sample((b, _)) if b == big));
    let watch = r.watch_next().unwrap();
    assert!(!watch.changed());
    // A growth supersedes the segment.
    let _ = w.write(&pattern(3, 200 << 10), 0, 3).unwrap();
    assert!(w.generation() == 1 && watch.changed(), "superseded");
    drop(r);
    drop(w);
    assert!(watch.changed(), "read through the mapping the watch keeps");
}

/// A large copying write is streamed: a reader that finds it under way reads it at once (`streamed`), its copy waiting
/// for the parts, and the sample counts as read only once it is published. A write that stalls under such a read
/// (here: the reader runs inside the write's hook, before any part is written) is given up after `STREAM_STALL`,
/// the cursor stays (no drop), and the sample is read once published, not streamed again.
#[test]
fn a_large_copying_write_is_read_while_it_is_written_and_a_stalled_one_once_published() {
    let len = writer::STREAM_MIN_LEN * 4;
    let mut w = RingWriter::create(&cfg(4, len), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let payload = pattern(3, len);
    let mut inside = None;
    let _ = w
        .write_announced(&payload, 11, 3, || {
            let streaming = r.streaming();
            let t = Instant::now();
            let first = r.try_read_with(|v| (v.streamed(), v.payload().to_vec()));
            let waited = t.elapsed();
            let again = r.try_read_with(|v| v.streamed());
            inside = Some((streaming, first, waited, again, r.streaming(), r.drops()));
        })
        .unwrap();
    let (streaming, first, waited, again, streaming_after, drops) = inside.expect("the hook ran");
    assert!(streaming, "announced as streamed before its copy");
    assert_eq!(first, ReadOutcome::Empty, "no part came: given up, not delivered");
    assert!(waited >= Duration::from_millis(5), "followed the write for a while first: {waited:?}");
    assert_eq!(again, ReadOutcome::Empty, "a stalled sample is not streamed again");
    assert!(!streaming_after);
    assert_eq!(drops, 0, "taken back, not lost");
    match r.try_read_with(|v| (v.streamed(), v.payload().to_vec(), v.info())) {
        ReadOutcome::Sample((streamed, bytes, info)) => {
            assert!(!streamed, "read once published");
            assert!(bytes == payload, "every byte");
            assert_eq!((info.seq, info.send_time_ns, info.clock, info.len), (0, 11, 3, len));
        }
        other => panic!("expected the sample, got {other:?}"),
    }
    // Small writes are not streamed.
    let _ = w.write_announced(&[5; 100], 0, 4, || assert!(!r.streaming())).unwrap();
    assert!(matches!(r.try_read_with(|v| v.streamed()), ReadOutcome::Sample(false)));
    assert_eq!(r.drops(), 0);
}

/// Another thread reading while large samples are written in parts gets each of them whole and in order, most of them
/// streamed (the writer pauses in its hook until the reader found the write, then copies while it reads).
#[test]
fn a_reader_thread_copies_streamed_samples_out_while_they_are_written() {
    const N: u64 = 40;
    let len = writer::STREAM_MIN_LEN * 8 + 123;
    let mut w = RingWriter::create(&cfg(4, len), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut streamed = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::Acquire) < N {
                assert!(Instant::now() < deadline, "reader stuck at {}", done.load(Ordering::Relaxed));
                match r.try_read_with(|v| (v.streamed(), v.payload().to_vec(), v.clock())) {
                    ReadOutcome::Sample((s, bytes, clock)) => {
                        assert_eq!(clock, done.load(Ordering::Relaxed), "in order");
                        assert!(bytes == pattern(clock, len), "sample {clock} whole");
                        streamed += u64::from(s);
                        done.fetch_add(1, Ordering::Release);
                    }
                    ReadOutcome::Empty => std::hint::spin_loop(),
                    other => panic!("unexpected {other:?}"),
                }
            }
            (streamed, r.drops())
        })
    };
    for i in 0..N {
        let payload = pattern(i, len);
        let _ = w
            .write_announced(&payload, 0, i, || {
                // Give the reader time to find the write under way (it polls without pause).
                std::thread::sleep(Duration::from_millis(2));
            })
            .unwrap();
        while done.load(Ordering::Acquire) <= i && !reader.is_finished() {
            std::thread::yield_now();
        }
    }
    let (streamed, drops) = reader.join().expect("the reader thread checked every sample");
    assert_eq!(drops, 0);
    assert!(streamed >= N / 2, "{streamed} of {N} streamed");
}

/// A lossy reader whose slot the writer overwrites while the closure runs: the view reads the slot as it is at each
/// read (so what the closure computed mixes two messages), and that result is discarded and counted as a drop, never
/// returned; the next read delivers a whole message.
#[test]
fn overwrite_during_view_closure_is_dropped() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[0xAA; 64], 0, 0).unwrap();
    let mut seen = Vec::new();
    let outcome = r.try_read_with(|v| {
        let p = v.payload();
        let first = p.read_array::<32>(0).expect("32 bytes");
        // The writer laps the reader in the middle of the closure: slot 0 now holds sample 4.
        for clock in 1..=4u64 {
            let _ = w.write(&[0xB0 | clock as u8; 64], 0, clock).unwrap();
        }
        let second = p.read_array::<32>(32).expect("32 bytes");
        seen = [first, second].concat();
        seen.clone()
    });
    assert_eq!(outcome, ReadOutcome::Torn, "a result computed over an overwritten slot is not returned");
    assert_eq!(r.drops(), 1);
    assert_eq!(&seen[..32], &[0xAA; 32][..], "the closure read the old message first");
    assert_eq!(&seen[32..], &[0xB4; 32][..], "then the overwriting one: a torn result");
    // What follows is whole: samples 1 (overwritten by 4, skipped) .. 4, each with its own bytes.
    let mut got = Vec::new();
    while let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) {
        assert_eq!(bytes, [0xB0 | info.clock as u8; 64], "sample {} is whole", info.clock);
        got.push(info.clock);
    }
    assert_eq!(got.last(), Some(&4));
    assert_eq!(r.drops() + got.len() as u64, 5, "every sample read or counted");
}

/// Why ring views never lend a slice even to reliable readers: the writer takes a reader that stays a full ring
/// behind for its timeout out of flow control, whether it is stalled or inside a long closure, and then overwrites
/// the very slot that closure is reading. The reader's result is discarded and counted like a lossy reader's.
#[test]
fn a_reliable_reader_inside_a_long_closure_is_evicted_and_its_slot_overwritten() {
    let mut w = RingWriter::create(&cfg(4, 64), 74).expect("writer");
    w.set_flow_control(Some(Duration::from_millis(50)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    assert!(r.in_flow_control());
    for clock in 0..4u64 {
        let _ = w.write(&[clock as u8; 64], 0, clock).expect("write");
    }
    let mut after = None;
    let outcome = r.try_read_with(|v| {
        let p = v.payload();
        assert!(p.as_slice().is_none());
        let before = p.to_vec();
        // Sample 4 goes to slot 0, which this closure is reading: the writer waits its 50 ms, evicts, writes.
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = w.write(&[0xEE; 64], 0, 4).expect("write");
            });
        });
        after = Some(p.to_vec());
        before
    });
    assert_eq!(outcome, ReadOutcome::Torn);
    assert_eq!(after, Some(vec![0xEE; 64]), "the slot under the closure was overwritten");
    assert_eq!(r.drops(), 1);
    assert_eq!(w.flow_stats().evicted_stalled, 1);
    assert_eq!(w.reliable_readers(), 0);
}

#[test]
fn growth_followed_by_readers() {
    let mut w = RingWriter::create(&cfg(4, 64), 77).unwrap();
    let gen0 = w.segment_name().to_owned();
    let mut r = RingReader::open(&gen0).unwrap();
    for clock in 0..3 {
        assert!(!w.write(&pattern(clock, 64), 0, clock).unwrap().segment_changed);
    }
    let big = pattern(3, 1000);
    let p = w.write(&big, 0, 3).unwrap();
    assert!(p.segment_changed);
    assert_eq!(p.seq, 3);
    assert_eq!((w.generation(), w.slot_size()), (1, 1024));
    let gen1 = w.segment_name().to_owned();
    assert!(gen1.ends_with("_g1"));
    assert_eq!(gen1.trim_end_matches("_g1"), gen0.trim_end_matches("_g0"));
    assert!(Path::new(&gen0).exists(), "old generation stays linked for late readers");
    assert!(!w.write(&[1, 2, 3], 0, 4).unwrap().segment_changed);
    // Grow again, to generation 2, loan path.
    w.loan(5000).unwrap().fill(9);
    assert!(w.commit(5000, 0, 5).unwrap().segment_changed);
    assert_eq!((w.generation(), w.slot_size()), (2, 8192));

    let mut clocks = Vec::new();
    loop {
        match read_one(&mut r) {
            ReadOutcome::Sample((bytes, info)) => {
                let expected = match info.clock {
                    0..=2 => pattern(info.clock, 64),
                    3 => big.clone(),
                    4 => vec![1, 2, 3],
                    _ => vec![9; 5000],
                };
                assert_eq!(bytes, expected);
                assert_eq!(info.seq, info.clock);
                clocks.push(info.clock);
            }
            ReadOutcome::Empty => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(clocks, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!((r.generation(), r.drops(), r.slot_size()), (2, 0, 8192));
    assert_eq!(r.segment_name(), w.segment_name());

    // A reader given the generation-0 name late lands on the newest generation, at its end.
    let mut late = RingReader::open(&gen0).unwrap();
    assert_eq!((late.generation(), late.position()), (2, 6));
    let _ = w.write(b"x", 0, 6).unwrap();
    let ReadOutcome::Sample((bytes, _)) = read_one(&mut late) else { panic!() };
    assert_eq!(bytes, b"x");
}

#[test]
fn growth_while_reader_lags_counts_drops() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    for clock in 0..6 {
        let _ = w.write(&[0; 8], 0, clock).unwrap(); // 2 overwritten in gen 0, the reader resumes at w - 2
    }
    let _ = w.write(&[0; 100], 0, 6).unwrap(); // gen 1
    let mut clocks = Vec::new();
    while let ReadOutcome::Sample((_, info)) = read_one(&mut r) {
        clocks.push(info.clock);
    }
    assert_eq!(clocks, vec![4, 5, 6]);
    assert_eq!(r.drops(), 4);
}

#[test]
fn reader_of_dropped_writer_after_growth_ends() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[0; 8], 0, 0).unwrap();
    let _ = w.write(&[0; 100], 0, 1).unwrap();
    let next = w.segment_name().to_owned();
    drop(w); // unlinks both generations; `r` still maps generation 0
    assert!(matches!(read_one(&mut r), ReadOutcome::Sample(_)));
    assert!(!Path::new(&next).exists());
    assert!(r.has_data());
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert!(!r.has_data());
}

/// Overwrites bytes of a segment file, as a broken or hostile writer (or anyone who can write the file) can.
fn patch(path: &str, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// Offsets of the header fields patched below (`layout_is_as_asserted` checks them).
const WRITE_SEQ_AT: u64 = 128;
const SUPERSEDED_AT: u64 = 192;

/// Reads until the reader has nothing more to do, at most `max_calls` times; then checks that it says so
/// consistently: `has_data` is false and another read changes nothing. Returns the samples' clocks.
fn read_until_settled(r: &mut RingReader, max_calls: usize) -> Vec<u64> {
    let mut clocks = Vec::new();
    let mut calls = 0;
    while r.has_data() {
        calls += 1;
        assert!(
            calls <= max_calls,
            "still reports data after {max_calls} reads (at {}, {} drops)",
            r.position(),
            r.drops()
        );
        if let ReadOutcome::Sample((_, info)) = read_one(r) {
            clocks.push(info.clock);
        }
    }
    let (position, drops) = (r.position(), r.drops());
    let outcome = read_one(r);
    assert!(matches!(outcome, ReadOutcome::Empty | ReadOutcome::Ended), "{outcome:?} without data");
    assert_eq!(
        (r.position(), r.drops(), r.has_data()),
        (position, drops, false),
        "a read without data changed the reader"
    );
    clocks
}

#[test]
fn a_superseded_segment_with_unpublished_samples_counts_them_and_moves_on() {
    // The samples a superseded segment counts as written but never published are lost: counted once each, and the
    // reader goes on to the next generation instead of reporting data it can never read.
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let gen0 = w.segment_name().to_owned();
    let mut r = RingReader::open(&gen0).unwrap();
    let _ = w.write(&[1; 8], 0, 0).unwrap();
    patch(&gen0, WRITE_SEQ_AT, &3u64.to_le_bytes()); // samples 1 and 2 "written", never published
    let _ = w.write(&[2; 100], 0, 1).unwrap(); // grows: generation 1 (from sample 1), generation 0 superseded
    assert_eq!(w.generation(), 1);
    let _ = w.write(&[3; 8], 0, 2).unwrap();
    let _ = w.write(&[4; 8], 0, 3).unwrap();
    // Sample 0, then 1 and 2 lost in generation 0; generation 1 starts behind the reader (at 1): it resyncs to
    // generation 1's end, so its samples are not read either, but nothing spins.
    assert_eq!(read_until_settled(&mut r, 8), [0]);
    assert_eq!((r.generation(), r.drops()), (1, 2));
    let _ = w.write(&[5; 8], 0, 4).unwrap();
    assert_eq!(read_until_settled(&mut r, 2), [4]);

    // Without a successor the reader ends, counting the lost samples. All of them: a write sequence far beyond the
    // ring's slots counts everything before the last slot_count samples as lost without visiting each.
    let w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let name = w.segment_name().to_owned();
    let mut r = RingReader::open(&name).unwrap();
    patch(&name, WRITE_SEQ_AT, &(1u64 << 40).to_le_bytes());
    patch(&name, SUPERSEDED_AT, &1u32.to_le_bytes());
    assert!(r.has_data());
    assert_eq!(read_until_settled(&mut r, 8), Vec::<u64>::new());
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert_eq!(r.drops(), 1 << 40);
}

#[test]
fn a_write_sequence_beyond_any_writer_is_refused_and_detaches_a_reader() {
    let w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let name = w.segment_name().to_owned();
    let mut r = RingReader::open(&name).unwrap();
    patch(&name, WRITE_SEQ_AT, &u64::MAX.to_le_bytes());
    let err = RingReader::open(&name).unwrap_err();
    assert!(matches!(err, RingOpenError::BadGeometry { what: "write sequence beyond any writer", .. }), "{err}");
    // The reader opened before: the unpublished samples lead it to u64::MAX, whose slot word (2 * seq + 2) wraps to
    // the 0 of a slot never written, after which its cursor would wrap to 0 and go round again. It detaches instead.
    patch(&name, SUPERSEDED_AT, &1u32.to_le_bytes());
    assert_eq!(read_until_settled(&mut r, 8), Vec::<u64>::new());
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert_eq!(r.drops(), 1);
}

#[test]
fn a_slot_ahead_of_the_write_sequence_reads_as_not_published() {
    // A slot holding a later sample than the writer has begun (by its write sequence) is not an overrun: the
    // reader neither skips past the writer counting drops on every read nor reports data.
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let name = w.segment_name().to_owned();
    let mut r = RingReader::open(&name).unwrap();
    let slot_seq_at = |index: u64| (SEGMENT_HEADER_SIZE + index as usize * 128) as u64;
    for index in 0..4 {
        patch(&name, slot_seq_at(index), &u64::MAX.to_le_bytes());
    }
    assert!(!r.has_data());
    assert_eq!(read_one(&mut r), ReadOutcome::Empty);
    assert_eq!((r.position(), r.drops()), (0, 0));
    // The writer writes on: its samples are read as usual.
    for clock in 0..3 {
        let _ = w.write(&[clock as u8; 8], 0, clock).unwrap();
    }
    assert_eq!(read_until_settled(&mut r, 4), [0, 1, 2]);
    assert_eq!(r.drops(), 0);
}

#[test]
fn bad_headers_rejected() {
    let dir = Path::new(SHM_DIR);
    let pid = std::process::id();
    let garbage = dir.join(format!("shoal_{pid}_testbad{}_g0", segment::unique_token()));
    std::fs::write(&garbage, vec![0xA5u8; 8192]).unwrap();
    let err = RingReader::open(garbage.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, RingOpenError::BadMagic { .. }), "{err}");
    std::fs::write(&garbage, [0u8; 100]).unwrap();
    assert!(matches!(RingReader::open(garbage.to_str().unwrap()), Err(RingOpenError::TooSmall { size: 100, .. })));
    std::fs::remove_file(&garbage).unwrap();
    assert!(matches!(RingReader::open(garbage.to_str().unwrap()), Err(RingOpenError::Io { op: "open", .. })));
    assert!(matches!(RingReader::open("/dev/shm/not_a_ring"), Err(RingOpenError::BadName(_))));

    // Valid writer, then corrupt fields through the file.
    let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
    let name = w.segment_name().to_owned();
    let patch = |offset: u64, bytes: &[u8]| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&name).unwrap();
        f.write_all_at(bytes, offset).unwrap();
    };
    patch(16, &3u32.to_le_bytes()); // slot_count 3
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadGeometry { what: "slot count", .. })));
    patch(16, &(1u32 << 16).to_le_bytes()); // larger than the file
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::TooSmall { .. })));
    patch(16, &8u32.to_le_bytes());
    patch(32, &999u64.to_le_bytes()); // stride
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadGeometry { what: "slot stride", .. })));
    patch(32, &128u64.to_le_bytes());
    patch(8, &2u32.to_le_bytes()); // version 2: no table of reliable readers
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadVersion { version: 2, .. })));
    patch(8, &3u32.to_le_bytes()); // version 3: reliable readers without entry locks
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadVersion { version: 3, .. })));
    patch(8, &4u32.to_le_bytes()); // version 4: payloads always in their own slot, no area seqlock
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadVersion { version: 4, .. })));
    patch(8, &5u32.to_le_bytes()); // version 5: its readers would not tell the writer's doorbell (spin-only)
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::BadVersion { version: 5, .. })));
    patch(8, &6u32.to_le_bytes());
    assert!(RingReader::open(w.segment_name()).is_ok());

    // A corrupt slot length is never accepted.
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[1; 8], 0, 0).unwrap();
    patch(SEGMENT_HEADER_SIZE as u64 + 8, &(1u64 << 40).to_le_bytes());
    assert_eq!(read_one(&mut r), ReadOutcome::Torn);
    assert_eq!(r.drops(), 1);
    // Nor a payload area beyond the ring (sample 1 is described in slot 1, 128 bytes further).
    let _ = w.write(&[2; 8], 0, 1).unwrap();
    patch(SEGMENT_HEADER_SIZE as u64 + 128 + offset_of!(SlotHeader, chunk) as u64, &999u32.to_le_bytes());
    assert_eq!(read_one(&mut r), ReadOutcome::Torn);
    assert_eq!(r.drops(), 2);

    // Doorbells too.
    assert!(matches!(DoorbellRemote::open("/dev/shm/whatever"), Err(DoorbellOpenError::BadName(_))));
    let fake = dir.join(format!("shoal_db_{pid}_testbad{}", segment::unique_token()));
    std::fs::write(&fake, vec![0u8; 4096]).unwrap();
    assert!(matches!(DoorbellRemote::open(fake.to_str().unwrap()), Err(DoorbellOpenError::BadHeader { magic: 0, .. })));
    std::fs::write(&fake, vec![0u8; 10]).unwrap();
    assert!(matches!(DoorbellRemote::open(fake.to_str().unwrap()), Err(DoorbellOpenError::TooSmall { size: 10, .. })));
    std::fs::remove_file(&fake).unwrap();
}

fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().unwrap();
    assert!(!segment::pid_alive(pid));
    pid
}

#[test]
fn stale_segments_removed_for_dead_pid() {
    let dead = dead_pid();
    let me = std::process::id();
    let dir = temp_dir("stale");
    let names = [
        format!("shoal_{dead}_abc_g0"),
        format!("shoal_{dead}_abc_g1"),
        format!("shoal_db_{dead}_abc"),
        // A dead writer's memfile goes, and its sync files with it.
        format!("shoal_{dead}_ecal1a2b"),
        format!("shoal_{dead}_ecal1a2b_mtx"),
        format!("shoal_{dead}_ecal1a2b_55_evt"),
        format!("shoal_{dead}_ecal1a2b_55_ack_evt"),
        format!("shoal_{dead}_held_g0"),
        // A live writer's memfile (its lock) keeps its unlocked sync files.
        format!("shoal_{dead}_ecal9f"),
        format!("shoal_{dead}_ecal9f_mtx"),
        format!("shoal_{me}_abc_g0"),
        format!("shoal_db_{me}_abc"),
        "shoal_notapid_g0".to_owned(),
        "ecal_something".to_owned(),
    ];
    for n in &names {
        std::fs::write(dir.join(n), b"x").unwrap();
    }
    // A live owner's lock keeps a file whatever pid its name claims.
    let held = std::fs::File::open(dir.join(&names[7])).unwrap();
    let owner = crate::sys::OwnerLock::hold(&held).unwrap();
    let memfile = std::fs::File::open(dir.join(&names[8])).unwrap();
    let memfile_owner = crate::sys::OwnerLock::hold(&memfile).unwrap();
    let mut removed = remove_stale_segments(&dir).unwrap();
    removed.sort();
    let mut expected: Vec<_> = names[..7].iter().map(|n| dir.join(n)).collect();
    expected.sort();
    assert_eq!(removed, expected);
    for n in &names[7..] {
        assert!(dir.join(n).exists(), "{n} must stay");
    }
    // Its owner goes: the next scan removes it.
    drop(owner);
    drop(held);
    assert_eq!(remove_stale_segments(&dir).unwrap(), [dir.join(&names[7])]);
    drop(memfile_owner);
    drop(memfile);
    let mut removed = remove_stale_segments(&dir).unwrap();
    removed.sort();
    assert_eq!(removed, [dir.join(&names[8]), dir.join(&names[9])]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(remove_stale_segments(&dir), Err(CleanupError::ReadDir { .. })));
}

/// The owner process of [`owners_in_other_pid_namespaces_keep_their_files`] (runs only when spawned by it, with
/// `SHOAL_TEST_HOLD` set): holds the owner lock on that file until its stdin closes or it is killed.
#[test]
#[ignore = "helper process for owners_in_other_pid_namespaces_keep_their_files"]
fn owner_lock_helper() {
    let Ok(path) = std::env::var("SHOAL_TEST_HOLD") else { return };
    let file = std::fs::File::open(&path).expect("open");
    let _owner = crate::sys::OwnerLock::hold(&file).expect("owner lock");
    let mut out = std::io::stdout().lock();
    writeln!(out, "held by pid {}", std::process::id()).unwrap();
    out.flush().unwrap();
    drop(out);
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}

/// Starts [`owner_lock_helper`] on `path` (in a new pid namespace with `unshare --pid --fork` when `new_ns`) and
/// waits until it holds the lock; returns it and the pid it has in its own namespace.
fn spawn_owner(path: &Path, new_ns: bool) -> (std::process::Child, u32) {
    let (child, _, pid) = spawn_helper("owner_lock_helper", path, new_ns, "held by pid ");
    (child, pid)
}

/// Starts the ignored test `helper` of this module as a process of its own (in a new pid namespace with `unshare
/// --pid --fork --kill-child` when `new_ns`), with `SHOAL_TEST_HOLD` set to `path`, and waits for its line
/// `<ready><pid>`; returns it, the rest of its output and the pid it has in its own namespace.
fn spawn_helper(
    helper: &str,
    path: &Path,
    new_ns: bool,
    ready: &str,
) -> (std::process::Child, BufReader<std::process::ChildStdout>, u32) {
    let exe = std::env::current_exe().unwrap();
    let test = format!("transport::shm_ring::tests::{helper}");
    let args = [exe.to_str().unwrap(), "--exact", &test, "--ignored", "--nocapture"];
    let mut cmd = if new_ns {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--kill-child"]).args(args);
        c
    } else {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        c
    };
    let mut child =
        cmd.env("SHOAL_TEST_HOLD", path).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn a helper");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break None;
        }
        // libtest may print "test <name> ... " on the same line first.
        if let Some((_, pid)) = line.trim().split_once(ready) {
            break pid.parse().ok();
        }
    };
    match pid {
        Some(pid) => (child, out, pid),
        None => {
            let _ = child.kill();
            let status = child.wait();
            panic!("{helper} ended before it was ready: {status:?}");
        }
    }
}

/// Liveness is the owner's lock, not `kill(pid, 0)`: a file whose owner lives in another pid namespace (its name's
/// pid is dead here) is kept; once the owner is SIGKILLed, the file goes.
#[test]
fn owners_in_other_pid_namespaces_keep_their_files() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        let _ = writeln!(std::io::stderr(), "skipped: needs root and unshare(1) for a pid namespace");
        return;
    }
    let dead = dead_pid();
    let dir = temp_dir("pidns");
    let (in_ns, local) = (dir.join(format!("shoal_{dead}_ns_g0")), dir.join(format!("shoal_{dead}_local_g0")));
    std::fs::write(&in_ns, b"x").unwrap();
    std::fs::write(&local, b"x").unwrap();
    let (mut other_ns, ns_pid) = spawn_owner(&in_ns, true);
    assert_eq!(ns_pid, 1, "the owner runs in a pid namespace of its own");
    let (mut killed, _) = spawn_owner(&local, false);
    assert!(remove_stale_segments(&dir).unwrap().is_empty(), "both owners are alive");
    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    assert_eq!(remove_stale_segments(&dir).unwrap(), std::slice::from_ref(&local));
    assert!(in_ns.exists(), "the owner in the other namespace still lives");
    other_ns.kill().unwrap(); // unshare --kill-child passes SIGKILL on to the owner
    other_ns.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_ns.exists() && Instant::now() < deadline {
        remove_stale_segments(&dir).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!in_ns.exists(), "removed once its owner was killed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ring writer and a doorbell owner living in another pid namespace that shares `/dev/shm`: their pid means no
/// process here (`kill(pid, 0)` would call them dead), yet the reader and the publisher see them alive while they
/// hold their owner locks, and dead once they are killed.
#[test]
fn writer_and_doorbell_owner_in_another_pid_namespace_are_alive_by_their_lock() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        let _ = writeln!(std::io::stderr(), "skipped: needs root and unshare(1) for a pid namespace");
        return;
    }
    use std::os::unix::fs::FileExt;
    let dead = dead_pid();
    let me = std::process::id();
    // Files named and headed like those of process `dead` (what a process in another pid namespace, whose pid is
    // `dead` there, creates), each locked by an owner in a new pid namespace.
    let w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let ring = w.segment_name().replacen(&format!("shoal_{me}_"), &format!("shoal_{dead}_"), 1);
    std::fs::copy(w.segment_name(), &ring).unwrap();
    std::fs::OpenOptions::new().write(true).open(&ring).unwrap().write_all_at(&dead.to_le_bytes(), 40).unwrap();
    let bell = Doorbell::create().unwrap();
    let db = bell.name().replacen(&format!("shoal_db_{me}_"), &format!("shoal_db_{dead}_"), 1);
    std::fs::copy(bell.name(), &db).unwrap();
    let at = offset_of!(DoorbellHeader, owner_pid) as u64;
    std::fs::OpenOptions::new().write(true).open(&db).unwrap().write_all_at(&dead.to_le_bytes(), at).unwrap();
    let r = RingReader::open(&ring).unwrap();
    let remote = DoorbellRemote::open(&db).unwrap();
    assert_eq!((r.writer_pid(), remote.owner_pid()), (dead, dead));
    assert!(!r.writer_alive() && !remote.owner_alive(), "no owner holds them yet");
    let (mut ring_owner, ns_pid) = spawn_owner(Path::new(&ring), true);
    assert_eq!(ns_pid, 1, "the owner runs in a pid namespace of its own");
    let (mut bell_owner, _) = spawn_owner(Path::new(&db), true);
    assert!(!segment::pid_alive(dead), "the pid alone says dead");
    assert!(r.writer_alive(), "the writer in the other namespace lives");
    assert!(remote.owner_alive(), "the doorbell's owner in the other namespace lives");
    for owner in [&mut ring_owner, &mut bell_owner] {
        owner.kill().unwrap(); // unshare --kill-child passes SIGKILL on to the owner
        owner.wait().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while (r.writer_alive() || remote.owner_alive()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!r.writer_alive() && !remote.owner_alive(), "dead once their owners were killed");
    std::fs::remove_file(&ring).unwrap();
    std::fs::remove_file(&db).unwrap();
}

#[test]
fn reader_sees_dead_writer() {
    let dead = dead_pid();
    let w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    // Forge a segment that claims the dead pid (header and name must agree).
    let forged = w.segment_name().replacen(&format!("shoal_{}_", std::process::id()), &format!("shoal_{dead}_"), 1);
    std::fs::copy(w.segment_name(), &forged).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&forged).unwrap();
        f.write_all_at(&dead.to_le_bytes(), 40).unwrap();
    }
    let r = RingReader::open(&forged).unwrap();
    assert_eq!(r.writer_pid(), dead);
    assert!(!r.writer_alive());
    std::fs::remove_file(&forged).unwrap();
}

#[test]
fn no_files_left_after_drop() {
    let mut w = RingWriter::create(&cfg(4, 64), 1).unwrap();
    let mut paths = vec![w.segment_name().to_owned()];
    let _ = w.write(&[0; 200], 0, 0).unwrap();
    paths.push(w.segment_name().to_owned());
    let bell = Doorbell::create().unwrap();
    paths.push(bell.name().to_owned());
    assert!(bell.name().starts_with("/dev/shm/shoal_db_"));
    let remote = DoorbellRemote::open(bell.name()).unwrap();
    let r = RingReader::open(&paths[0]).unwrap();
    for p in &paths {
        assert!(Path::new(p).exists());
    }
    drop(w);
    drop(bell);
    for p in &paths {
        assert!(!Path::new(p).exists(), "{p} left behind");
    }
    // Mappings outlive the files.
    assert!(!remote.ring());
    assert_eq!(r.publisher_id(), 1);
}

#[test]
fn doorbell_rings_without_syscall_only_when_nobody_waits() {
    let bell = Doorbell::create().unwrap();
    let remote = DoorbellRemote::open(bell.name()).unwrap();
    assert_eq!(remote.owner_pid(), std::process::id());
    assert!(remote.owner_alive());
    assert!(!remote.ring());
    assert_eq!(bell.seq(), 0);
    {
        let reg = bell.register_waiter();
        assert_eq!(bell.waiters(), 1);
        assert!(remote.ring());
        assert_eq!(bell.seq(), 1);
        // The ring happened after registration: the wait returns at once.
        assert_eq!(reg.wait(Some(Duration::from_secs(5))).unwrap(), WakeReason::Changed);
    }
    assert_eq!(bell.waiters(), 0);
    assert!(!remote.needs_wake());
    let reg = bell.register_waiter();
    assert!(remote.needs_wake());
    remote.wake();
    assert_ne!(bell.seq(), reg.observed_seq(), "woken");
    drop(reg);
    let t = Instant::now();
    assert_eq!(bell.wait(bell.seq(), Some(Duration::from_millis(20))).unwrap(), WakeReason::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(15));
    assert!(
        !bell.wait_until(&mut PollState::new(), || false, Some(Instant::now() + Duration::from_millis(10))).unwrap()
    );
    assert!(bell.wait_until(&mut PollState::new(), || true, Some(Instant::now())).unwrap());
}

/// Until a registered thread runs and deregisters, only the first ring wakes it: the others would each be a
/// `FUTEX_WAKE` for nobody (a stream into a block-mode subscriber on a busy host made one per three samples). A new
/// registration re-arms; a doorbell of an older shoal (the word 0) is woken by every ring, as its owner expects.
#[test]
fn doorbell_wakes_once_per_registration() {
    let bell = Doorbell::create().unwrap();
    let remote = DoorbellRemote::open(bell.name()).unwrap();
    let reg = bell.register_waiter();
    assert_eq!((0..100).filter(|_| remote.ring()).count(), 1, "one wake for a registration");
    assert!(!remote.needs_wake(), "woken, not deregistered yet: nobody to wake");
    assert_eq!(bell.seq(), 1);
    assert_ne!(bell.seq(), reg.observed_seq(), "its wait returns at once");
    let again = bell.register_waiter();
    assert!(remote.needs_wake());
    assert!(remote.ring(), "a new registration is woken");
    assert!(!remote.ring());
    drop((reg, again));
    assert!(!remote.ring(), "nobody registered");

    // The owner is an older shoal: it never writes the word.
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(bell.name()).unwrap();
    let _reg = bell.register_waiter();
    file.write_all_at(&0u32.to_le_bytes(), offset_of!(DoorbellHeader, rung) as u64).unwrap();
    assert_eq!((0..10).filter(|_| remote.ring()).count(), 10, "every ring wakes");
}

/// Runs one `wait_until` whose `ready` turns true on its second call; returns the doorbell's waiter count at that
/// moment: 0 if the wait was polling (a publisher finds no waiter to wake), 1 if it had registered to sleep.
fn waiters_when_ready(bell: &Doorbell, poll: &mut PollState) -> u32 {
    let (mut calls, mut waiters) = (0, u32::MAX);
    let ready = bell
        .wait_until(
            poll,
            || {
                calls += 1;
                if calls == 2 {
                    waiters = bell.waiters();
                }
                calls >= 2
            },
            Some(Instant::now() + Duration::from_secs(5)),
        )
        .unwrap();
    assert!(ready);
    waiters
}

/// A wait polls before it sleeps only while samples come back to back: at first it registers at once, except one
/// wait in 64 that polls (a probe); once a poll found a sample, the next waits poll first too and take a sample
/// that comes meanwhile without ever registering (so the publisher makes no wake-up); a poll that finds nothing
/// ends that, and the probes then back off from every 2nd wait.
#[test]
fn doorbell_polls_before_sleeping_only_while_samples_come_back_to_back() {
    let bell = Doorbell::create().unwrap();
    let mut poll = PollState::new();
    assert_eq!(waiters_when_ready(&bell, &mut poll), 1, "a paced receiver registers at once");
    let mut registered = 1;
    while waiters_when_ready(&bell, &mut poll) == 1 {
        registered += 1;
        assert!(registered < 64, "one wait in 64 polls first");
    }
    assert_eq!(registered, 63);
    for _ in 0..100 {
        assert_eq!(waiters_when_ready(&bell, &mut poll), 0, "while a poll finds samples, the next wait polls too");
    }
    // A poll that finds nothing (the wait times out) ends the streaming state; probes then come sooner than every
    // 64th wait, at the 2nd wait, then (when that finds nothing) at the 4th, ...
    let nothing = |poll: &mut PollState| {
        assert!(!bell.wait_until(poll, || false, Some(Instant::now() + Duration::from_millis(2))).unwrap());
    };
    nothing(&mut poll);
    assert_eq!(waiters_when_ready(&bell, &mut poll), 1);
    nothing(&mut poll);
    for _ in 0..3 {
        assert_eq!(waiters_when_ready(&bell, &mut poll), 1);
    }
    assert_eq!(waiters_when_ready(&bell, &mut poll), 0, "the 4th wait after a probe that found nothing probes");
    nothing(&mut poll);
    assert_eq!(waiters_when_ready(&bell, &mut poll), 1);
    assert_eq!(bell.waiters(), 0);
    // The state is the waiting thread's: while this thread streams, another thread's waits on the same doorbell
    // do not poll.
    while waiters_when_ready(&bell, &mut poll) == 1 {}
    assert_eq!(waiters_when_ready(&bell, &mut poll), 0, "streaming again");
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(waiters_when_ready(&bell, &mut PollState::new()), 1, "another thread's paced wait"));
    });
}

/// A thread that published since its previous wait waits for a reply: its probe polls up to `PollState::REPLY_SPIN`
/// (50 µs), long enough to find a reply that a sleeping peer sends after waking, without registering as a waiter.
#[test]
fn a_probe_after_a_publish_polls_long_enough_for_a_reply_from_a_sleeping_peer() {
    let bell = Doorbell::create().unwrap();
    let mut poll = PollState::new();
    while waiters_when_ready(&bell, &mut poll) == 1 {}
    assert_eq!(waiters_when_ready(&bell, &mut poll), 0, "streaming");
    // A poll that finds nothing ends streaming: the next wait sleeps, the one after is a probe.
    assert!(!bell.wait_until(&mut poll, || false, Some(Instant::now() + Duration::from_millis(2))).unwrap());
    assert_eq!(waiters_when_ready(&bell, &mut poll), 1);
    note_publish(64);
    let start = Instant::now();
    // The reply comes 30 µs after the wait began; a ready() that a registered waiter calls never sees it (and the
    // wait then times out).
    let found = bell
        .wait_until(
            &mut poll,
            || bell.waiters() == 0 && start.elapsed() >= Duration::from_micros(30),
            Some(start + Duration::from_secs(1)),
        )
        .unwrap();
    assert!(found, "found by the reply probe, not after registering");
}

/// After a large message the reply takes the peer's copies longer: a replying thread's poll grows by
/// `PollState::reply_window` (100 µs per MiB), while streaming too; after a small message it stays 10 µs.
#[test]
fn a_reply_to_a_large_message_is_polled_for_longer() {
    assert_eq!(PollState::reply_window(64), Duration::from_nanos(6));
    assert_eq!(PollState::reply_window(1 << 20), Duration::from_micros(100));
    assert_eq!(PollState::reply_window(1 << 30), PollState::REPLY_SPIN_MAX);
    let bell = Doorbell::create().unwrap();
    let mut poll = PollState::new();
    while waiters_when_ready(&bell, &mut poll) == 1 {}
    // Streaming. A reply 40 µs after the wait began, which a ready() that a registered waiter calls never sees (the
    // wait then sleeps to its deadline): after 8 MiB the poll (10 + 800 µs) finds it...
    let bell = &bell;
    let reply_at = |start: Instant| move || bell.waiters() == 0 && start.elapsed() >= Duration::from_micros(40);
    let deadline = Duration::from_millis(50);
    note_publish(8 << 20);
    let start = Instant::now();
    assert!(bell.wait_until(&mut poll, reply_at(start), Some(start + deadline)).unwrap());
    assert!(start.elapsed() < deadline, "found by the poll");
    // ...after 64 B the poll ends at 10 µs and the thread registers.
    note_publish(64);
    let start = Instant::now();
    let _ = bell.wait_until(&mut poll, reply_at(start), Some(start + deadline)).unwrap();
    assert!(start.elapsed() >= deadline, "slept to the deadline");
}

/// Ping-pong across two threads, each sleeping on its own doorbell: a lost wake-up would stall
/// a round trip until the 3 s deadline and fail the test.
#[test]
fn doorbell_wake_across_threads_no_lost_wakeup() {
    const ROUNDS: u64 = 3000;
    let mut ping = RingWriter::create(&cfg(8, 64), 1).unwrap();
    let mut pong = RingWriter::create(&cfg(8, 64), 2).unwrap();
    let bell_b = Doorbell::create().unwrap();
    let bell_a = Doorbell::create().unwrap();
    let ring_b = DoorbellRemote::open(bell_b.name()).unwrap();
    let ring_a = DoorbellRemote::open(bell_a.name()).unwrap();
    let mut ping_reader = RingReader::open(ping.segment_name()).unwrap();
    let mut pong_reader = RingReader::open(pong.segment_name()).unwrap();
    let woken = Arc::new(AtomicU64::new(0));
    let woken2 = woken.clone();
    let b = std::thread::spawn(move || {
        let mut poll_b = PollState::new();
        for round in 0..ROUNDS {
            let deadline = Some(Instant::now() + Duration::from_secs(3));
            assert!(
                bell_b.wait_until(&mut poll_b, || ping_reader.has_data(), deadline).unwrap(),
                "lost wake-up at {round}"
            );
            let ReadOutcome::Sample(clock) = ping_reader.try_read_with(|v| v.clock()) else { panic!("no sample") };
            assert_eq!(clock, round);
            // Vary the timing so that both "already registered" and "sleeping" cases occur.
            if round % 3 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
            let _ = pong.write(&clock.to_le_bytes(), 0, clock).unwrap();
            if ring_a.ring() {
                woken2.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut poll_a = PollState::new();
    for round in 0..ROUNDS {
        let _ = ping.write(&round.to_le_bytes(), 0, round).unwrap();
        if ring_b.ring() {
            woken.fetch_add(1, Ordering::Relaxed);
        }
        if round % 5 == 0 {
            std::thread::sleep(Duration::from_micros(30));
        }
        let deadline = Some(Instant::now() + Duration::from_secs(3));
        assert!(
            bell_a.wait_until(&mut poll_a, || pong_reader.has_data(), deadline).unwrap(),
            "lost wake-up at {round}"
        );
        let ReadOutcome::Sample(clock) = pong_reader.try_read_with(|v| v.clock()) else { panic!("no sample") };
        assert_eq!(clock, round);
    }
    b.join().unwrap();
    assert!(woken.load(Ordering::Relaxed) > 0, "some rings must have found a sleeper");
    assert_eq!(bell_a.waiters(), 0);
}

/// Starts a thread that waits on `bell` for a sample of `reader` (20 s at most) and, `round` × 2 µs later, calls
/// `publish`; gives whether the waiter got it, how long it waited, and whether `bell` was still spin-only then.
fn publish_while_a_waiter_starts(
    bell: Doorbell,
    reader: RingReader,
    round: u64,
    publish: impl FnOnce(),
) -> (bool, Duration, bool) {
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let deadline = Some(start + Duration::from_secs(20));
        let got = bell.wait_until(&mut PollState::new(), || reader.has_data(), deadline).unwrap();
        (got, start.elapsed(), bell.spin_only())
    });
    let until = Instant::now() + Duration::from_micros(round * 2);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
    publish();
    waiter.join().unwrap()
}

/// A doorbell starts spin-only (where the kernel has the expedited global membarrier): its ringers skip the fence
/// until a thread of the owner first registers. A sample published at any moment around that switch (before it,
/// during the barrier, after it) still wakes the waiter at once; a lost wake-up would leave it asleep until its
/// deadline.
#[test]
fn doorbell_spin_only_ends_at_the_first_waiter_without_a_lost_wakeup() {
    // The waiter registers tens of microseconds after its thread starts and the barrier takes about one: publish
    // 0-200 µs after the start in 2 µs steps, so that some samples land on each side of the switch and inside it.
    let (mut spin_only_at_start, mut switched) = (0, 0);
    for round in 0..100u64 {
        let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
        let bell = Doorbell::create().unwrap();
        let remote = DoorbellRemote::open(bell.name()).unwrap();
        let reader = RingReader::open(w.segment_name()).unwrap();
        assert_eq!(bell.spin_only(), remote.spin_only());
        let at_start = bell.spin_only();
        // Nobody can sleep yet: nothing to wake.
        assert!(!remote.ring());
        let (got, waited, still) = publish_while_a_waiter_starts(bell, reader, round, || {
            let _ = w.write(&round.to_le_bytes(), 0, round).unwrap();
            remote.ring();
        });
        assert!(got, "round {round}: no sample");
        assert!(waited < Duration::from_secs(10), "round {round}: lost wake-up (woke after {waited:?})");
        spin_only_at_start += u32::from(at_start);
        switched += u32::from(at_start && !still);
    }
    // Where the kernel has the barrier, some waiters must have gone through the switch (not all found the sample
    // before they registered).
    assert!(spin_only_at_start == 0 || switched > 0, "no round ended spin-only");
    // A wait that finds nothing registers, which ends spin-only for good.
    let bell = Doorbell::create().unwrap();
    let remote = DoorbellRemote::open(bell.name()).unwrap();
    let deadline = Some(Instant::now() + Duration::from_millis(1));
    assert!(!bell.wait_until(&mut PollState::new(), || false, deadline).unwrap());
    assert!(!bell.spin_only() && !remote.spin_only());
}

/// What a publisher does after a publish (`pubsub::waker::ring_after_publish` for one doorbell): nothing while
/// `ringers` says all are spin-only, else fence and wake a sleeper.
fn ring_as_a_publisher(ringers: &Ringers) {
    if ringers.all_spin_only() {
        return;
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    for b in ringers.bells().iter().filter(|b| b.needs_wake()) {
        b.wake();
    }
}

/// The same switch as above, seen by a publisher that asks its own doorbell's `spin_ends` instead of the
/// subscriber's flag (`Ringers` with the ring's doorbell named): the subscriber's process notes the publisher's
/// doorbell when it opens the ring and bumps it when it ends spin-only, so no sample published around the switch is
/// left unannounced. Without the bump (`note_ringer` not called) the waiters would sleep to their deadline.
#[test]
fn ringers_that_ask_their_own_doorbell_miss_no_wake_up_when_a_subscriber_stops_spinning() {
    let own = Arc::new(Doorbell::create().unwrap());
    let (mut spin_only_at_start, mut switched) = (0, 0);
    for round in 0..100u64 {
        let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
        w.announce_doorbell(own.name());
        let bell = Doorbell::create().unwrap();
        let remote = Arc::new(DoorbellRemote::open(bell.name()).unwrap());
        let ringers = Ringers::new(vec![Arc::clone(&remote)], Some(Arc::clone(&own)));
        let reader = RingReader::open(w.segment_name()).unwrap();
        assert_eq!(reader.writer_doorbell().as_deref(), Some(own.name()));
        let at_start = bell.spin_only();
        // Before the subscriber's process noted us (it has not read the ring yet), we may take it for spin-only.
        assert_eq!(ringers.all_spin_only(), at_start);
        assert!(bell.note_ringer(own.name()));
        let (got, waited, still) = publish_while_a_waiter_starts(bell, reader, round, || {
            let _ = w.write(&round.to_le_bytes(), 0, round).unwrap();
            ring_as_a_publisher(&ringers);
        });
        assert!(got, "round {round}: no sample");
        assert!(waited < Duration::from_secs(10), "round {round}: lost wake-up (woke after {waited:?})");
        assert_eq!(ringers.all_spin_only(), still, "round {round}: the publisher knows what the subscriber is");
        spin_only_at_start += u32::from(at_start);
        switched += u32::from(at_start && !still);
    }
    assert!(spin_only_at_start == 0 || switched > 0, "no round ended spin-only");
}

/// A subscriber's process that stopped being spin-only before it read a publisher's ring tells that publisher's
/// doorbell when it opens the ring: the publisher may have taken it for spin-only since it learned of it. The
/// doorbell's name follows the ring into its next generation, and a name that is not the writer's is not believed.
#[test]
fn a_ringer_noted_after_the_switch_is_told_at_once() {
    let own = Arc::new(Doorbell::create().unwrap());
    let bell = Doorbell::create().unwrap();
    if !bell.spin_only() {
        // The kernel has no expedited global barrier: nothing is ever spin-only, nothing to tell.
        return;
    }
    let remote = Arc::new(DoorbellRemote::open(bell.name()).unwrap());
    let ringers = Ringers::new(vec![remote], Some(Arc::clone(&own)));
    assert!(ringers.all_spin_only());
    // A wait that finds nothing ends spin-only; nobody was noted, so the publisher still takes the shortcut...
    assert!(
        !bell.wait_until(&mut PollState::new(), || false, Some(Instant::now() + Duration::from_millis(1))).unwrap()
    );
    assert!(!bell.spin_only());
    assert!(ringers.all_spin_only(), "not told yet");
    // ...until the subscriber's process opens its ring and notes its doorbell.
    let mut w = RingWriter::create(&cfg(8, 64), 1).unwrap();
    w.announce_doorbell(own.name());
    let reader = RingReader::open(w.segment_name()).unwrap();
    let name = reader.writer_doorbell().expect("named");
    assert!(bell.note_ringer(&name));
    assert!(!ringers.all_spin_only(), "told at once");
    // Noted before the switch: told by it.
    let other = Doorbell::create().unwrap();
    let ringers = Ringers::new(vec![Arc::new(DoorbellRemote::open(other.name()).unwrap())], Some(Arc::clone(&own)));
    assert!(other.note_ringer(&name));
    assert!(ringers.all_spin_only());
    assert!(
        !other.wait_until(&mut PollState::new(), || false, Some(Instant::now() + Duration::from_millis(1))).unwrap()
    );
    assert!(!ringers.all_spin_only(), "told by the switch");
    // The next generation names the doorbell too.
    let mut reader = reader;
    let _ = w.write(&[7u8; 4096], 0, 1).unwrap();
    let mut buf = Vec::new();
    assert!(matches!(reader.try_read_into(&mut buf), ReadOutcome::Sample(_)));
    assert_eq!(reader.generation(), 1);
    assert_eq!(reader.writer_doorbell().as_deref(), Some(own.name()));
    // A name whose pid is not the writer's is refused.
    let mut w = RingWriter::create(&cfg(8, 64), 2).unwrap();
    w.announce_doorbell(&format!("{SHM_DIR}/shoal_db_{}_feed", std::process::id() + 1));
    assert_eq!(RingReader::open(w.segment_name()).unwrap().writer_doorbell(), None);
}

/// Records the messages of tracing events.
struct Capture(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        self.0.lock().unwrap().push(format!("{} {}", event.metadata().level(), m.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn hugepage_fallback_warns_and_works() {
    let not_huge = temp_dir("nothuge");
    let missing = not_huge.join("missing");
    for (dir, reason) in [(&not_huge, "filesystem type"), (&missing, "does not exist")] {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let mut c = cfg(4, 100);
        c.huge_pages = crate::config::HugePages::On;
        c.huge_pages_path = dir.clone();
        let mut w = tracing::subscriber::with_default(Capture(logs.clone()), || RingWriter::create(&c, 5).unwrap());
        let logs = logs.lock().unwrap().clone();
        assert!(
            logs.iter().any(|l| l.starts_with("WARN") && l.contains("no hugetlbfs mounted at") && l.contains(reason)),
            "{logs:?}"
        );
        assert!(!w.uses_huge_pages());
        assert!(w.huge_pages_fallback().unwrap().contains(reason));
        assert!(w.segment_name().starts_with("/dev/shm/"));
        let mut r = RingReader::open(w.segment_name()).unwrap();
        let _ = w.write(b"still works", 0, 1).unwrap();
        let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!() };
        assert_eq!(bytes, b"still works");
    }
    // huge_pages = auto (the default): the same fallback, quietly, the reason kept for the tools.
    for (dir, reason) in [(&not_huge, "filesystem type"), (&missing, "does not exist")] {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let mut c = cfg(4, 100);
        c.huge_pages = crate::config::HugePages::Auto;
        c.huge_pages_path = dir.clone();
        let w = tracing::subscriber::with_default(Capture(logs.clone()), || RingWriter::create(&c, 5).unwrap());
        let logs = logs.lock().unwrap().clone();
        assert!(!logs.iter().any(|l| l.starts_with("WARN")), "{logs:?}");
        assert!(!w.uses_huge_pages());
        assert_eq!(w.page_size(), 4096, "normal pages");
        assert!(w.huge_pages_fallback().unwrap().contains(reason));
        assert!(w.segment_name().starts_with("/dev/shm/"));
    }
    assert_eq!(std::fs::read_dir(&not_huge).unwrap().count(), 0, "nothing created in the non-hugetlbfs dir");
    std::fs::remove_dir_all(&not_huge).unwrap();
}

/// Uses huge pages for real when a hugetlbfs with free pages is mounted at `$SHOAL_TEST_HUGE_PAGES` (`scripts/test`
/// sets one up as root and then requires huge pages here) or at /dev/hugepages (see toolchain notes §4). Without
/// one, checks the fallback instead.
#[test]
fn huge_pages_below_a_hugetlbfs_mount_point_fall_back_to_dev_shm() {
    // Readers open ring files only directly in a hugetlbfs mount point (`sys::open_peer_file`): a writer told to use
    // a directory below one falls back, saying why, rather than creating files nobody opens.
    let dir = temp_dir("huge_below");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("hugetlbfs") {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), b"skipped: needs root and hugetlbfs to mount one\n");
        let _ = std::fs::remove_dir(&dir);
        return;
    }
    let mounted = std::process::Command::new("mount").args(["-t", "hugetlbfs", "none"]).arg(&dir).status();
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _unmount = Unmount(dir.clone());
    assert!(mounted.is_ok_and(|s| s.success()), "mount -t hugetlbfs none {}", dir.display());
    let below = dir.join("below");
    std::fs::create_dir(&below).unwrap();
    let mut c = cfg(4, 1000);
    c.huge_pages = crate::config::HugePages::On;
    c.huge_pages_path = below;
    let w = RingWriter::create(&c, 5).unwrap();
    assert!(!w.uses_huge_pages());
    let reason = w.huge_pages_fallback().expect("a reason");
    assert!(reason.contains("not its mount point"), "{reason}");
    assert!(w.segment_name().starts_with("/dev/shm/"));
    assert!(RingReader::open(w.segment_name()).is_ok());
}

#[test]
fn hugepages_when_available() {
    hugepages_when_available_with(crate::config::HugePages::On);
    // The default: the same wherever the mount has free pages.
    hugepages_when_available_with(crate::config::HugePages::Auto);
}

fn hugepages_when_available_with(mode: crate::config::HugePages) {
    let required = std::env::var_os("SHOAL_TEST_HUGE_PAGES").map(PathBuf::from);
    let dir = required.clone().unwrap_or_else(|| PathBuf::from("/dev/hugepages"));
    let mut c = cfg(4, 1000);
    c.huge_pages = mode;
    c.huge_pages_path = dir.clone();
    let mut w = RingWriter::create(&c, 5).unwrap();
    let huge_ok = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("HugePages_Free:") && l.split_whitespace().nth(1) != Some("0"));
    if let Some(dir) = &required {
        assert!(w.uses_huge_pages(), "scripts/test mounted {} but: {:?}", dir.display(), w.huge_pages_fallback());
    }
    if w.uses_huge_pages() {
        assert!(w.segment_name().starts_with(&format!("{}/shoal_", dir.display())));
        let len = std::fs::metadata(w.segment_name()).unwrap().len();
        assert_eq!(len % (2 << 20), 0, "rounded to huge pages");
        assert_eq!(w.page_size(), 2 << 20);
    } else {
        assert_eq!(w.page_size(), 4096);
        assert!(w.huge_pages_fallback().is_some());
        assert!(w.segment_name().starts_with("/dev/shm/"));
        if segment::is_hugetlbfs(&dir) {
            assert!(!huge_ok, "huge pages available but not used: {:?}", w.huge_pages_fallback());
            let reason = w.huge_pages_fallback().unwrap();
            assert!(reason.contains("mmap ENOMEM") && reason.contains("nr_hugepages"), "{reason}");
        }
    }
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[7; 3000], 0, 1).unwrap(); // grows, also on hugetlbfs
    let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!() };
    assert_eq!(bytes, vec![7; 3000]);
}

const CHILD_ENV: &str = "SHOAL_SHM_RING_CHILD_SEGMENT";
const CHILD_SAMPLES: u64 = 2000;

/// Child half of `multi_process_reader` (runs only when spawned by it).
#[test]
#[ignore = "helper process for multi_process_reader"]
fn child_reader_process() {
    let Ok(segment) = std::env::var(CHILD_ENV) else { return };
    let mut r = RingReader::open(&segment).unwrap();
    let bell = Doorbell::create().unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {}", bell.name()).unwrap();
    out.flush().unwrap();
    let (mut got, mut bad) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut poll = PollState::new();
    while r.position() < CHILD_SAMPLES && Instant::now() < deadline {
        if !bell.wait_until(&mut poll, || r.has_data(), Some(deadline)).unwrap() {
            break;
        }
        match r.try_read_with(|v| v.payload().to_vec() == pattern(v.clock(), pattern_len(v.clock()))) {
            ReadOutcome::Sample(true) => got += 1,
            ReadOutcome::Sample(false) => bad += 1,
            _ => {}
        }
    }
    writeln!(out, "DONE got={got} drops={} bad={bad}", r.drops()).unwrap();
}

#[test]
fn multi_process_reader() {
    let mut w = RingWriter::create(&cfg(64, 128), 11).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "transport::shm_ring::tests::child_reader_process",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, w.segment_name())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let bell_name = lines
        .by_ref()
        .map_while(Result::ok)
        // libtest may print "test <name> ... " on the same line first.
        .find_map(|l| l.split_once("READY ").map(|(_, name)| name.trim().to_owned()))
        .expect("child ready");
    let remote = DoorbellRemote::open(&bell_name).unwrap();
    assert_ne!(remote.owner_pid(), std::process::id());
    for clock in 0..CHILD_SAMPLES {
        let _ = w.write(&pattern(clock, pattern_len(clock)), 0, clock).unwrap();
        remote.ring();
        if clock % 16 == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    // Read to the end (closing the pipe early would fail the child's last prints).
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let done = rest.iter().find_map(|l| l.split_once("DONE ").map(|(_, done)| done.to_owned())).expect("child result");
    assert!(child.wait().unwrap().success());
    let field = |k: &str| -> u64 {
        done.split_whitespace().find_map(|kv| kv.strip_prefix(k)).and_then(|v| v.parse().ok()).unwrap()
    };
    assert_eq!(field("bad="), 0, "{done}");
    assert_eq!(field("got=") + field("drops="), CHILD_SAMPLES, "{done}");
    assert!(field("got=") > CHILD_SAMPLES / 2, "{done}");
    assert!(!Path::new(&bell_name).exists(), "child's doorbell unlinked on exit");
}

#[test]
fn growth_trades_slots_for_size_within_the_budget() {
    // 256 slots of 4 KiB: a budget of 1 MiB.
    let mut w = RingWriter::create(&cfg(256, 4096), 9).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let _ = w.write(&[1; 8000], 0, 1).unwrap(); // 8 KiB slots: 128 of them
    assert_eq!((w.slot_size(), w.slot_count()), (8192, 128));
    let _ = w.write(&[2; 60_000], 0, 2).unwrap(); // 64 KiB slots: 16
    assert_eq!((w.slot_size(), w.slot_count()), (65536, 16));
    let _ = w.write(&[3; 3_000_000], 0, 3).unwrap(); // 4 MiB slots: still 16, the floor
    assert_eq!((w.slot_size(), w.slot_count()), (4 << 20, GROWN_MIN_SLOTS));
    for expected in 1..=3u8 {
        let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!("sample {expected}") };
        assert!(bytes.iter().all(|&b| b == expected));
    }
    assert_eq!(r.slot_count(), GROWN_MIN_SLOTS);
    assert_eq!(r.drops(), 0);
    // Sequence numbers keep working with the new mask.
    for c in 4..40u64 {
        let _ = w.write(&c.to_le_bytes(), 0, c).unwrap();
        let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!("sample {c}") };
        assert_eq!((bytes.as_slice(), info.clock), (c.to_le_bytes().as_slice(), c));
    }
}

// ----- flow control (reliable readers)

/// Writes clocks 0..n as fast as `w` may through a reliable reader of its ring, which takes them in another thread
/// (checking that none is skipped), sleeping `pause(got)` after its `got`-th sample and `idle` (or spinning) when
/// it finds none. Returns the writer's flow-control statistics.
fn write_through_reliable_reader(
    w: &mut RingWriter,
    n: u64,
    pause: fn(u64) -> Option<Duration>,
    idle: Option<Duration>,
) -> super::flow::FlowStats {
    w.set_flow_control(Some(Duration::from_secs(5)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    assert!(r.in_flow_control());
    assert_eq!(w.reliable_readers(), 1);
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        while got < n {
            match r.try_read_with(|v| u64::from_le_bytes(v.payload().read_array(0).expect("8 bytes"))) {
                ReadOutcome::Sample(clock) => {
                    assert_eq!(clock, got, "in order, none skipped");
                    got += 1;
                    if let Some(d) = pause(got) {
                        std::thread::sleep(d);
                    }
                }
                ReadOutcome::Empty => idle.map_or_else(std::hint::spin_loop, std::thread::sleep),
                other => panic!("unexpected {other:?}"),
            }
        }
        (r.drops(), r.evicted())
    });
    for clock in 0..n {
        let _ = w.write(&clock.to_le_bytes(), 0, clock).expect("write");
    }
    assert_eq!(reader.join().expect("reader thread"), (0, false));
    let s = w.flow_stats();
    assert_eq!(s.evicted(), 0, "{s:?}");
    s
}

#[test]
fn a_reliable_reader_loses_nothing_from_an_unpaced_reliable_writer() {
    let mut w = RingWriter::create(&cfg(8, 64), 71).expect("writer");
    // A slow moment every 1000 samples: the writer must wait.
    let s = write_through_reliable_reader(
        &mut w,
        20_000,
        |got| got.is_multiple_of(1000).then_some(Duration::from_millis(2)),
        None,
    );
    assert!(s.waits > 0, "the writer waited for the slow reader: {s:?}");
}

#[test]
fn a_writer_held_by_a_slow_reliable_reader_sleeps_once_per_quarter_ring_not_per_sample() {
    let mut w = RingWriter::create(&cfg(64, 64), 72).expect("writer");
    // The reader is slower than the writer's spin: the writer sleeps whenever the ring is full.
    const N: u64 = 1_000;
    let slow = Some(Duration::from_micros(50));
    let s = write_through_reliable_reader(&mut w, N, |_| Some(Duration::from_micros(50)), slow);
    // After the first 64 every write finds the ring full unless a wait made room for more than one sample: one wait
    // per 17 samples (a quarter ring and the one waited for), ~55; woken at each sample, it would be ~936.
    assert!((1..=N / 8).contains(&s.waits), "the writer waited {} times for {N} samples: {s:?}", s.waits);
}

/// A reliable reader publishes its cursor once per sixteenth of the ring (`flow::publish_every`), not per sample,
/// and at once when it finds the ring empty: the writer gets room in steps, and never waits for what was read.
#[test]
fn a_reliable_reader_publishes_its_cursor_per_sixteenth_of_the_ring_and_when_it_catches_up() {
    let mut w = RingWriter::create(&cfg(64, 64), 73).expect("writer");
    assert_eq!(super::flow::publish_every(64, 64), 4);
    w.set_flow_control(Some(Duration::from_secs(5)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    let read = |r: &mut RingReader, n: u64| {
        for _ in 0..n {
            assert!(matches!(r.try_read_with(|_| ()), ReadOutcome::Sample(())));
        }
    };
    // Fewer than a sixteenth read, then nothing more there: published, so a full ring after them needs no wait.
    for clock in 0..3 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    read(&mut r, 3);
    assert_eq!(r.try_read_with(|_| ()), ReadOutcome::Empty);
    for clock in 3..67 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    assert_eq!(w.flow_stats().waits, 0, "{:?}", w.flow_stats());
    // The ring is full (3..67). A sixteenth read: room for that many.
    read(&mut r, 4);
    for clock in 67..71 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    assert_eq!(w.flow_stats().waits, 0, "{:?}", w.flow_stats());
    // Three read: not published yet (the ring is not empty), so the next write waits, until the reader reads on.
    read(&mut r, 3);
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        while !matches!(r.try_read_with(|_| ()), ReadOutcome::Empty) {}
        r
    });
    let _ = w.write(b"x", 0, 71).expect("write");
    let r = reader.join().expect("reader thread");
    let s = w.flow_stats();
    assert_eq!((s.waits, s.evicted()), (1, 0), "{s:?}");
    assert!(r.in_flow_control() && r.drops() == 0);
}

#[test]
fn a_stalled_reliable_reader_blocks_the_writer_once_for_the_timeout_then_never_again() {
    let mut w = RingWriter::create(&cfg(8, 64), 72).expect("writer");
    w.set_flow_control(Some(Duration::from_millis(100)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    let start = Instant::now();
    for clock in 0..8 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    assert!(start.elapsed() < Duration::from_millis(50), "a free ring does not wait");
    let t = Instant::now();
    let _ = w.write(b"x", 0, 8).expect("write");
    let blocked = t.elapsed();
    assert!(blocked >= Duration::from_millis(100) && blocked < Duration::from_secs(2), "{blocked:?}");
    assert_eq!(w.flow_stats().evicted_stalled, 1);
    let t = Instant::now();
    for clock in 9..1000 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    assert!(t.elapsed() < Duration::from_millis(50), "an evicted reader never blocks again: {:?}", t.elapsed());
    assert_eq!(w.reliable_readers(), 0);
    // The reader reads on, best effort, and knows it was taken out.
    while !matches!(r.try_read_with(|_| ()), ReadOutcome::Empty) {}
    assert!(r.evicted() && !r.in_flow_control());
    assert!(r.drops() > 0);
}

/// A reliable reader process of [`spawn_reliable_reader`] (runs only when spawned, with `SHOAL_TEST_HOLD` set to a
/// reliable writer's segment): joins its flow control, then for each line `consume` on its stdin waits 200 ms,
/// reads everything there is and says how much; ends when its stdin closes (or it is killed).
#[test]
#[ignore = "helper process for the reliable-reader liveness tests"]
fn reliable_reader_helper() {
    let Ok(path) = std::env::var("SHOAL_TEST_HOLD") else { return };
    let mut r = RingReader::open_reliable(&path).expect("open reliable");
    assert!(r.in_flow_control());
    let mut out = std::io::stdout().lock();
    writeln!(out, "joined by pid {}", std::process::id()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {
        if line.trim() == "consume" {
            std::thread::sleep(Duration::from_millis(200));
            let mut n = 0u64;
            while let ReadOutcome::Sample(()) = r.try_read_with(|_| ()) {
                n += 1;
            }
            writeln!(out, "consumed {n} evicted {}", r.evicted()).unwrap();
            out.flush().unwrap();
        }
        line.clear();
    }
}

/// Starts [`reliable_reader_helper`] on `w`'s segment and waits until it is in flow control.
fn spawn_reliable_reader(
    w: &RingWriter,
    new_ns: bool,
) -> (std::process::Child, BufReader<std::process::ChildStdout>, u32) {
    spawn_helper("reliable_reader_helper", Path::new(w.segment_name()), new_ns, "joined by pid ")
}

/// Asks a [`reliable_reader_helper`] to consume (after 200 ms); [`await_consumed`] reads its answer.
fn ask_to_consume(child: &mut std::process::Child) {
    let stdin = child.stdin.as_mut().unwrap();
    stdin.write_all(b"consume\n").unwrap();
    stdin.flush().unwrap();
}

fn await_consumed(out: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_owned()
}

/// Stores `pid` in entry `index` of the reader table of the segment at `path`, as a reader in another pid
/// namespace has it there (its pid means another process here, or none).
fn set_entry_pid(path: &str, index: usize, pid: u32) {
    use std::os::unix::fs::FileExt;
    let at = offset_of!(SegmentHeader, readers) + index * size_of::<super::layout::ReaderSlot>() + 4;
    assert_eq!(offset_of!(super::layout::ReaderSlot, pid), 4);
    std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(&pid.to_le_bytes(), at as u64).unwrap();
}

#[test]
fn a_reliable_reader_whose_process_is_gone_is_taken_out_at_once() {
    let mut w = RingWriter::create(&cfg(4, 64), 73).expect("writer");
    w.set_flow_control(Some(Duration::from_secs(10)));
    let (mut child, _out, _) = spawn_reliable_reader(&w, false);
    assert_eq!(w.reliable_readers(), 1);
    let _stdin = child.stdin.take(); // open: the reader does not leave by itself
    child.kill().unwrap(); // SIGKILL: the kernel drops its entry lock
    child.wait().unwrap();
    let t = Instant::now();
    for clock in 0..100 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(w.flow_stats().evicted_dead, 1);
    assert_eq!(w.reliable_readers(), 0);
}

/// Liveness in flow control is the reader's lock on its entry, not `kill(pid, 0)`: two reliable readers, each in a
/// pid namespace of its own (pid 1 there). One entry keeps pid 1 (a live process here: `kill` would call its
/// reader alive after it was killed, and the writer would wait the whole timeout); the other's pid is set to one
/// that is dead here (`kill` would call a live reader gone). The writer waits for both while they live, and takes
/// both out at once when they are killed.
#[test]
fn reliable_readers_in_other_pid_namespaces_are_waited_for_while_alive_and_taken_out_once_killed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        let _ = writeln!(std::io::stderr(), "skipped: needs root and unshare(1) for a pid namespace");
        return;
    }
    let mut w = RingWriter::create(&cfg(4, 64), 77).expect("writer");
    w.set_flow_control(Some(Duration::from_secs(10)));
    let (mut a, mut a_out, a_pid) = spawn_reliable_reader(&w, true);
    let (mut b, mut b_out, b_pid) = spawn_reliable_reader(&w, true);
    assert_eq!((a_pid, b_pid), (1, 1), "each reader runs in a pid namespace of its own");
    assert_eq!(w.reliable_readers(), 2);
    let dead = dead_pid();
    set_entry_pid(w.segment_name(), 1, dead);
    assert!(!segment::pid_alive(dead) && segment::pid_alive(1));
    for clock in 0..4 {
        let _ = w.write(b"x", 0, clock).expect("write"); // fills the ring: no wait
    }
    assert_eq!(w.flow_stats().waits, 0);
    ask_to_consume(&mut a);
    ask_to_consume(&mut b);
    let t = Instant::now();
    let _ = w.write(b"x", 0, 4).expect("write");
    let waited = t.elapsed();
    for out in [&mut a_out, &mut b_out] {
        // 4, or 5 when the writer, freed by the first samples it consumed, wrote the fifth before it finished.
        let said = await_consumed(out);
        assert!(["consumed 4 evicted false", "consumed 5 evicted false"].contains(&said.as_str()), "{said}");
    }
    let s = w.flow_stats();
    assert_eq!((s.waits, s.evicted()), (1, 0), "both waited for, neither taken out: {s:?}");
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_secs(5), "{waited:?}");
    // Their stdin stays open (`Child::wait` would close it, and a reader seeing its end leaves flow control by
    // itself): only the kill takes them out.
    let _stdins = [a.stdin.take(), b.stdin.take()];
    for child in [&mut a, &mut b] {
        child.kill().unwrap(); // unshare --kill-child passes SIGKILL on to the reader
        child.wait().unwrap();
    }
    let t = Instant::now();
    for clock in 5..100 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    let s = w.flow_stats();
    assert!(t.elapsed() < Duration::from_secs(3), "taken out at once, not after the 10 s timeout: {:?}", t.elapsed());
    assert_eq!((s.evicted_dead, s.evicted_stalled), (2, 0), "{s:?}");
    assert_eq!(w.reliable_readers(), 0);
}

/// Right after a growth the writer waits in the new generation for a reliable reader that still reads the old one
/// (its entry was carried over, its lock is still in the old file): it is not taken out as gone, and once it follows
/// it consumes on without loss.
#[test]
fn a_reliable_reader_that_has_not_followed_a_growth_yet_is_waited_for() {
    let mut w = RingWriter::create(&cfg(4, 64), 78).expect("writer");
    w.set_flow_control(Some(Duration::from_secs(10)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    for clock in 0..4u64 {
        let _ = w.write(&clock.to_le_bytes(), 0, clock).expect("write");
    }
    // Grows at 4 (to 4 slots of 1 KiB): the carried-over entry starts at the new generation's first sample, so
    // 4..8 are written without waiting, and 8 waits for the reader, which has not even read 0..4 yet.
    let big = vec![0u8; 1000];
    for clock in 4..8 {
        let _ = w.write(&big, 0, clock).expect("write");
    }
    assert_eq!((w.generation(), w.slot_count(), w.flow_stats().waits), (1, 4, 0));
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 10 && Instant::now() < deadline {
            if let ReadOutcome::Sample(c) = r.try_read_with(|v| v.clock()) {
                got.push(c);
            }
        }
        (got, r.drops(), r.evicted(), r.generation())
    });
    let t = Instant::now();
    for clock in 8..10 {
        let _ = w.write(&big, 0, clock).expect("write"); // the reader, a ring behind, holds these back
    }
    let waited = t.elapsed();
    let (got, drops, evicted, generation) = reader.join().expect("reader thread");
    let s = w.flow_stats();
    assert_eq!(s.evicted(), 0, "{s:?}");
    assert!(s.waits >= 1 && waited >= Duration::from_millis(150), "the writer waited for it: {s:?} {waited:?}");
    assert_eq!((got, drops, evicted, generation), ((0..10).collect::<Vec<u64>>(), 0, false, 1));
}

#[test]
fn a_best_effort_writer_ignores_reliable_readers_and_reliable_readers_follow_growth() {
    let mut w = RingWriter::create(&cfg(4, 64), 74).expect("writer");
    let r = RingReader::open_reliable(w.segment_name()).expect("reader");
    assert!(!r.in_flow_control(), "the writer does not wait");
    for clock in 0..10 {
        let _ = w.write(b"x", 0, clock).expect("write");
    }
    drop(r);
    let mut w = RingWriter::create(&cfg(4, 64), 75).expect("writer");
    w.set_flow_control(Some(Duration::from_secs(5)));
    let mut r = RingReader::open_reliable(w.segment_name()).expect("reader");
    let mut got = Vec::new();
    for clock in 0..40u64 {
        let len = if clock < 20 { 8 } else { 1000 }; // grows at 20
        let mut payload = vec![0u8; len];
        payload[..8].copy_from_slice(&clock.to_le_bytes());
        let reader_turn = clock % 3 == 0;
        let _ = w.write(&payload, 0, clock).expect("write");
        if reader_turn {
            while let ReadOutcome::Sample(c) = r.try_read_with(|v| v.clock()) {
                got.push(c);
            }
        }
    }
    while let ReadOutcome::Sample(c) = r.try_read_with(|v| v.clock()) {
        got.push(c);
    }
    assert!(w.generation() > 0);
    assert_eq!(got, (0..40).collect::<Vec<u64>>());
    assert_eq!(r.drops(), 0);
    assert!(r.in_flow_control());
}

#[test]
fn geometry_for_predicts_the_geometry_a_ring_grows_to() {
    let c = cfg(4096, 256);
    for len in [64usize, 256, 1000, 1024, 65_536, 1 << 20, 4 << 20, 8_000_000] {
        let mut w = RingWriter::create(&c, 80).expect("writer");
        w.set_grown_min_slots(16);
        let _ = w.write(&vec![1u8; len], 0, 1).expect("write");
        assert_eq!(geometry_for(&c, 16, len), Some((w.slot_count(), w.slot_size())), "{len} bytes");
    }
    assert_eq!(geometry_for(&c, 16, 64), Some((4096, 256)));
    assert_eq!(geometry_for(&c, 16, 1024), Some((1024, 1024)));
    assert_eq!(geometry_for(&c, 16, 1 << 20), Some((16, 1 << 20)));
}

#[test]
fn a_segment_truncated_by_a_peer_ends_the_reader_without_sigbus() {
    let mut w = RingWriter::create(&cfg(16, 8192), 77).expect("create");
    let mut r = RingReader::open(w.segment_name()).expect("open");
    let _ = w.write(&pattern(1, 5000), 1, 1).expect("write");
    let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!("no sample") };
    assert_eq!(bytes, pattern(1, 5000));
    let _ = w.write(&pattern(2, 5000), 2, 2).expect("write");
    std::fs::OpenOptions::new().write(true).open(w.segment_name()).expect("open").set_len(0).expect("truncate");
    // The pending sample is lost: the reader sees the truncation, counts it and ends.
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert!(r.truncated());
    assert_eq!(r.drops(), 1);
    assert_eq!(read_one(&mut r), ReadOutcome::Ended);
    assert_eq!(r.drops(), 1, "counted once");
    // The writer's next write faults on its own mapping; the guard gives it zero pages.
    let _ = w.write(&pattern(3, 5000), 3, 3).expect("write after truncation");
    assert!(w.truncated());
    // A new reader refuses the truncated file before mapping it.
    assert!(matches!(RingReader::open(w.segment_name()), Err(RingOpenError::TooSmall { .. })));
}

/// The payload area (slot index) that the description of sample `seq` names, read from the segment file.
fn area_of_sample(w: &RingWriter, seq: u64) -> u32 {
    use std::os::unix::fs::FileExt;
    let slot = seq % u64::from(w.slot_count());
    let stride = layout::slot_stride(w.slot_size()).expect("stride") as u64;
    let at = SEGMENT_HEADER_SIZE as u64 + slot * stride + offset_of!(SlotHeader, chunk) as u64;
    let mut b = [0u8; 4];
    std::fs::File::open(w.segment_name()).expect("open segment").read_exact_at(&mut b, at).expect("read");
    u32::from_le_bytes(b)
}

/// Slots of 1 MiB: rings of 8 of them reuse warm areas (`layout::warm_reuse`).
const LARGE: usize = 1 << 20;

/// A reader of a ring with large slots publishes its cursor; with every expected reader tracked, the writer writes
/// each sample into the area of the one the reader consumed last (warm), and the reader still gets every sample
/// intact.
#[test]
fn large_slots_reuse_the_area_every_reader_consumed() {
    let mut w = RingWriter::create(&cfg(8, LARGE), 7).unwrap();
    w.set_expected_readers(1);
    let mut r = RingReader::open(w.segment_name()).unwrap();
    for clock in 0..40u64 {
        let data = pattern(clock, 1000 + clock as usize);
        let p = w.write(&data, 0, clock).unwrap();
        assert_eq!(area_of_sample(&w, p.seq), 0, "sample {clock} reuses the one warm area");
        let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!("sample {clock}") };
        assert_eq!((bytes, info.clock), (data, clock));
    }
    assert_eq!(r.drops(), 0);
}

/// A sample of `pick::TIMED_MIN_LEN` bytes or more takes the warm area until the cold one has been tried and
/// measured cheaper; the cold one is tried at the `FIRST_TRIES_EVERY`th write (every write is measured at first, after
/// warm ones only): both kinds are taken, and every sample arrives intact.
#[test]
fn large_samples_take_the_warm_area_and_try_the_cold_one() {
    let mut w = RingWriter::create(&cfg(8, LARGE), 7).unwrap();
    w.set_expected_readers(1);
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let len = super::pick::TIMED_MIN_LEN;
    let mut areas = Vec::new();
    for clock in 0..4 * u64::from(super::pick::MEASURE_EVERY) {
        let data = pattern(clock, len);
        let p = w.write(&data, 0, clock).unwrap();
        areas.push(area_of_sample(&w, p.seq));
        let ReadOutcome::Sample((bytes, info)) = read_one(&mut r) else { panic!("sample {clock}") };
        assert_eq!((bytes, info.clock), (data, clock));
    }
    let first_try = super::pick::FIRST_TRIES_EVERY as usize - 1;
    assert!(areas[..first_try].iter().all(|a| *a == areas[0]), "warm until tried: {areas:?}");
    assert_ne!(areas[first_try], areas[0], "the cold one tried: {areas:?}");
    assert_eq!(r.drops(), 0);
}

/// Without a tracked reader for every subscriber the publisher knows of, the ring is a plain ring: sample `s` in
/// area `s % slot_count`, and a reader that lags a few samples loses none of them.
#[test]
fn large_slots_stay_a_plain_ring_until_every_reader_is_tracked() {
    let mut w = RingWriter::create(&cfg(8, LARGE), 7).unwrap();
    w.set_expected_readers(2);
    let mut r = RingReader::open(w.segment_name()).unwrap();
    for clock in 0..20u64 {
        let p = w.write(&pattern(clock, 100), 0, clock).unwrap();
        assert_eq!(u64::from(area_of_sample(&w, p.seq)), p.seq % 8, "plain ring");
        let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!("sample {clock}") };
        assert_eq!(bytes, pattern(clock, 100));
    }
    // Once the reader that is not tracked leaves (the publisher expects one), reuse starts.
    w.set_expected_readers(1);
    for clock in 20..24u64 {
        let _ = w.write(&pattern(clock, 100), 0, clock).unwrap();
        let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!("sample {clock}") };
        assert_eq!(bytes, pattern(clock, 100));
    }
    let a = area_of_sample(&w, 22);
    assert_eq!(area_of_sample(&w, 23), a, "warm reuse once every expected reader is tracked");
    // A reader dropped frees its entry: no reader known, nothing more reused.
    drop(r);
    let _ = w.write(&pattern(24, 100), 0, 24).unwrap();
    let _ = w.write(&pattern(25, 100), 0, 25).unwrap();
    assert_ne!(area_of_sample(&w, 25), area_of_sample(&w, 24));
}

/// A ring that stays in the last-level cache (here 16 slots of 64 KiB) is a plain ring even with every reader known:
/// its readers publish no cursor.
#[test]
fn rings_that_fit_the_cache_stay_plain() {
    assert!(!layout::warm_reuse(16, 64 << 10) && !layout::warm_reuse(1024, 4 << 10));
    assert!(layout::warm_reuse(16, 1 << 20) && layout::warm_reuse(8, 1 << 20) && layout::warm_reuse(128, 64 << 10));
    let mut w = RingWriter::create(&cfg(16, 64 << 10), 7).unwrap();
    w.set_expected_readers(1);
    let mut r = RingReader::open(w.segment_name()).unwrap();
    for clock in 0..40u64 {
        let p = w.write(&pattern(clock, 100), 0, clock).unwrap();
        assert_eq!(u64::from(area_of_sample(&w, p.seq)), p.seq % 16, "plain ring");
        let ReadOutcome::Sample((bytes, _)) = read_one(&mut r) else { panic!("sample {clock}") };
        assert_eq!(bytes, pattern(clock, 100));
    }
}

/// A tracked reader that lags keeps what it has not read: areas are reused only behind the slowest reader, and a
/// new reader that rewinds stops at a sample whose area was reused.
#[test]
fn a_lagging_tracked_reader_loses_nothing_the_ring_holds() {
    let mut w = RingWriter::create(&cfg(8, LARGE), 7).unwrap();
    w.set_expected_readers(2);
    let mut fast = RingReader::open(w.segment_name()).unwrap();
    let mut slow = RingReader::open(w.segment_name()).unwrap();
    for round in 0..5u64 {
        for k in 0..6u64 {
            let clock = round * 6 + k;
            let _ = w.write(&pattern(clock, 500), 0, clock).unwrap();
            let ReadOutcome::Sample((bytes, _)) = read_one(&mut fast) else { panic!("fast {clock}") };
            assert_eq!(bytes, pattern(clock, 500));
        }
        for k in 0..6u64 {
            let clock = round * 6 + k;
            let ReadOutcome::Sample((bytes, info)) = read_one(&mut slow) else { panic!("slow {clock}") };
            assert_eq!((bytes, info.clock), (pattern(clock, 500), clock));
        }
    }
    assert_eq!((fast.drops(), slow.drops()), (0, 0));
    // Both have read everything: the last samples share warm areas, so a newcomer's rewind stops early.
    w.set_expected_readers(2);
    let mut late = RingReader::open(w.segment_name()).unwrap();
    let rewound = late.rewind_to_time(i64::MIN);
    assert!(rewound < 7, "rewound over reused areas: {rewound}");
    for _ in 0..rewound {
        assert!(matches!(read_one(&mut late), ReadOutcome::Sample(_)));
    }
    assert_eq!(late.drops(), 0);
}

/// Threads writing and reading large samples at full speed with warm reuse: a reader never gets a sample whose area
/// was reused or overwritten while it read (every byte checked), and what it misses is counted.
#[test]
fn warm_reuse_under_contention_never_delivers_torn_data() {
    contend_for_reused_areas(4000, 20_000);
}

/// The same with samples large enough for the writer to choose between the warm and the cold area (`pick.rs`):
/// nothing torn is delivered either way.
#[test]
fn warm_or_cold_areas_under_contention_never_deliver_torn_data() {
    contend_for_reused_areas(
        super::pick::TIMED_MIN_LEN,
        3 * u64::from(super::pick::MEASURE_EVERY * super::pick::EXPLORE_EVERY),
    );
}

/// Two reader threads read everything one writer writes at full speed into a ring of 8 slots of 1 MiB (warm
/// reuse), samples of `base` to `base + 3000` bytes.
fn contend_for_reused_areas(base: usize, n: u64) {
    let mut w = RingWriter::create(&cfg(8, LARGE), 9).unwrap();
    w.set_expected_readers(2);
    let name = w.segment_name().to_owned();
    let (len, last_clock) = (move |clock: u64| base + (clock as usize % 3000), n - 1);
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut r = RingReader::open(&name).unwrap();
            std::thread::spawn(move || {
                let (mut got, mut last) = (0u64, None::<u64>);
                loop {
                    match r.try_read_with(|v| (v.payload().to_vec(), v.info())) {
                        ReadOutcome::Sample((bytes, info)) => {
                            assert_eq!(bytes, pattern(info.clock, len(info.clock)));
                            assert!(last.is_none_or(|l| info.clock > l), "in order");
                            last = Some(info.clock);
                            got += 1;
                            if info.clock == last_clock {
                                break;
                            }
                        }
                        ReadOutcome::Torn | ReadOutcome::Empty => std::hint::spin_loop(),
                        ReadOutcome::Ended => panic!("ended"),
                    }
                }
                (got, r.drops())
            })
        })
        .collect();
    for clock in 0..n {
        let _ = w.write(&pattern(clock, len(clock)), 0, clock).unwrap();
        if clock % 64 == 0 {
            std::thread::yield_now();
        }
    }
    for t in readers {
        let (got, drops) = t.join().expect("reader");
        assert!(got > 0);
        assert_eq!(got + drops, n, "every sample read or counted");
    }
}

/// `keep_newest(n)` skips to the newest `n` samples whatever how far behind the reader is (a few, more than a ring),
/// and leaves a reader less than `n` behind alone (learnt from the slot `n` ahead, not the write sequence).
#[test]
fn keep_newest_keeps_the_newest_n() {
    let mut w = RingWriter::create(&cfg(64, 64), 3).unwrap();
    let mut r = RingReader::open(w.segment_name()).unwrap();
    let mut clock = 0u64;
    let mut write = |w: &mut RingWriter, k: u64| {
        for _ in 0..k {
            let _ = w.write(&pattern(clock, 16), 0, clock).unwrap();
            clock += 1;
        }
    };
    let read_all = |r: &mut RingReader| {
        let mut clocks = Vec::new();
        while let ReadOutcome::Sample((_, info)) = read_one(r) {
            clocks.push(info.clock);
        }
        clocks
    };
    write(&mut w, 10);
    r.keep_newest(3);
    assert_eq!(read_all(&mut r), vec![7, 8, 9]);
    assert_eq!(r.drops(), 7);
    // Two behind, keeping three: nothing skipped.
    write(&mut w, 2);
    r.keep_newest(3);
    assert_eq!(read_all(&mut r), vec![10, 11]);
    // Exactly n behind: nothing skipped; n + 1 behind: one skipped.
    write(&mut w, 3);
    r.keep_newest(3);
    assert_eq!(read_all(&mut r), vec![12, 13, 14]);
    write(&mut w, 4);
    r.keep_newest(3);
    assert_eq!(read_all(&mut r), vec![16, 17, 18]);
    // Lapped by more than the ring: the newest three.
    write(&mut w, 200);
    r.keep_newest(3);
    assert_eq!(read_all(&mut r), vec![216, 217, 218]);
    assert_eq!(r.drops(), 7 + 1 + 197);
}
