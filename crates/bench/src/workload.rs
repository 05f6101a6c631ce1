//! What a benchmark does, as data: the built-in workloads, the sweeps over request size, queue
//! depth and clients that expand them into cases, and the operations each issuing slot makes
//! (pure: a seeded generator, no I/O), so that `raidkit plan` can predict the same cases that
//! `raidkit bench` measures.

use std::fmt;
use std::time::Duration;

use diskmodel::SimRng;
use serde::{Deserialize, Serialize};

/// Smallest request size a workload takes (one sector).
pub const MIN_SIZE: u64 = 512;
/// Largest request size a workload takes.
pub const MAX_SIZE: u64 = 1 << 20;
/// Largest queue depth per client and largest number of clients.
pub const MAX_QD: u32 = 64;
pub const MAX_CLIENTS: u32 = 64;
/// Most requests in flight over all clients of one case (one thread each).
pub const MAX_IN_FLIGHT: u32 = 1024;
/// Most bytes of request buffers over all slots of one case.
pub const MAX_BUFFER_BYTES: u64 = 256 << 20;

/// Where the requests of a workload go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Each client streams through its own share of the working set, wrapping at its end.
    Sequential,
    /// Uniformly over the working set, aligned to the request size.
    Random,
}

/// A built-in workload: what kind of requests, before the sweep's size, depth and clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Kind {
    /// The name `--workload` takes.
    pub name: &'static str,
    pub pattern: Pattern,
    /// Percentage of requests that are reads (the rest are writes).
    pub read_percent: u8,
    /// Each write is followed by a flush, and the pair is one operation (a database commit).
    pub flush_after_write: bool,
    /// Request size when `--sizes` is not given.
    pub default_size: u64,
    pub about: &'static str,
}

/// The built-in workloads.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "seq-read",
        pattern: Pattern::Sequential,
        read_percent: 100,
        flush_after_write: false,
        default_size: 1 << 20,
        about: "sequential reads (dd, a backup or video read)",
    },
    Kind {
        name: "seq-write",
        pattern: Pattern::Sequential,
        read_percent: 0,
        flush_after_write: false,
        default_size: 1 << 20,
        about: "sequential writes (dd, a backup or video written)",
    },
    Kind {
        name: "rand-read",
        pattern: Pattern::Random,
        read_percent: 100,
        flush_after_write: false,
        default_size: 4096,
        about: "random reads",
    },
    Kind {
        name: "rand-write",
        pattern: Pattern::Random,
        read_percent: 0,
        flush_after_write: false,
        default_size: 4096,
        about: "random writes",
    },
    Kind {
        name: "rand-rw",
        pattern: Pattern::Random,
        read_percent: 70,
        flush_after_write: false,
        default_size: 4096,
        about: "random 70 % reads, 30 % writes (a file server, a VM image)",
    },
    Kind {
        name: "seq-rw",
        pattern: Pattern::Sequential,
        read_percent: 50,
        flush_after_write: false,
        default_size: 1 << 20,
        about: "sequential 50 % reads, 50 % writes (a copy on one device)",
    },
    Kind {
        name: "database",
        pattern: Pattern::Random,
        read_percent: 50,
        flush_after_write: true,
        default_size: 8192,
        about: "random 8 KiB, half reads, each write followed by a flush (a commit)",
    },
];

/// The built-in workload named `name`.
pub fn kind(name: &str) -> Result<Kind, String> {
    KINDS
        .iter()
        .find(|k| k.name == name)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
            format!(
                "unknown workload {name:?}: give one of {}",
                names.join(", ")
            )
        })
}

/// What a workload profile is judged by when configurations are compared (`raidkit plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    /// Operations per second (small random requests).
    Iops,
    /// Megabytes per second (large sequential requests).
    Throughput,
}

/// A named use of an array (`raidkit plan --workload NAME`): one built-in workload at a request
/// size, queue depth and client count, so that `raidkit bench` runs exactly the case plan
/// predicts (`Profile::bench_args`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub name: &'static str,
    /// The built-in workload ([`KINDS`]) it runs.
    pub kind: &'static str,
    pub size: u64,
    pub queue_depth: u32,
    pub clients: u32,
    pub goal: Goal,
    pub about: &'static str,
}

/// The workload profiles.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "file-server",
        kind: "rand-rw",
        size: 64 << 10,
        queue_depth: 2,
        clients: 4,
        goal: Goal::Iops,
        about: "a file server: 4 users, random 64 KiB, 70 % reads",
    },
    Profile {
        name: "database",
        kind: "database",
        size: 8 << 10,
        queue_depth: 4,
        clients: 2,
        goal: Goal::Iops,
        about: "a database: random 8 KiB, half reads, each write a commit (write + flush)",
    },
    Profile {
        name: "video",
        kind: "seq-read",
        size: 1 << 20,
        queue_depth: 2,
        clients: 4,
        goal: Goal::Throughput,
        about: "video: 4 streams read sequentially in 1 MiB requests",
    },
    Profile {
        name: "backup",
        kind: "seq-write",
        size: 1 << 20,
        queue_depth: 4,
        clients: 1,
        goal: Goal::Throughput,
        about: "a backup target: one stream written sequentially in 1 MiB requests",
    },
    Profile {
        name: "build",
        kind: "rand-rw",
        size: 4 << 10,
        queue_depth: 8,
        clients: 2,
        goal: Goal::Iops,
        about: "a parallel build: random 4 KiB, 70 % reads (sources, objects), 16 in flight",
    },
];

/// The workload profile named `name`.
pub fn profile(name: &str) -> Result<Profile, String> {
    PROFILES
        .iter()
        .find(|p| p.name == name)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
            format!(
                "unknown workload {name:?}: give one of {}",
                names.join(", ")
            )
        })
}

impl Profile {
    /// The profile's case, running for `limit`, over the whole target.
    pub fn case(&self, limit: Limit) -> Case {
        let k = kind(self.kind).expect("a profile names a built-in workload");
        Case {
            workload: k.name.to_string(),
            pattern: k.pattern,
            read_percent: k.read_percent,
            flush_after_write: k.flush_after_write,
            size: self.size,
            queue_depth: self.queue_depth,
            clients: self.clients,
            working_set: 0,
            limit,
        }
    }

    /// The `raidkit bench` arguments that run the same case.
    pub fn bench_args(&self) -> String {
        format!(
            "-w {} --sizes {} --qd {} --clients {}",
            self.kind,
            size_text(self.size).replace("iB", ""),
            self.queue_depth,
            self.clients
        )
    }
}

/// When one case ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// Wall time of the case.
    pub runtime: Duration,
    /// Operations over all clients, if fewer than the runtime allows.
    pub ops: Option<u64>,
}

/// One case: a workload at one request size, queue depth and client count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub workload: String,
    pub pattern: Pattern,
    pub read_percent: u8,
    pub flush_after_write: bool,
    /// Request size in bytes.
    pub size: u64,
    /// Requests each client keeps in flight.
    pub queue_depth: u32,
    /// Parallel clients (NBD connections).
    pub clients: u32,
    /// Bytes from the start of the target that requests go to (0: the whole target).
    pub working_set: u64,
    pub limit: Limit,
}

impl Case {
    /// True when the case writes.
    pub fn writes(&self) -> bool {
        self.read_percent < 100
    }

    /// Requests in flight over all clients.
    pub fn in_flight(&self) -> u32 {
        self.queue_depth * self.clients
    }

    /// The case on a target of `target_bytes`: the working set is the whole target when it was
    /// 0, and must fit the target and hold one request per slot of a sequential stream.
    pub fn on_target(&self, target_bytes: u64) -> Result<Case, String> {
        let mut case = self.clone();
        if case.working_set == 0 {
            case.working_set = target_bytes;
        }
        if case.working_set > target_bytes {
            return Err(format!(
                "working set of {} bytes is larger than the target ({target_bytes} bytes): \
                 give a smaller --working-set",
                case.working_set
            ));
        }
        let streams = u64::from(case.clients);
        if case.working_set / streams < case.size {
            return Err(format!(
                "working set of {} bytes holds less than one {}-byte request per client: give \
                 a larger --working-set or smaller --sizes",
                case.working_set, case.size
            ));
        }
        Ok(case)
    }

    /// The same workload, size, depth, clients and limit, whatever the working set (two
    /// targets of different sizes run the same case over their whole size).
    pub fn same_load(&self, other: &Case) -> bool {
        Case {
            working_set: other.working_set,
            ..self.clone()
        } == *other
    }

    /// One line naming the case: `rand-read 4KiB qd1 c1`.
    pub fn label(&self) -> String {
        format!(
            "{} {} qd{} c{}",
            self.workload,
            size_text(self.size),
            self.queue_depth,
            self.clients
        )
    }
}

/// A sweep: workloads × sizes × queue depths × clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub workloads: Vec<Kind>,
    /// Empty: each workload's default size.
    pub sizes: Vec<u64>,
    pub queue_depths: Vec<u32>,
    pub clients: Vec<u32>,
    pub working_set: u64,
    pub limit: Limit,
}

impl Sweep {
    /// Every case of the sweep, checked against the bounds, in a stable order (workload, size,
    /// queue depth, clients).
    pub fn cases(&self) -> Result<Vec<Case>, String> {
        if self.workloads.is_empty() {
            return Err("no workload: give --workload NAME".into());
        }
        for &size in &self.sizes {
            if !(MIN_SIZE..=MAX_SIZE).contains(&size) || !size.is_multiple_of(MIN_SIZE) {
                return Err(format!(
                    "request size {size} bytes: give a multiple of 512 from 512 to 1M"
                ));
            }
        }
        for &qd in &self.queue_depths {
            if !(1..=MAX_QD).contains(&qd) {
                return Err(format!("queue depth {qd}: give 1 to {MAX_QD}"));
            }
        }
        for &c in &self.clients {
            if !(1..=MAX_CLIENTS).contains(&c) {
                return Err(format!("clients {c}: give 1 to {MAX_CLIENTS}"));
            }
        }
        if self.limit.runtime.is_zero() && self.limit.ops.is_none() {
            return Err("a case needs a runtime or an operation count".into());
        }
        let mut cases = Vec::new();
        for kind in &self.workloads {
            let sizes = if self.sizes.is_empty() {
                vec![kind.default_size]
            } else {
                self.sizes.clone()
            };
            for &size in &sizes {
                for &queue_depth in &self.queue_depths {
                    for &clients in &self.clients {
                        let in_flight = queue_depth * clients;
                        if in_flight > MAX_IN_FLIGHT {
                            return Err(format!(
                                "queue depth {queue_depth} x {clients} clients = {in_flight} \
                                 requests in flight: at most {MAX_IN_FLIGHT} (one thread each)"
                            ));
                        }
                        // A slot of a mix holds a read buffer and a write buffer.
                        let buffers =
                            u64::from(kind.read_percent > 0) + u64::from(kind.read_percent < 100);
                        if u64::from(in_flight) * size * buffers > MAX_BUFFER_BYTES {
                            return Err(format!(
                                "{in_flight} requests in flight of {size} bytes need more than \
                                 {} MiB of buffers: give fewer clients, a lower queue depth or \
                                 smaller sizes",
                                MAX_BUFFER_BYTES >> 20
                            ));
                        }
                        cases.push(Case {
                            workload: kind.name.to_string(),
                            pattern: kind.pattern,
                            read_percent: kind.read_percent,
                            flush_after_write: kind.flush_after_write,
                            size,
                            queue_depth,
                            clients,
                            working_set: self.working_set,
                            limit: self.limit,
                        });
                    }
                }
            }
        }
        Ok(cases)
    }
}

/// One operation a slot makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read {
        offset: u64,
        len: u64,
    },
    /// A write; with `flush`, followed by a flush as one operation.
    Write {
        offset: u64,
        len: u64,
        flush: bool,
    },
}

/// The operations of one slot (one request in flight of one client): random ones from its own
/// seeded generator, sequential ones from its client's stream, which all slots of the client
/// share (`next` takes the stream's position and advances it).
#[derive(Debug)]
pub struct Slot {
    rng: SimRng,
    /// Start and length of this slot's client's share of the working set.
    share: (u64, u64),
}

/// The position of one client's sequential stream inside its share.
#[derive(Debug, Default)]
pub struct Stream(std::sync::atomic::AtomicU64);

impl Slot {
    /// Slot `slot` of client `client` of `case` (already `on_target`), from `seed`.
    pub fn new(case: &Case, seed: u64, client: u32, slot: u32) -> Slot {
        // SplitMix64 walks its state in steps of one constant, so seeds that differ by a
        // multiple of it give the same sequence shifted (slot 2 reading where slot 0 read two
        // requests before, which a disk's read-ahead then serves): each slot starts from a
        // state hashed from the seed and its place instead.
        let place = SimRng::new(u64::from(client) << 32 | u64::from(slot)).next_u64();
        let start = SimRng::new(SimRng::new(seed).next_u64() ^ place).next_u64();
        let share_len = case.working_set / u64::from(case.clients) / case.size * case.size;
        Slot {
            rng: SimRng::new(start),
            share: (share_len * u64::from(client), share_len),
        }
    }

    /// The next operation.
    pub fn next(&mut self, case: &Case, stream: &Stream) -> Op {
        let size = case.size;
        let offset = match case.pattern {
            Pattern::Random => {
                let slots = case.working_set / size;
                assert!(slots > 0, "working set holds a request");
                self.rng.below(slots) * size
            }
            Pattern::Sequential => {
                use std::sync::atomic::Ordering;
                let (start, len) = self.share;
                let at = stream.0.fetch_add(size, Ordering::Relaxed) % len;
                start + at
            }
        };
        let read = case.read_percent == 100
            || (case.read_percent > 0 && self.rng.chance(u64::from(case.read_percent), 100));
        if read {
            Op::Read { offset, len: size }
        } else {
            Op::Write {
                offset,
                len: size,
                flush: case.flush_after_write,
            }
        }
    }
}

/// `4KiB`, `1MiB`, `512B`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::Sequential => "sequential",
            Pattern::Random => "random",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn sweep(names: &[&str], sizes: &[u64], qd: &[u32], clients: &[u32]) -> Sweep {
        Sweep {
            workloads: names.iter().map(|n| kind(n).unwrap()).collect(),
            sizes: sizes.to_vec(),
            queue_depths: qd.to_vec(),
            clients: clients.to_vec(),
            working_set: 0,
            limit: Limit {
                runtime: Duration::from_secs(1),
                ops: None,
            },
        }
    }

    #[test]
    fn a_sweep_expands_to_every_combination_in_order() {
        let cases = sweep(
            &["rand-read", "seq-write"],
            &[4096, 65536],
            &[1, 8],
            &[1, 2],
        )
        .cases()
        .unwrap();
        assert_eq!(cases.len(), 2 * 2 * 2 * 2);
        assert_eq!(cases[0].label(), "rand-read 4KiB qd1 c1");
        assert_eq!(cases[1].label(), "rand-read 4KiB qd1 c2");
        assert_eq!(cases[2].label(), "rand-read 4KiB qd8 c1");
        assert_eq!(cases[15].label(), "seq-write 64KiB qd8 c2");
        assert!(!cases[0].writes() && cases[15].writes());
    }

    #[test]
    fn no_sizes_takes_each_workloads_default() {
        let cases = sweep(&["seq-read", "database"], &[], &[1], &[1])
            .cases()
            .unwrap();
        assert_eq!(cases[0].size, 1 << 20);
        assert_eq!(cases[1].size, 8192);
        assert!(cases[1].flush_after_write);
    }

    #[test]
    fn out_of_range_sweeps_are_refused_with_the_bound() {
        let e = sweep(&["rand-read"], &[100], &[1], &[1])
            .cases()
            .unwrap_err();
        assert!(e.contains("multiple of 512"), "{e}");
        let e = sweep(&["rand-read"], &[2 << 20], &[1], &[1])
            .cases()
            .unwrap_err();
        assert!(e.contains("512 to 1M"), "{e}");
        let e = sweep(&["rand-read"], &[4096], &[65], &[1])
            .cases()
            .unwrap_err();
        assert!(e.contains("queue depth 65"), "{e}");
        let e = sweep(&["rand-read"], &[4096], &[1], &[0])
            .cases()
            .unwrap_err();
        assert!(e.contains("clients 0"), "{e}");
        let e = sweep(&["rand-read"], &[4096], &[64], &[64])
            .cases()
            .unwrap_err();
        assert!(e.contains("4096 requests in flight"), "{e}");
        let e = sweep(&["rand-read"], &[1 << 20], &[64], &[16])
            .cases()
            .unwrap_err();
        assert!(e.contains("MiB of buffers"), "{e}");
        assert!(kind("nope").unwrap_err().contains("rand-read"));
    }

    #[test]
    fn random_offsets_are_aligned_inside_the_working_set_and_spread() {
        let case = sweep(&["rand-read"], &[4096], &[1], &[1]).cases().unwrap()[0]
            .on_target(1 << 20)
            .unwrap();
        let mut slot = Slot::new(&case, 7, 0, 0);
        let stream = Stream::default();
        let mut seen = HashSet::new();
        for _ in 0..2000 {
            let Op::Read { offset, len } = slot.next(&case, &stream) else {
                panic!("rand-read made a write")
            };
            assert_eq!(len, 4096);
            assert_eq!(offset % 4096, 0);
            assert!(offset + len <= 1 << 20);
            seen.insert(offset);
        }
        // 256 places, 2000 draws: a uniform generator misses none (chance ~ 256 e^-7.8).
        assert_eq!(seen.len(), 256);
    }

    #[test]
    fn the_same_seed_gives_the_same_operations_and_slots_differ() {
        let case = sweep(&["rand-rw"], &[4096], &[2], &[1]).cases().unwrap()[0]
            .on_target(64 << 20)
            .unwrap();
        let stream = Stream::default();
        let ops = |client, slot| {
            let mut s = Slot::new(&case, 42, client, slot);
            (0..100).map(|_| s.next(&case, &stream)).collect::<Vec<_>>()
        };
        assert_eq!(ops(0, 0), ops(0, 0));
        assert_ne!(ops(0, 0), ops(0, 1));
        assert_ne!(ops(0, 0), ops(1, 0));
    }

    #[test]
    fn slots_never_replay_each_others_offsets() {
        // 2^38 places: 16 slots x 1000 draws share none unless their sequences overlap.
        let case = sweep(&["rand-read"], &[4096], &[16], &[1]).cases().unwrap()[0]
            .on_target(1 << 50)
            .unwrap();
        let stream = Stream::default();
        for seed in [0, 1, 2, 0x9E37_79B9_7F4A_7C15] {
            let mut seen = HashSet::new();
            for s in 0..16 {
                let mut slot = Slot::new(&case, seed, 0, s);
                for _ in 0..1000 {
                    let Op::Read { offset, .. } = slot.next(&case, &stream) else {
                        panic!()
                    };
                    assert!(
                        seen.insert(offset),
                        "seed {seed}: slot {s} repeats {offset}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_mix_follows_the_read_percentage() {
        let case = sweep(&["rand-rw"], &[4096], &[1], &[1]).cases().unwrap()[0]
            .on_target(64 << 20)
            .unwrap();
        let stream = Stream::default();
        let mut slot = Slot::new(&case, 3, 0, 0);
        let reads = (0..10_000)
            .filter(|_| matches!(slot.next(&case, &stream), Op::Read { .. }))
            .count();
        // 70 %: binomial sd ~ 46 of 10,000.
        assert!((6800..=7200).contains(&reads), "{reads} reads of 10000");
        let db = sweep(&["database"], &[], &[1], &[1]).cases().unwrap()[0]
            .on_target(64 << 20)
            .unwrap();
        let mut slot = Slot::new(&db, 3, 0, 0);
        let writes: Vec<Op> = (0..100)
            .map(|_| slot.next(&db, &stream))
            .filter(|op| matches!(op, Op::Write { .. }))
            .collect();
        assert!(!writes.is_empty());
        assert!(writes
            .iter()
            .all(|op| matches!(op, Op::Write { flush: true, .. })));
    }

    #[test]
    fn sequential_clients_stream_through_their_own_shares_and_wrap() {
        let case = sweep(&["seq-read"], &[65536], &[2], &[2]).cases().unwrap()[0]
            .on_target(1 << 20)
            .unwrap();
        // Two clients, 512 KiB each; the two slots of client 1 share one stream.
        let stream = Stream::default();
        let mut a = Slot::new(&case, 1, 1, 0);
        let mut b = Slot::new(&case, 1, 1, 1);
        let mut offsets = Vec::new();
        for i in 0..16 {
            let slot = if i % 2 == 0 { &mut a } else { &mut b };
            let Op::Read { offset, .. } = slot.next(&case, &stream) else {
                panic!()
            };
            offsets.push(offset);
        }
        let expected: Vec<u64> = (0..16u64).map(|i| (512 << 10) + (i % 8) * 65536).collect();
        assert_eq!(offsets, expected);
    }

    #[test]
    fn a_working_set_must_fit_the_target_and_the_streams() {
        let mut case = sweep(&["seq-read"], &[1 << 20], &[1], &[4])
            .cases()
            .unwrap()[0]
            .clone();
        assert_eq!(case.on_target(8 << 20).unwrap().working_set, 8 << 20);
        case.working_set = 16 << 20;
        assert!(case
            .on_target(8 << 20)
            .unwrap_err()
            .contains("larger than the target"));
        case.working_set = 2 << 20;
        assert!(case
            .on_target(8 << 20)
            .unwrap_err()
            .contains("one 1048576-byte request"));
    }

    #[test]
    fn every_profile_is_a_valid_case_of_a_built_in_workload() {
        for p in PROFILES {
            let case = p.case(Limit {
                runtime: Duration::from_secs(1),
                ops: None,
            });
            let sweep = Sweep {
                workloads: vec![kind(p.kind).unwrap()],
                sizes: vec![p.size],
                queue_depths: vec![p.queue_depth],
                clients: vec![p.clients],
                working_set: 0,
                limit: case.limit,
            };
            assert_eq!(sweep.cases().unwrap(), vec![case], "{}", p.name);
        }
        assert_eq!(
            profile("video").unwrap().bench_args(),
            "-w seq-read --sizes 1M --qd 2 --clients 4"
        );
        assert!(profile("nope").unwrap_err().contains("file-server"));
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(size_text(512), "512B");
        assert_eq!(size_text(4096), "4KiB");
        assert_eq!(size_text(1 << 20), "1MiB");
        assert_eq!(size_text(1536), "1536B");
    }
}
