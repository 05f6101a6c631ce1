//! Disk-model members (`sim:CLASS:SIZE`): the spec, the data, and the real-time clock against
//! the model's own prediction in virtual time.

use std::time::Instant;

use diskmodel::workload::{run, Access, Workload};
use diskmodel::{Clock, DiskClass, Op, Options};
use member::{open, ram_spec, OpenOptions, RealClock, SimRng};

const SIZE: u64 = 1 << 30;

#[test]
fn sim_specs_open_hold_data_and_refuse_bad_input_by_name() {
    let m = open("sim:ssd:64M", &OpenOptions::default()).unwrap();
    assert_eq!(m.len(), 64 << 20);
    assert_eq!(m.name(), "sim:ssd:64M");
    m.write_at(b"model", 4093).unwrap();
    let mut buf = [0u8; 7];
    m.read_at(&mut buf, 4092).unwrap();
    assert_eq!(&buf, b"\0model\0");
    m.trim(0, 8192).unwrap();
    m.read_at(&mut buf, 4092).unwrap();
    assert_eq!(buf, [0; 7]);
    m.flush().unwrap();
    let past = m.read_at(&mut buf, (64 << 20) - 3).unwrap_err();
    assert!(past.to_string().contains("sim:ssd:64M"), "{past}");
    assert!(ram_spec("sim:hdd7200:1G") && ram_spec("mem:1G") && !ram_spec("/tmp/x"));
    assert!(open(
        "sim:hdd7200:1G:cache=off,queue=1,order=fifo",
        &OpenOptions::default()
    )
    .is_ok());
    for (spec, says) in [
        ("sim:floppy:1G", "hdd7200, hdd10k, hdd15k, ssd, nvme"),
        ("sim:hdd7200", "no size"),
        ("sim:hdd7200:lots", "size"),
        ("sim:hdd7200:64K", "at least 1 MiB"),
        ("sim:hdd7200:1G:cache=maybe", "cache=on or cache=off"),
        ("sim:hdd7200:1G:queue=0", "queue depth from 1 to 256"),
        ("sim:hdd7200:1G:speed=fast", "unknown disk model option"),
    ] {
        let e = open(spec, &OpenOptions::default()).unwrap_err().to_string();
        assert!(e.contains(spec) && e.contains(says), "{spec}: {e}");
    }
}

/// How late `RealClock::wait_until` returns: the figure DESIGN quotes.
#[test]
fn real_clock_sleeps_end_close_to_their_target() {
    let clock = RealClock::default();
    let mut late: Vec<u64> = (0..200)
        .map(|_| {
            let target = clock.now() + 50_000;
            clock.wait_until(target);
            clock.now() - target
        })
        .collect();
    late.sort_unstable();
    let (p50, p99) = (late[100], late[198]);
    println!(
        "50 us sleeps: late by p50 {} us, p99 {} us",
        p50 / 1000,
        p99 / 1000
    );
    // The model cannot wake early; late by a loaded machine's scheduling delay at worst.
    assert!(p50 < 1_000_000, "median sleep {p50} ns late");
}

/// Mean latency of `n` 4 KiB random reads at queue depth 1 on a real-time `sim:` member.
fn measured_qd1_ms(spec: &str, n: usize, seed: u64) -> f64 {
    let m = open(spec, &OpenOptions::default()).unwrap();
    let mut rng = SimRng::new(seed);
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    for _ in 0..n {
        m.read_at(&mut buf, rng.below(SIZE / 4096) * 4096).unwrap();
    }
    start.elapsed().as_secs_f64() * 1e3 / n as f64
}

/// The model's own prediction in virtual time.
fn predicted_qd1_ms(class: DiskClass) -> f64 {
    let w = Workload {
        op: Op::Read,
        size: 4096,
        access: Access::Random,
        queue_depth: 1,
        requests: 4000,
    };
    run(&class.model(), &Options::default(), SIZE, &w, 7).mean_ms()
}

/// One real-time check per class: a member's reads take the modelled time, never less, and
/// not much more even on a loaded machine (bounds: 0.75x below, 1.5x + 2 ms above for a disk
/// whose 40-read sample mean varies; 0.9x below and + 2 ms above for flash, whose latency is
/// fixed and whose sleep is what is measured).
#[test]
fn real_time_members_take_the_modelled_time() {
    let seed = testsupport::seed("real_time_members_take_the_modelled_time");
    for &class in DiskClass::all() {
        let flash = matches!(class, DiskClass::Ssd | DiskClass::Nvme);
        let n = if flash { 400 } else { 40 };
        let want = predicted_qd1_ms(class);
        let got = measured_qd1_ms(&format!("sim:{class}:1G"), n, seed);
        println!("{class}: 4 KiB QD1 read {got:.3} ms, model {want:.3} ms");
        let (low, high) = if flash {
            (0.9 * want, want + 2.0)
        } else {
            (0.75 * want, 1.5 * want + 2.0)
        };
        assert!(
            (low..high).contains(&got),
            "{class}: measured {got:.3} ms per read, model {want:.3} ms (seed {seed})"
        );
    }
}

/// Eight threads reading a `sim:hdd7200` member at once: the drive reorders what they queue
/// (the lazily advanced model, each waiter advancing it when it wakes), so it serves them at
/// the model's QD8 rate, not one at a time (QD1) and not eight disks' worth. Bounds: 0.7x to
/// 1.3x the virtual-time QD8 IOPS (200 reads; a loaded machine's wake-up delays make requests
/// arrive late, which costs a few %).
#[test]
fn concurrent_callers_get_the_modelled_queue_depth() {
    let seed = testsupport::seed("concurrent_callers_get_the_modelled_queue_depth");
    let w = Workload {
        op: Op::Read,
        size: 4096,
        access: Access::Random,
        queue_depth: 8,
        requests: 4000,
    };
    let want = run(
        &DiskClass::Hdd7200.model(),
        &Options::default(),
        SIZE,
        &w,
        7,
    )
    .iops();
    let m = open("sim:hdd7200:1G", &OpenOptions::default()).unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let m = &m;
            s.spawn(move || {
                let mut rng = SimRng::new(seed ^ t);
                let mut buf = vec![0u8; 4096];
                for _ in 0..25 {
                    m.read_at(&mut buf, rng.below(SIZE / 4096) * 4096).unwrap();
                }
            });
        }
    });
    let got = 200.0 / start.elapsed().as_secs_f64();
    println!("8 threads on sim:hdd7200: {got:.0} IOPS, model at QD8 {want:.0}");
    assert!(
        (0.7 * want..1.3 * want).contains(&got),
        "{got:.0} IOPS, model {want:.0} at QD8 (seed {seed})"
    );
}

/// Calls started on a disk model (`Member::start`) are queued in the model at once: 32 random
/// reads started from one thread and then waited for in turn are reordered by the drive (a
/// batch of 32 takes well under 32 random reads' time), not served one after another, and
/// hand over the bytes written (by started writes). A flash model does not start calls (they stay on the caller's thread).
#[test]
fn calls_started_on_a_disk_model_are_queued_at_once() {
    let seed = testsupport::seed("calls_started_on_a_disk_model_are_queued_at_once");
    let m = open("sim:hdd7200:1G", &OpenOptions::default()).unwrap();
    let mut rng = SimRng::new(seed);
    let offsets: Vec<u64> = (0..32).map(|_| rng.below(SIZE / 4096) * 4096).collect();
    let data: Vec<Vec<u8>> = (0..32u8).map(|i| vec![i + 1; 4096]).collect();
    let writes: Vec<member::Started> = offsets
        .iter()
        .zip(&data)
        .map(|(&offset, d)| {
            let bufs: [&[u8]; 1] = [d];
            m.start(member::StartCall::Write {
                offset,
                bufs: &bufs,
            })
            .expect("a disk starts")
        })
        .collect();
    for w in writes {
        w.finish(&mut |_| {}).0.unwrap();
    }
    let rounds = 8;
    let start = Instant::now();
    for _ in 0..rounds {
        let mut reads: Vec<member::Started> = offsets
            .iter()
            .map(|&offset| {
                (m.start(member::StartCall::Read { offset, len: 4096 })).expect("a disk starts")
            })
            .collect();
        for (i, read) in reads.drain(..).enumerate() {
            let mut got = Vec::new();
            read.finish(&mut |b| got.extend_from_slice(b)).0.unwrap();
            assert_eq!(got, data[i], "read {i} at {} (seed {seed})", offsets[i]);
        }
    }
    let per_read = start.elapsed().as_secs_f64() / f64::from(rounds * 32);
    let qd1 = 1.0
        / run(
            &DiskClass::Hdd7200.model(),
            &Options::default(),
            SIZE,
            &Workload {
                op: Op::Read,
                size: 4096,
                access: Access::Random,
                queue_depth: 1,
                requests: 2000,
            },
            seed,
        )
        .iops();
    println!(
        "32 started reads at once: {:.2} ms a read, QD1 {:.2} ms",
        per_read * 1e3,
        qd1 * 1e3
    );
    assert!(
        per_read < 0.8 * qd1,
        "{:.2} ms a read, QD1 {:.2} ms (seed {seed})",
        per_read * 1e3,
        qd1 * 1e3
    );
    let flash = open("sim:ssd:1G", &OpenOptions::default()).unwrap();
    assert!(flash
        .start(member::StartCall::Read {
            offset: 0,
            len: 4096
        })
        .is_none());
}
