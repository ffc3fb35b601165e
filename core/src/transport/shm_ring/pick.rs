//! Which free payload area a large write takes (warm reuse, `writer.rs`): the one freed last (warm, still in the
//! caches) or the one freed longest ago (cold).
//!
//! Which is faster depends on where the reader runs, and nothing in the process can ask. With writer and reader
//! under one last-level cache the warm area wins (1 MiB ping-pong 47-52 us against 93-110 through cold areas, same
//! run); with them on different dies of the host (64 B ping-pong 340 ns instead of 95) the cold one does (205 against
//! 470 us), presumably because every line of an area the reader has just read must first be taken back from the
//! reader's die before it is written again. So the writer measures: the time from taking an area to publishing it
//! (its copy in), plus the time its readers spent reading the sample (their copy out, which they report in their
//! reader-table entry, [`pack`]), per KiB, in a running average per kind of area. It takes the kind with the lower
//! average (the cold kind only when clearly lower, [`COLD_BIAS`] and [`COLD_MIN_SAVING`]), and every
//! [`EXPLORE_EVERY`]th measured write the other kind (every [`FIRST_TRIES_EVERY`]th while it has fewer than [`LEARN`]
//! measurements), so that both averages follow the host. Measured at 1 MiB: under one cache warm 46-55 ns/KiB,
//! cold 110-130; across dies warm 390-1250, cold 105-250. The writer's own time alone decides wrongly under one
//! cache: there its copy into a warm 4 MiB area is slower than into a cold one (186-389 against 71-76 ns/KiB)
//! while the round trip is faster, because the reader's copy out of a cold-written area costs more than the
//! difference.
//!
//! Only writes of at least [`TIMED_MIN_LEN`] bytes are chosen, smaller ones take the warm area. Until each kind has
//! [`LEARN`] measurements every such write is measured and the two kinds alternate; from then on only every
//! [`MEASURE_EVERY`]th, and only such a write tries the other kind: four clock reads are nothing against a 64 KiB
//! copy, but a zero-copy write of 4 MiB that touches few bytes costs about 200 ns, and its median stays that of
//! writes that read no clock. The writer marks a measured write in its slot's description (`SlotHeader::flags`,
//! [`FLAG_TIMED`]); its readers time their read of that sample only.

use super::layout::MAX_RELIABLE_READERS;

/// Writes of at least this many bytes have their area chosen by [`AreaPick`]; some of them (and their reads) are timed.
pub(super) const TIMED_MIN_LEN: usize = 64 << 10;

/// Once both kinds are known, every this many large writes is timed (by the writer and by its readers).
pub(super) const MEASURE_EVERY: u32 = 16;

/// Measurements of each kind before the writer stops timing every large write.
pub(super) const LEARN: u32 = 4;

/// `SlotHeader::flags` bit: the sample's write was timed; its readers time their read and report it.
pub(super) const FLAG_TIMED: u32 = 1;

/// Every this many measured writes (every 128th large write once both kinds are learnt), the kind with the higher
/// average is taken once (few enough not to show in the 99th percentile of a stream's latency).
pub(super) const EXPLORE_EVERY: u32 = 8;

/// Until the other kind has [`LEARN`] measurements, it is tried every this many measured writes (a stream's first
/// writes then find the faster kind, instead of waiting for the first [`EXPLORE_EVERY`]th).
pub(super) const FIRST_TRIES_EVERY: u32 = 2;

/// Recent writes remembered for the readers' reports (a report older than this many writes is ignored).
const PICKS: usize = 64;

/// Weight of a new measurement of the kind taken in a running average.
const NEW_WEIGHT: f64 = 1.0 / 8.0;
/// Weight of a measurement of the kind tried every [`EXPLORE_EVERY`]th measured write: rare, so each counts more (the
/// average of a kind that became the cheaper one catches up within two or three tries).
const EXPLORED_WEIGHT: f64 = 1.0 / 2.0;

/// The cold kind is taken only while its average is below this share of the warm one's. Without it, one run in
/// three of 1 MiB block ping-pong under one cache took 198 us (as the ring through cold areas does) against 52-59 in
/// the others. A guess at the cause, not checked: a cold write also evicts what else the caches hold (the reply
/// ring, for one), which its own measurement does not see, so two rings that both went cold make each other's warm
/// tries look dearer than they are. Across dies the cold kind measures 0.2-0.65 of the warm one's cost at 1 MiB and
/// about 0.75 at 8 MiB (warm 300-410 ns/KiB, cold 220-270; round trip 2.55 ms warm against 1.33 through the deep
/// ring), so the margin is small.
const COLD_BIAS: f64 = 0.85;

/// ... and only while it saves at least this many ns per KiB. A write that copies its payload costs 40 ns/KiB or
/// more (46-55 for a warm 1 MiB copy under one cache, the cheapest measured), and where the cold kind wins it saves
/// 100 or more; a zero-copy write of 1 MiB that touches a few bytes costs under 1 ns/KiB of either kind, the two
/// measure alike and a relative margin alone let the cold kind be taken now and then (a zero-copy 1 MiB ping-pong
/// across dies: 786-901 ns one way with the margin alone, 681-686 ns with this saving required as well).
const COLD_MIN_SAVING: f64 = 4.0;

/// A single measurement counts at most this many times the running average (a reader or writer preempted during
/// its copy measures the scheduler, not the memory).
const OUTLIER_CAP: f64 = 4.0;

/// The kind of free area a write takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Temp {
    /// Freed last (the front of the free list).
    Warm,
    /// Freed longest ago (the back).
    Cold,
}

impl Temp {
    fn index(self) -> usize {
        match self {
            Temp::Warm => 0,
            Temp::Cold => 1,
        }
    }

    fn other(self) -> Temp {
        match self {
            Temp::Warm => Temp::Cold,
            Temp::Cold => Temp::Warm,
        }
    }
}

/// A reader's report of the last sample it read: the low 32 bits of its sequence number and the nanoseconds its
/// read took (at most `u32::MAX`), in one word so that the writer never sees one sample's time with another's number.
pub(super) fn pack(seq: u64, read_ns: u64) -> u64 {
    (u64::from(seq as u32) << 32) | read_ns.min(u64::from(u32::MAX))
}

fn unpack(report: u64) -> (u32, u64) {
    ((report >> 32) as u32, report & u64::from(u32::MAX))
}

#[derive(Clone, Copy, Debug)]
struct Pick {
    /// `u64::MAX`: none.
    seq: u64,
    temp: Temp,
    /// Taken as the other kind (every [`EXPLORE_EVERY`]th measured write).
    explored: bool,
    write_ns: u64,
    len: usize,
}

/// The writer's measurements and choice (see the module doc).
#[derive(Debug)]
pub(super) struct AreaPick {
    /// Per kind ([`Temp::index`]): running average of write + read nanoseconds per KiB; `None` until measured.
    cost: [Option<f64>; 2],
    /// The last writes, at `seq % PICKS`.
    picks: [Pick; PICKS],
    /// Per reader-table entry, the last report taken into account.
    seen: [u64; MAX_RELIABLE_READERS],
    /// Measured chosen writes so far.
    measured: u32,
    /// Chosen writes so far.
    writes: u32,
    /// Per kind, the measurements taken into account (saturating).
    samples: [u32; 2],
}

impl Default for AreaPick {
    fn default() -> Self {
        AreaPick {
            cost: [None; 2],
            picks: [Pick { seq: u64::MAX, temp: Temp::Warm, explored: false, write_ns: 0, len: 0 }; PICKS],
            seen: [0; MAX_RELIABLE_READERS],
            measured: 0,
            writes: 0,
            samples: [0; 2],
        }
    }
}

impl AreaPick {
    /// Whether the next large write is timed: every one until both kinds have [`LEARN`] measurements, then every
    /// [`MEASURE_EVERY`]th.
    pub(super) fn measure_next(&mut self) -> bool {
        self.writes = self.writes.wrapping_add(1);
        self.samples.iter().any(|n| *n < LEARN) || self.writes.is_multiple_of(MEASURE_EVERY)
    }

    /// The kind of area the next large write takes (`measured`: one that is timed, [`measure_next`]), and whether
    /// it is the other kind, tried.
    ///
    /// [`measure_next`]: Self::measure_next
    pub(super) fn choose(&mut self, measured: bool) -> (Temp, bool) {
        let better = match self.cost {
            [Some(warm), Some(cold)] if cold < COLD_BIAS * warm && warm - cold >= COLD_MIN_SAVING => Temp::Cold,
            _ => Temp::Warm,
        };
        if !measured {
            return (better, false);
        }
        self.measured = self.measured.wrapping_add(1);
        let other_learning = self.samples[better.other().index()] < LEARN;
        if self.measured.is_multiple_of(EXPLORE_EVERY)
            || (other_learning && self.measured.is_multiple_of(FIRST_TRIES_EVERY))
        {
            (better.other(), true)
        } else {
            (better, false)
        }
    }

    /// Sample `seq` (`len` bytes) was written into an area of kind `temp` (`explored`: tried as the other kind),
    /// `write_ns` after the area was taken.
    pub(super) fn written(&mut self, seq: u64, (temp, explored): (Temp, bool), write_ns: u64, len: usize) {
        self.picks[seq as usize % PICKS] = Pick { seq, temp, explored, write_ns, len };
    }

    /// The report in reader-table entry `entry` ([`pack`]): taken into account once, if it names one of the last
    /// writes.
    pub(super) fn reported(&mut self, entry: usize, report: u64) {
        let Some(seen) = self.seen.get_mut(entry) else { return };
        if *seen == report {
            return;
        }
        *seen = report;
        let (seq, read_ns) = unpack(report);
        let p = self.picks[seq as usize % PICKS];
        if p.seq == u64::MAX || p.seq as u32 != seq || p.len == 0 {
            return;
        }
        let sample = (p.write_ns + read_ns) as f64 * 1024.0 / p.len as f64;
        let weight = if p.explored { EXPLORED_WEIGHT } else { NEW_WEIGHT };
        self.samples[p.temp.index()] = self.samples[p.temp.index()].saturating_add(1);
        let cost = &mut self.cost[p.temp.index()];
        *cost = Some(match *cost {
            None => sample,
            Some(avg) => avg + (sample.min(avg * OUTLIER_CAP) - avg) * weight,
        });
    }

    /// The running averages (warm, cold), ns per KiB.
    #[cfg(test)]
    pub(super) fn costs(&self) -> [Option<f64>; 2] {
        self.cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one write and one reader's report of it.
    fn round(p: &mut AreaPick, seq: u64, pick: (Temp, bool), write_ns: u64, read_ns: u64) {
        p.written(seq, pick, write_ns, 1 << 20);
        p.reported(0, pack(seq, read_ns));
    }

    #[test]
    fn every_write_is_timed_and_the_kinds_alternate_until_both_are_known_then_one_in_sixteen() {
        let mut p = AreaPick::default();
        let mut seq = 0;
        // Nothing reported yet: every write timed, every second one tries the cold kind.
        for i in 1..=8u32 {
            assert!(p.measure_next());
            let want = if i.is_multiple_of(FIRST_TRIES_EVERY) { (Temp::Cold, true) } else { (Temp::Warm, false) };
            assert_eq!(p.choose(true), want, "write {i}");
        }
        // Each kind measured LEARN times (under one cache: warm writes cost more, warm reads much less).
        for _ in 0..LEARN {
            round(&mut p, seq, (Temp::Warm, false), 200_000, 50_000);
            round(&mut p, seq + 1, (Temp::Cold, true), 75_000, 300_000);
            seq += 2;
        }
        let timed = (0..4 * MEASURE_EVERY).filter(|_| p.measure_next()).count();
        assert_eq!(timed, 4);
        let [w, c] = p.costs();
        assert!(w.unwrap() < c.unwrap(), "{:?}", p.costs());
        assert_eq!(p.choose(false), (Temp::Warm, false));
    }

    #[test]
    fn warm_until_cold_measures_clearly_cheaper_and_the_other_kind_is_tried_now_and_then() {
        let mut p = AreaPick::default();
        let mut seq = 0;
        for _ in 0..20 {
            round(&mut p, seq, (Temp::Warm, false), 200_000, 50_000);
            round(&mut p, seq + 1, (Temp::Cold, true), 75_000, 300_000);
            seq += 2;
        }
        assert_eq!(p.choose(false), (Temp::Warm, false));
        // Across dies: warm round trips cost three times the cold ones. The warm average rises far enough past the
        // cold one (COLD_BIAS) within sixteen writes; the cold one, measured only when tried, catches up within
        // three tries.
        for _ in 0..16 {
            round(&mut p, seq, (Temp::Warm, false), 300_000, 300_000);
            seq += 1;
        }
        assert_eq!(p.choose(false).0, Temp::Cold, "{:?}", p.costs());
        for _ in 0..3 {
            round(&mut p, seq, (Temp::Cold, true), 100_000, 100_000);
            seq += 1;
        }
        let cold = p.costs()[1].unwrap();
        assert!(cold < 1.2 * 200_000.0 * 1024.0 / f64::from(1 << 20), "{cold}");
        // From here on cold, the warm kind tried on every EXPLORE_EVERYth measured write.
        p.measured = 0;
        let n = MEASURE_EVERY * 2 * EXPLORE_EVERY;
        let mut counts = [0; 2];
        for _ in 0..n {
            let measured = p.measure_next();
            counts[p.choose(measured).0.index()] += 1;
        }
        assert_eq!(counts, [2, n - 2], "{:?}", p.costs());
    }

    #[test]
    fn zero_copy_writes_stay_warm_when_the_cold_kind_is_cheaper_by_nothing_that_counts() {
        let mut p = AreaPick::default();
        let mut seq = 0;
        // 1 MiB written in place, a few bytes touched: warm 0.6 ns/KiB, cold 0.3 (half, but 300 ns a write).
        for _ in 0..20 {
            round(&mut p, seq, (Temp::Warm, false), 400, 200);
            round(&mut p, seq + 1, (Temp::Cold, true), 200, 100);
            seq += 2;
        }
        let [w, c] = p.costs();
        assert!(c.unwrap() < COLD_BIAS * w.unwrap(), "{:?}", p.costs());
        assert_eq!(p.choose(false), (Temp::Warm, false));
        // A copy's saving of the same share is taken (once the averages have climbed, OUTLIER_CAP at a time).
        for _ in 0..40 {
            round(&mut p, seq, (Temp::Warm, false), 400_000, 200_000);
            round(&mut p, seq + 1, (Temp::Cold, true), 200_000, 100_000);
            seq += 2;
        }
        assert_eq!(p.choose(false), (Temp::Cold, false));
    }

    #[test]
    fn a_report_counts_once_and_only_for_a_write_it_names() {
        let mut p = AreaPick::default();
        p.written(5, (Temp::Cold, false), 1024, 1 << 20);
        p.reported(3, pack(5, 1024));
        assert_eq!(p.costs(), [None, Some(2.0)]);
        // The same report again, a report of a write not remembered, one from an entry past the table: ignored.
        p.reported(3, pack(5, 1024));
        p.reported(3, pack(5 + PICKS as u64, 9_000_000));
        p.reported(MAX_RELIABLE_READERS, pack(5, 1));
        assert_eq!(p.costs(), [None, Some(2.0)]);
        // A preempted read counts at most OUTLIER_CAP times the average.
        p.reported(4, pack(5, u64::MAX));
        let c = p.costs()[1].unwrap();
        assert!((c - (2.0 + (8.0 - 2.0) * NEW_WEIGHT)).abs() < 1e-9, "{c}");
    }
}
