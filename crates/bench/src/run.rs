//! Running one case against one target: `clients` connections with raidkit's own NBD client
//! (`member::NbdMember`), `queue_depth` requests in flight on each, one thread per request in
//! flight (bounded by `workload::MAX_IN_FLIGHT`), each timing its own operations.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use member::{Member, OpenOptions, RemoteOptions};

use crate::stats::Measured;
use crate::workload::{Case, Op, Slot, Stream};

/// Stack of each issuing thread: it holds a few frames and no buffers.
const SLOT_STACK_BYTES: usize = 256 << 10;
/// How often the progress callback is called.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Opens one client connection to `uri` for `queue_depth` requests in flight, read-only unless
/// `writes`. An NBD URI is opened by `member::NbdMember`; anything else `member::open` takes
/// (for tests: `mem:SIZE`, `sim:CLASS:SIZE`).
pub fn open_client(uri: &str, writes: bool, queue_depth: u32) -> Result<Arc<dyn Member>, String> {
    let opts = OpenOptions {
        create_size: None,
        read_only: !writes,
        exclusive: false,
    };
    let remote = RemoteOptions {
        max_in_flight: queue_depth.max(1) as usize,
        ..RemoteOptions::default()
    };
    member::open_with(uri, &opts, &remote).map_err(|e| format!("{uri}: {e}"))
}

/// Runs `case` (already `on_target`) with clients from `open(queue_depth)`; `progress` is told
/// the operations done so far, every 100 ms. The first failed operation stops the case and is
/// its error.
pub fn run_case(
    open: &dyn Fn(u32) -> Result<Arc<dyn Member>, String>,
    case: &Case,
    seed: u64,
    progress: &dyn Fn(u64),
) -> Result<Measured, String> {
    assert!(case.working_set > 0, "the case is on its target");
    let clients: Vec<Arc<dyn Member>> = (0..case.clients)
        .map(|_| open(case.queue_depth))
        .collect::<Result<_, _>>()?;
    for c in &clients {
        if c.len() < case.working_set {
            return Err(format!(
                "{}: {} bytes, smaller than the working set ({} bytes)",
                c.name(),
                c.len(),
                case.working_set
            ));
        }
    }
    let streams: Vec<Stream> = (0..case.clients).map(|_| Stream::default()).collect();
    let stop = AtomicBool::new(false);
    let issued = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let started = Instant::now();
    let deadline = started + case.limit.runtime;
    let mut total = Measured::default();
    let elapsed = std::thread::scope(|scope| -> Result<Duration, String> {
        let mut handles = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for s in 0..case.queue_depth {
                let slot = Slot::new(case, seed, c as u32, s);
                let ctx = SlotRun {
                    case,
                    member: client.as_ref(),
                    stream: &streams[c],
                    stop: &stop,
                    issued: &issued,
                    done: &done,
                    failure: &failure,
                    deadline,
                    fill: seed ^ ((c as u64) << 20) ^ u64::from(s),
                };
                let handle = std::thread::Builder::new()
                    .name(format!("bench-c{c}-s{s}"))
                    .stack_size(SLOT_STACK_BYTES)
                    .spawn_scoped(scope, move || ctx.run(slot))
                    .map_err(|e| format!("cannot start an issuing thread: {e}"));
                match handle {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
        }
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(PROGRESS_EVERY.min(Duration::from_millis(20)));
            progress(done.load(Ordering::Relaxed));
        }
        let elapsed = started.elapsed();
        for h in handles {
            let measured = h.join().expect("an issuing thread does not panic");
            total.merge(&measured);
        }
        progress(done.load(Ordering::Relaxed));
        Ok(elapsed)
    })?;
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    total.elapsed = elapsed;
    Ok(total)
}

/// One issuing thread's view of the case.
struct SlotRun<'a> {
    case: &'a Case,
    member: &'a dyn Member,
    stream: &'a Stream,
    stop: &'a AtomicBool,
    issued: &'a AtomicU64,
    done: &'a AtomicU64,
    failure: &'a Mutex<Option<String>>,
    deadline: Instant,
    fill: u64,
}

impl SlotRun<'_> {
    fn run(self, mut slot: Slot) -> Measured {
        let mut m = Measured::default();
        // A read's buffer and a write's are two: a read must not change what later writes write.
        let size = self.case.size as usize;
        let mut read_buf = vec![0u8; if self.case.read_percent > 0 { size } else { 0 }];
        // Written data: not zeroes (a server may skip them) and not one repeated byte.
        let mut write_buf = vec![0u8; if self.case.writes() { size } else { 0 }];
        let mut x = self.fill | 1;
        for chunk in write_buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bytes = x.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        loop {
            if self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline {
                break;
            }
            if let Some(limit) = self.case.limit.ops {
                if self.issued.fetch_add(1, Ordering::Relaxed) >= limit {
                    break;
                }
            }
            let op = slot.next(self.case, self.stream);
            let began = Instant::now();
            let result = match op {
                Op::Read { offset, len } => {
                    m.reads += 1;
                    m.bytes += len;
                    self.member.read_at(&mut read_buf, offset)
                }
                Op::Write { offset, len, flush } => {
                    m.writes += 1;
                    m.bytes += len;
                    let r = self.member.write_at(&write_buf, offset);
                    if flush && r.is_ok() {
                        m.flushes += 1;
                        self.member.flush()
                    } else {
                        r
                    }
                }
            };
            if let Err(e) = result {
                let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
                f.get_or_insert_with(|| format!("{}: {e}", self.case.label()));
                self.stop.store(true, Ordering::Relaxed);
                break;
            }
            m.latencies.record(began.elapsed());
            self.done.fetch_add(1, Ordering::Relaxed);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{kind, Limit, Sweep};

    fn case(name: &str, size: u64, qd: u32, clients: u32, limit: Limit) -> Case {
        Sweep {
            workloads: vec![kind(name).unwrap()],
            sizes: vec![size],
            queue_depths: vec![qd],
            clients: vec![clients],
            working_set: 0,
            limit,
        }
        .cases()
        .unwrap()
        .remove(0)
    }

    #[test]
    fn an_operation_count_is_run_exactly_over_all_slots() {
        let mem = open_client("mem:4M", true, 4).unwrap();
        let c = case(
            "rand-rw",
            4096,
            4,
            2,
            Limit {
                runtime: Duration::from_secs(60),
                ops: Some(1000),
            },
        )
        .on_target(mem.len())
        .unwrap();
        let m = run_case(&|_| Ok(Arc::clone(&mem)), &c, 5, &|_| {}).unwrap();
        assert_eq!(m.ops(), 1000);
        assert_eq!(m.bytes, 1000 * 4096);
        assert_eq!(m.latencies.count(), 1000);
        assert!(
            m.writes > 150 && m.reads > 550,
            "{} reads {} writes",
            m.reads,
            m.writes
        );
        assert_eq!(m.flushes, 0);
        // The writes landed: the RAM member is no longer all zeroes.
        let mut back = vec![0u8; 4 << 20];
        mem.read_at(&mut back, 0).unwrap();
        assert!(back.iter().any(|&b| b != 0));
    }

    #[test]
    fn a_runtime_ends_the_case_and_the_database_mix_flushes_each_write() {
        let mem = open_client("mem:1M", true, 1).unwrap();
        let c = case(
            "database",
            8192,
            1,
            1,
            Limit {
                runtime: Duration::from_millis(200),
                ops: None,
            },
        )
        .on_target(mem.len())
        .unwrap();
        let m = run_case(&|_| Ok(Arc::clone(&mem)), &c, 9, &|_| {}).unwrap();
        assert!(m.elapsed >= Duration::from_millis(200) && m.elapsed < Duration::from_secs(5));
        assert!(m.ops() > 10);
        assert_eq!(m.flushes, m.writes);
    }

    #[test]
    fn a_model_disks_qd1_random_reads_take_the_models_time() {
        // sim:nvme: 4 KiB random reads at QD1 take the model's 0.053 ms, so a slot cannot
        // run faster than ~19,000 IOPS; the run's figure is bounded by that.
        let disk = open_client("sim:nvme:64M", false, 1).unwrap();
        let c = case(
            "rand-read",
            4096,
            1,
            1,
            Limit {
                runtime: Duration::from_secs(30),
                ops: Some(500),
            },
        )
        .on_target(disk.len())
        .unwrap();
        let m = run_case(&|_| Ok(Arc::clone(&disk)), &c, 1, &|_| {}).unwrap();
        let f = m.figures();
        assert!(f.iops < 19_000.0 * 1.05, "{f:?}");
        assert!(f.latency.p50_ms >= 0.05, "{f:?}");
    }

    #[test]
    fn a_model_disks_queue_of_eight_runs_at_the_models_qd8_rate() {
        // Eight slots on one sim:hdd7200 member are the model's QD8 (NCQ reorders what they
        // queue): diskmodel's virtual-time run of the same workload is the reference. Slots
        // that replayed each other's offsets (a seeding fault) made this 1.9 x the model.
        let want = diskmodel::workload::run(
            &diskmodel::DiskClass::Hdd7200.model(),
            &diskmodel::Options::default(),
            1 << 30,
            &diskmodel::workload::Workload {
                op: diskmodel::Op::Read,
                size: 4096,
                access: diskmodel::workload::Access::Random,
                queue_depth: 8,
                requests: 4000,
            },
            7,
        )
        .iops();
        let disk = open_client("sim:hdd7200:1G", false, 8).unwrap();
        let c = case(
            "rand-read",
            4096,
            8,
            1,
            Limit {
                runtime: Duration::from_secs(60),
                ops: Some(400),
            },
        )
        .on_target(disk.len())
        .unwrap();
        let seed = 0x5eed;
        let got = run_case(&|_| Ok(Arc::clone(&disk)), &c, seed, &|_| {})
            .unwrap()
            .figures()
            .iops;
        assert!(
            (0.7 * want..1.3 * want).contains(&got),
            "{got:.0} IOPS, model {want:.0} at QD8 (seed {seed})"
        );
    }

    #[test]
    fn a_failed_operation_is_the_cases_error() {
        // A member whose every write fails stops the write workload at its first write.
        let mem = open_client("mem:1M", true, 1).unwrap();
        let c = case(
            "rand-write",
            4096,
            1,
            1,
            Limit {
                runtime: Duration::from_secs(10),
                ops: None,
            },
        )
        .on_target(mem.len())
        .unwrap();
        let faulty = Arc::new(member::FaultyMember::new(Arc::clone(&mem)));
        faulty.control().fail_writes(member::FaultRule::Always);
        let e = run_case(
            &|_| Ok(Arc::clone(&faulty) as Arc<dyn Member>),
            &c,
            1,
            &|_| {},
        )
        .unwrap_err();
        assert!(e.starts_with("rand-write 4KiB qd1 c1: "), "{e}");
    }
}
