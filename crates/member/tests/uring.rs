//! io_uring submission of member reads and writes (`member::uring`): a batch through the ring
//! reads and writes what positional calls read and write, on page-cache and direct files,
//! through a `Window`; which members and operations offer a ring target; a direct ring write
//! holds its block locks against a partial write's read-modify-write. io_uring must be
//! available here (the tests fail, saying so, where it is not).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod common;

use member::uring::{self, RingData, RingIo};
use member::{
    AlignedBuf, Detached, Fence, FileMember, Member, MemberCache, MemberIo, OpenOptions, RingAsk,
    SimRng, Window,
};

fn dir() -> tempfile::TempDir {
    // /var/tmp: ext4 here, with O_DIRECT (as member tests/direct.rs).
    let base =
        std::env::var_os("RAIDKIT_DIRECT_DIR").map_or(PathBuf::from("/var/tmp"), PathBuf::from);
    tempfile::Builder::new()
        .prefix("raidkit-uring-")
        .tempdir_in(&base)
        .expect("temporary directory")
}

fn open(path: &Path, size: u64, cache: MemberCache, io: MemberIo) -> FileMember {
    uring::probe().unwrap_or_else(|why| panic!("io_uring is needed for these tests: {why}"));
    let opts = OpenOptions {
        create_size: Some(size),
        ..OpenOptions::default()
    };
    FileMember::open_cached(path, "uring-test", &opts, cache)
        .and_then(|m| m.with_member_io(io))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// Writes `buf` at `offset` of `m` through the ring.
fn ring_write(m: &dyn Member, buf: &[u8], offset: u64) {
    let bufs = [buf];
    let target = m
        .ring_target(RingAsk::write(offset, &bufs))
        .expect("a ring target for an aligned write");
    assert!(uring::ready());
    let mut ios = [RingIo {
        target,
        data: RingData::Write(&bufs),
    }];
    let results = uring::submit(&mut ios, Duration::from_secs(10));
    results.into_iter().for_each(|(r, _)| r.unwrap());
}

/// 200 reads and writes (single and vectored, 4 KiB-aligned, some ≥ 64 KiB) over three
/// members — buffered, direct, and a window of a direct file — submitted as one batch (more
/// than the ring's 64 entries: in turns), then read back with positional calls; and a batch of
/// reads through the ring agrees with positional reads.
#[test]
fn a_batch_through_the_ring_reads_and_writes_what_positional_calls_do() {
    let d = dir();
    let size = 16 << 20;
    let direct = Arc::new(open(
        &d.path().join("d.img"),
        size + 8192,
        MemberCache::Direct,
        MemberIo::Auto,
    ));
    let members: Vec<Arc<dyn Member>> = vec![
        Arc::new(open(
            &d.path().join("b.img"),
            size,
            MemberCache::Buffered,
            MemberIo::Auto,
        )),
        direct.clone(),
        Arc::new(Window::new(direct, size, 8192)),
    ];
    let mut rng = SimRng::new(17);
    // Disjoint ranges: op i of member m at block i (the window: 2 blocks, few ops).
    let mut plan: Vec<(usize, u64, Vec<AlignedBuf>)> = Vec::new();
    for i in 0..200u64 {
        let m = (i % 3) as usize;
        let slot = i / 3;
        let (offset, parts) = match m {
            2 => ((slot % 2) * 4096, 1),
            _ => (slot * 65536, 1 + (i % 4) as usize),
        };
        if m == 2 && slot >= 2 {
            continue;
        }
        let blocks = if m == 2 { 1 } else { 1 + rng.below(4) as usize };
        let bufs: Vec<AlignedBuf> = (0..parts)
            .map(|_| {
                let mut b = AlignedBuf::zeroed(4096 * blocks, 4096);
                b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
                b
            })
            .collect();
        plan.push((m, offset, bufs));
    }
    let before = uring::thread_ring_ops();
    assert!(uring::ready());
    let slices: Vec<Vec<&[u8]>> = plan
        .iter()
        .map(|(_, _, b)| b.iter().map(|b| &b[..]).collect())
        .collect();
    let mut ios: Vec<RingIo<'_, '_, '_>> = plan
        .iter()
        .zip(&slices)
        .map(|((m, offset, _), bufs)| RingIo {
            target: members[*m]
                .ring_target(RingAsk::write(*offset, bufs))
                .expect("target"),
            data: RingData::Write(bufs),
        })
        .collect();
    let n = ios.len() as u64;
    assert!(n > 64, "more operations than ring entries");
    for (r, _) in uring::submit(&mut ios, Duration::from_secs(10)) {
        r.unwrap();
    }
    drop(ios);
    assert_eq!(uring::thread_ring_ops() - before, n);
    for (m, offset, bufs) in &plan {
        let want: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let mut got = vec![0u8; want.len()];
        members[*m].read_at(&mut got, *offset).unwrap();
        assert!(
            got == want,
            "member {m} at {offset}: not what the ring wrote"
        );
    }
    // Reads through the ring, vectored, against positional reads.
    let mut outs: Vec<Vec<AlignedBuf>> = plan
        .iter()
        .map(|(_, _, b)| {
            b.iter()
                .map(|b| AlignedBuf::zeroed(b.len(), 4096))
                .collect()
        })
        .collect();
    let mut views: Vec<Vec<&mut [u8]>> = outs
        .iter_mut()
        .map(|o| o.iter_mut().map(|b| &mut b[..]).collect())
        .collect();
    let mut ios: Vec<RingIo<'_, '_, '_>> = plan
        .iter()
        .zip(views.iter_mut())
        .map(|((m, offset, _), bufs)| RingIo {
            target: members[*m]
                .ring_target(RingAsk::read(*offset, bufs))
                .expect("target"),
            data: RingData::Read(bufs),
        })
        .collect();
    for (r, _) in uring::submit(&mut ios, Duration::from_secs(10)) {
        r.unwrap();
    }
    drop(ios);
    drop(views);
    for ((_, _, wrote), read) in plan.iter().zip(&outs) {
        for (w, r) in wrote.iter().zip(read) {
            assert!(w[..] == r[..], "a ring read differs from what was written");
        }
    }
}

/// Which operations get a ring target: none with `--member-io threads`, none for writes to a
/// read-only member or through a closed fence (reads still), none for a direct operation that
/// is not aligned or a range outside the member (the member's own call bounces or refuses it),
/// none from a member under `--local-io-deadline` (`Detached`: its calls must stay abandonable,
/// which a ring operation on borrowed buffers is not); a window moves the offset.
#[test]
fn ring_targets_are_offered_only_where_the_ring_may_take_the_operation() {
    let d = dir();
    let buf = AlignedBuf::zeroed(8192, 4096);
    let aligned = [&buf[..4096]];
    let odd_address = [&buf[1..4097]];
    let write = RingAsk::write(4096, &aligned);
    let path = d.path().join("a.img");
    let m = open(&path, 1 << 20, MemberCache::Direct, MemberIo::Auto);
    let t = m.ring_target(write).expect("aligned direct write");
    assert!(t.is_direct() && !t.is_forced());
    assert!(
        m.ring_target(RingAsk::write(100, &aligned)).is_none(),
        "unaligned offset"
    );
    assert!(
        m.ring_target(RingAsk::write(0, &odd_address)).is_none(),
        "odd address"
    );
    assert!(
        m.ring_target(RingAsk::write(1 << 20, &aligned)).is_none(),
        "past the end"
    );
    drop(m);
    let forced = open(&path, 1 << 20, MemberCache::Buffered, MemberIo::Uring);
    let t = forced
        .ring_target(RingAsk::write(100, &odd_address))
        .expect("buffered: any");
    assert!(!t.is_direct() && t.is_forced());
    drop(forced);
    let threads = open(&path, 1 << 20, MemberCache::Direct, MemberIo::Threads);
    assert!(threads.ring_target(write).is_none());
    drop(threads);
    let ro = FileMember::open_cached(
        &path,
        "ro",
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
        MemberCache::Direct,
    )
    .unwrap();
    assert!(ro.ring_target(write).is_none(), "read-only: no write");
    let mut rbuf = AlignedBuf::zeroed(4096, 4096);
    let read_bufs = [&mut rbuf[..]];
    assert!(ro.ring_target(RingAsk::read(0, &read_bufs)).is_some());
    drop(ro);

    let inner: Arc<dyn Member> =
        Arc::new(open(&path, 1 << 20, MemberCache::Direct, MemberIo::Auto));
    let fence = Fence::new();
    let fenced = fence.wrap(Arc::new(Window::new(inner.clone(), 8192, 65536)));
    assert!(
        fenced
            .ring_target(RingAsk::write(65536, &aligned))
            .is_none(),
        "outside the window"
    );
    assert!(fenced.ring_target(RingAsk::write(4096, &aligned)).is_some());
    let mut sevens = AlignedBuf::zeroed(4096, 4096);
    sevens.fill(7);
    ring_write(fenced.as_ref(), &sevens, 4096);
    let mut got = vec![0u8; 4096];
    inner.read_at(&mut got, 8192 + 4096).unwrap();
    assert!(
        got.iter().all(|&b| b == 7),
        "the window's offset was applied"
    );
    fence.close();
    assert!(
        fenced.ring_target(RingAsk::write(4096, &aligned)).is_none(),
        "fence closed"
    );
    assert!(
        fenced.ring_target(RingAsk::read(0, &read_bufs)).is_some(),
        "reads pass"
    );
    let detached = Detached::new(inner, Duration::from_secs(5));
    assert!(
        detached.ring_target(write).is_none(),
        "a detached member keeps its threads"
    );
}

/// `--member-io` parses as the command line gives it.
#[test]
fn member_io_parses() {
    for (text, io) in [
        ("auto", MemberIo::Auto),
        ("uring", MemberIo::Uring),
        ("threads", MemberIo::Threads),
    ] {
        assert_eq!(text.parse::<MemberIo>().unwrap(), io);
        assert_eq!(io.to_string(), text);
    }
    let err = "ring".parse::<MemberIo>().unwrap_err();
    assert!(err.contains("auto") && err.contains("threads"), "{err}");
}

/// A direct write through the ring holds its block's lock as a positional one does: racing a
/// partial write's read-modify-write of the same block, it is never undone outside the partial
/// write's bytes (member tests/direct.rs's race, the aligned side through the ring).
#[test]
fn a_ring_write_racing_a_partial_write_of_its_block_is_not_undone() {
    let d = dir();
    let file = open(
        &d.path().join("m.img"),
        1 << 20,
        MemberCache::Direct,
        MemberIo::Auto,
    );
    let block = file.direct_align().unwrap() as usize;
    let m: Arc<dyn Member> = Arc::new(file);
    let writer = Arc::clone(&m);
    common::race_aligned_and_partial_writes(&m, block, 400, |b| ring_write(writer.as_ref(), b, 0));
}
