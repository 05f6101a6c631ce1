//! Member errors surface as `IoError::Member` naming the member, the operation and the offset;
//! RAID 1 reads spread over the mirrors.

mod common;

use common::*;
use engine::{IoError, Level, Op};
use member::{Call, Hooked, MemMember, Member};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What steers a RAM member: counts its reads, and fails every operation while `broken`.
#[derive(Debug)]
struct Probe {
    name: String,
    reads: AtomicU64,
    broken: AtomicBool,
}

impl Probe {
    fn before(&self, call: &Call) -> io::Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(io::Error::other("injected failure"));
        }
        if call.op == member::Op::Read {
            self.reads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn probes(n: usize, len: u64) -> (Vec<Arc<Probe>>, Vec<Arc<dyn Member>>) {
    let probes: Vec<Arc<Probe>> = (0..n)
        .map(|i| {
            Arc::new(Probe {
                name: format!("probe{i}"),
                reads: AtomicU64::new(0),
                broken: AtomicBool::new(false),
            })
        })
        .collect();
    let members = probes
        .iter()
        .map(|p| {
            let probe = Arc::clone(p);
            let inner = Arc::new(MemMember::new(&p.name, len).expect("mem"));
            Arc::new(Hooked::new(inner, move |call: &Call| probe.before(call))) as Arc<dyn Member>
        })
        .collect();
    (probes, members)
}

#[test]
fn broken_member_is_failed_out_and_data_still_served() {
    let chunk = 4 * KIB;
    let (probes, members) = probes(3, 8 * chunk);
    let array = array_over(Level::Raid5, chunk, &members, &[]);
    array.write(0, &[5u8; 8192]).expect("healthy write");
    probes[1].broken.store(true, Ordering::Relaxed);
    // Logical chunk 1 of stripe 0 is data index 1: member (P=2 + 1 + 1) mod 3 = 1. Its read
    // fails, the rewrite from parity fails too: the member is failed out, the read served.
    let mut buf = vec![0u8; 100];
    array
        .read(chunk + 10, &mut buf)
        .expect("served from parity");
    assert_eq!(buf, vec![5u8; 100]);
    assert_eq!(array.health_of(1), engine::MemberHealth::Faulty);
    assert_eq!(array.fault_stats(1).write_errors, 1);
    array.write(0, &[7u8; 9000]).expect("degraded write");
    array.flush().expect("flush without the failed member");
}

#[test]
fn error_names_member_operation_and_offset_when_redundancy_is_gone() {
    let chunk = 4 * KIB;
    let (probes, members) = probes(3, 8 * chunk);
    let array = array_over(Level::Raid5, chunk, &members, &[0]);
    probes[1].broken.store(true, Ordering::Relaxed);
    let mut buf = vec![0u8; 100];
    let err = array.read(chunk + 10, &mut buf).unwrap_err();
    match &err {
        IoError::Member {
            role,
            op,
            offset,
            len,
            ..
        } => {
            assert_eq!((*role, *op, *offset, *len), (1, Op::Read, 10, 100));
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("member 1 (probe1)") && text.contains("read of 100 bytes at offset 10"),
        "{text}"
    );
    assert!(text.contains("injected failure"), "{text}");
    // The member holds the last copy of some data: it is kept, errors and all.
    assert_eq!(array.health_of(1), engine::MemberHealth::InSync);
    // Stripe 1 (P on member 1): data index 0 lives on member 2 and is still served.
    array
        .read(2 * chunk, &mut buf)
        .expect("a range the broken member does not hold");
    let flush = array.flush().unwrap_err();
    assert!(flush.to_string().contains("flush"), "{flush}");
}

#[test]
fn raid1_reads_spread_over_mirrors() {
    let chunk = 64 * KIB;
    let (probes, members) = probes(3, 64 * chunk);
    let array = array_over(Level::Raid1, chunk, &members, &[]);
    // A read's pieces stay on one copy up to the fan-out threshold, then go on the next.
    array.set_fanout_min_bytes(8 * chunk);
    let mut buf = vec![0u8; (30 * chunk) as usize];
    array.read(0, &mut buf).expect("read");
    for p in &probes {
        let reads = p.reads.load(Ordering::Relaxed);
        assert!(
            reads >= 5,
            "{} served only {reads} of 30 chunk reads",
            p.name
        );
    }
}
