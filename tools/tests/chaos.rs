//! Chaos: publishers and subscribers killed with SIGKILL at random points under load, over each transport between
//! shoal processes (the native ring, eCAL's shared-memory layer, eCAL's UDP layer).
//!
//! Per layer, two long-lived subscribers watch a topic while a publisher and a third subscriber are killed and
//! restarted, one of them at a random moment of every iteration. At the end a last publisher sends a known number
//! of messages and everyone reports. What must hold:
//! - no survivor hangs: the long-lived subscribers receive the last publisher's messages and report within a
//!   registration timeout of its end, and no send of the last publisher waited that long;
//! - nothing torn, duplicated or out of order is delivered (every payload is self-checking, `shoal-peer`);
//! - `/dev/shm` holds nothing of a killed process once a node has started after it (stale cleanup).
//!
//! `SHOAL_CHAOS_ITERATIONS` sets the iterations per layer (default 12 here; `scripts/chaos` runs 1000).
//! `SHOAL_CHAOS_SEED` replays a run (the seed is printed).

mod support;

use std::time::{Duration, Instant};

use support::{Proc, shm_files_of, shoal_peer, topic, write_ini};

const T: Duration = Duration::from_secs(20);
/// eCAL's default registration timeout: nothing may block longer.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A small xorshift generator: the run is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn iterations() -> u64 {
    std::env::var("SHOAL_CHAOS_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(12)
}

fn seed() -> u64 {
    let s = std::env::var("SHOAL_CHAOS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    s.max(1)
}

struct Layer {
    name: &'static str,
    ini: &'static str,
}

const LAYERS: [Layer; 3] = [
    Layer { name: "ring", ini: "[publisher]\nuse_udp_mc = false\n[subscriber]\nudp_mc_rec_enabled = false\n" },
    Layer {
        name: "ecal_shm",
        ini: "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_udp_mc = false\n\
              [subscriber]\nudp_mc_rec_enabled = false\n",
    },
    Layer {
        name: "udp",
        ini: "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n",
    },
];

fn publisher(t: &str, ini: &str, count: u64, size: usize) -> Proc {
    let (count, size) = (count.to_string(), size.to_string());
    let args = ["pub", "--topic", t, "--count", &count, "--rate", "5000", "--size", &size, "--wait-subs", "0"];
    shoal_peer("chaos pub", &args, Some(ini))
}

fn subscriber(name: &str, t: &str, ini: &str, idle_ms: u64) -> Proc {
    let idle = idle_ms.to_string();
    shoal_peer(name, &["sub", "--topic", t, "--count", "100000000", "--idle-ms", &idle], Some(ini))
}

/// Every thread's stack of a hanging process, when gdb is there to tell.
fn stacks(pid: u32) -> String {
    let out = std::process::Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("(gdb not available: {e})"),
    }
}

fn ecal_memfiles() -> usize {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("ecal_")).count())
        .unwrap_or(0)
}

fn run(layer: &Layer) {
    let seed = seed();
    let mut rng = Rng(seed);
    let n = iterations();
    eprintln!("chaos {}: {n} iterations, SHOAL_CHAOS_SEED={seed}", layer.name);
    let ini = write_ini(&format!("chaos_{}", layer.name), layer.ini);
    let t = topic(&format!("chaos_{}", layer.name));
    // Survivors: they outlive every kill; their idle limit is the registration timeout.
    let idle_ms = REGISTRATION_TIMEOUT.as_millis() as u64;
    let survivors: Vec<Proc> = (0..2).map(|i| subscriber(&format!("survivor {i}"), &t, &ini, idle_ms)).collect();
    for s in &survivors {
        s.expect("ready", T);
    }
    let sizes = [64usize, 1000, 20_000, 300_000];
    let size = |rng: &mut Rng| sizes[rng.below(sizes.len() as u64) as usize];
    let mut publ = publisher(&t, &ini, 0, size(&mut rng));
    let mut victim = subscriber("victim", &t, &ini, idle_ms);
    let mut killed = Vec::new();
    let started = Instant::now();
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(20 + rng.below(200)));
        if rng.below(2) == 0 {
            killed.push(publ.pid());
            publ.sigkill();
            publ = publisher(&t, &ini, 0, size(&mut rng));
        } else {
            killed.push(victim.pid());
            victim.sigkill();
            victim = subscriber("victim", &t, &ini, idle_ms);
        }
    }
    killed.push(publ.pid());
    publ.sigkill();
    killed.push(victim.pid());
    victim.sigkill();
    eprintln!("chaos {}: {} kills in {:.1} s", layer.name, killed.len(), started.elapsed().as_secs_f64());

    // The last publisher: its messages reach both survivors, and none of its sends waited on a dead reader.
    let mut last = publisher(&t, &ini, 2000, 256);
    let done = last.expect("done", Duration::from_secs(60));
    let gap = Duration::from_micros(done["max_send_gap_us"].as_u64().expect("gap"));
    assert!(gap < REGISTRATION_TIMEOUT, "a send of the last publisher blocked for {gap:?}: {done}");
    for mut s in survivors {
        // A survivor reports once nothing arrived for its idle limit: after the last publisher's end.
        let Some(summary) = s.wait_for(REGISTRATION_TIMEOUT + Duration::from_secs(20), |v| v["event"] == "summary")
        else {
            panic!("{} did not report: it hangs\n{}\nits threads:\n{}", s.name(), s.report(), stacks(s.pid()));
        };
        eprintln!("chaos {}: {} {summary}", layer.name, s.name());
        assert_eq!(summary["torn"], 0, "torn messages delivered: {summary}");
        assert_eq!(summary["out_of_order"], 0, "duplicated or reordered messages delivered: {summary}");
        assert!(summary["received"].as_u64().unwrap_or(0) >= 1, "the survivor received nothing: {summary}");
        s.wait_success(T);
    }
    last.wait_success(T);

    // A node started after the kills removes what the killed processes left in /dev/shm.
    let mut cleaner = shoal_peer(
        "cleaner",
        &["sub", "--topic", &topic("chaos_cleaner"), "--count", "1", "--idle-ms", "100", "--first-ms", "100"],
        None,
    );
    cleaner.wait_success(T);
    let left: Vec<String> = killed.iter().flat_map(|&pid| shm_files_of(pid)).collect();
    assert!(left.is_empty(), "files of killed processes remain: {left:?}");
}

#[test]
fn sigkill_chaos_over_the_native_ring() {
    run(&LAYERS[0]);
}

#[test]
fn sigkill_chaos_over_ecal_shared_memory() {
    let before = ecal_memfiles();
    run(&LAYERS[1]);
    // Killed publishers' eCAL memfiles cannot carry their pid (eCAL's names are random): report what is left.
    let after = ecal_memfiles();
    eprintln!("chaos ecal_shm: eCAL memfiles in /dev/shm before {before}, after {after}");
}

#[test]
fn sigkill_chaos_over_udp() {
    run(&LAYERS[2]);
}
