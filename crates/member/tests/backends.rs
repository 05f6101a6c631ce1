//! Behaviour of every member backend: read-after-write, unaligned I/O, trim and write-zeroes
//! read back zeroes, bounds errors name the member, sparse files stay sparse, block devices via
//! a loop device when the environment allows it.

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::Arc;

use member::{open, FileMember, MemMember, Member, MemberError, OpenOptions, Window};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn read(m: &dyn Member, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xAAu8; len];
    m.read_at(&mut buf, offset).unwrap();
    buf
}

/// The behaviour every backend shares; `m` must be all zeroes and at least 1 MiB.
fn exercise(m: &dyn Member) {
    let size = m.len();
    assert!(size >= 1 << 20);
    assert_eq!(
        read(m, 0, 4096),
        vec![0u8; 4096],
        "fresh member reads zeroes"
    );
    // Unaligned write crossing 4 KiB and 64 KiB boundaries.
    let data = pattern(200_000, 7);
    m.write_at(&data, 65_536 - 1234).unwrap();
    assert_eq!(read(m, 65_536 - 1234, data.len()), data);
    assert_eq!(read(m, 65_536 - 1235, 1), vec![0]);
    // Trim an unaligned middle piece: zeroes there, data kept around it.
    m.trim(70_001, 100_003).unwrap();
    let got = read(m, 65_536 - 1234, data.len());
    let start = (70_001 - (65_536 - 1234)) as usize;
    let mut want = data.clone();
    want[start..start + 100_003].fill(0);
    assert_eq!(got, want, "trim leaves zeroes, neighbours intact");
    // write_zeroes the rest.
    m.write_zeroes(65_536 - 1234, data.len() as u64).unwrap();
    assert_eq!(read(m, 65_536 - 1234, data.len()), vec![0u8; data.len()]);
    // Last byte is writable; one past it is an error naming the member.
    m.write_at(&[9], size - 1).unwrap();
    assert_eq!(read(m, size - 1, 1), vec![9]);
    let err = m.write_at(&[1, 2], size - 1).unwrap_err();
    assert!(err.to_string().contains(m.name()), "{err}");
    assert!(err.to_string().contains("past the end"), "{err}");
    let mut buf = [0u8; 2];
    let err = m.read_at(&mut buf, size - 1).unwrap_err();
    assert!(err.to_string().contains(m.name()), "{err}");
    assert!(
        m.read_at(&mut buf, u64::MAX).is_err(),
        "offset overflow is an error"
    );
    assert!(m.trim(size, 1).is_err());
    assert!(m.write_zeroes(u64::MAX, 2).is_err());
    m.flush().unwrap();
    // A durable write lands where asked (unaligned, across a page) and nowhere else; its
    // bounds are checked like a plain write's.
    let durable = pattern(5000, 11);
    m.write_durable_at(&durable, 300_001).unwrap();
    assert_eq!(read(m, 300_001, durable.len()), durable);
    assert_eq!(read(m, 300_000, 1), vec![0]);
    assert_eq!(read(m, 305_001, 1), vec![0]);
    let err = m.write_durable_at(&[1, 2], size - 1).unwrap_err();
    assert!(err.to_string().contains(m.name()), "{err}");
    assert!(err.to_string().contains("past the end"), "{err}");
    // Zero-length operations at the end are fine.
    m.write_at(&[], size).unwrap();
    m.trim(size, 0).unwrap();
}

/// Vectored reads and writes: the buffers one after the other, bounds checked on the total
/// before anything is written.
fn exercise_vectored(m: &dyn Member) {
    let size = m.len();
    let parts = [
        pattern(3000, 21),
        Vec::new(),
        pattern(70_000, 22),
        pattern(1, 23),
    ];
    let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    m.write_vectored_at(&slices, 400_001).unwrap();
    let whole = parts.concat();
    assert_eq!(read(m, 400_001, whole.len()), whole);
    assert_eq!(read(m, 400_000, 1), vec![0]);
    assert_eq!(read(m, 400_001 + whole.len() as u64, 1), vec![0]);
    let (mut x, mut y) = (vec![0u8; 50_000], vec![0u8; whole.len() - 50_000]);
    m.read_vectored_at(&mut [&mut x, &mut [], &mut y], 400_001)
        .unwrap();
    assert_eq!([x, y].concat(), whole);
    let last = read(m, size - 1, 1);
    let err = m.write_vectored_at(&[&[1], &[2]], size - 1).unwrap_err();
    assert!(err.to_string().contains(m.name()), "{err}");
    assert!(err.to_string().contains("past the end"), "{err}");
    assert_eq!(
        read(m, size - 1, 1),
        last,
        "nothing written past a refused range"
    );
    let (mut a, mut b) = ([0u8; 1], [0u8; 1]);
    assert!(m.read_vectored_at(&mut [&mut a, &mut b], size - 1).is_err());
    m.write_vectored_at(&[], size).unwrap();
    // More buffers than one preadv/pwritev call takes (IOV_MAX, 1024): the rest is continued.
    let many: Vec<Vec<u8>> = (0..1500usize)
        .map(|i| pattern(7 + i % 5, i as u8))
        .collect();
    let slices: Vec<&[u8]> = many.iter().map(|p| p.as_slice()).collect();
    m.write_vectored_at(&slices, 900_000).unwrap();
    let whole = many.concat();
    let mut back: Vec<Vec<u8>> = many.iter().map(|p| vec![0u8; p.len()]).collect();
    let mut refs: Vec<&mut [u8]> = back.iter_mut().map(|b| b.as_mut_slice()).collect();
    m.read_vectored_at(&mut refs, 900_000).unwrap();
    assert_eq!(back.concat(), whole);
    assert_eq!(read(m, 900_000, whole.len()), whole);
}

#[test]
fn mem_member_behaves() {
    let m = open("mem:4M", &OpenOptions::default()).unwrap();
    assert_eq!(m.len(), 4 << 20);
    assert_eq!(m.name(), "mem:4M");
    exercise(m.as_ref());
    exercise_vectored(m.as_ref());
}

#[test]
fn mem_member_is_sparse_and_trim_frees_pages() {
    let m = MemMember::new("mem:1T", 1 << 40).unwrap();
    assert_eq!(m.pages_allocated(), 0);
    m.write_at(&[1; 10], (1 << 40) - 10).unwrap();
    m.write_at(&[1; 70_000], 1 << 30).unwrap();
    assert_eq!(m.pages_allocated(), 3);
    m.trim(1 << 30, 65_536).unwrap();
    assert_eq!(m.pages_allocated(), 2, "a whole trimmed page is released");
}

#[test]
fn mem_member_parallel_writes_to_different_pages() {
    let m = Arc::new(MemMember::new("mem:64M", 64 << 20).unwrap());
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for i in 0..64u64 {
                    let offset = (i * 8 + u64::from(t)) * 65_536 + 17;
                    m.write_at(&pattern(4000, t), offset).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..8u8 {
        for i in 0..64u64 {
            let offset = (i * 8 + u64::from(t)) * 65_536 + 17;
            assert_eq!(read(m.as_ref(), offset, 4000), pattern(4000, t));
        }
    }
}

#[test]
fn bad_specs_are_refused() {
    let opts = OpenOptions::default();
    for (spec, needle) in [
        ("mem:", "empty size"),
        ("mem:12Q", "not a number"),
        ("mem:0", "zero bytes"),
        ("", "empty member name"),
        ("/nonexistent/raidkit-member", "does not exist"),
        ("/tmp", "directory"),
        ("/dev/null", "character device"),
    ] {
        let err = open(spec, &opts).unwrap_err();
        assert!(err.to_string().contains(needle), "{spec}: {err}");
    }
}

#[test]
fn file_member_behaves_and_stays_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m0");
    let spec = path.to_str().unwrap();
    let opts = OpenOptions {
        create_size: Some(64 << 20),
        read_only: false,
        ..OpenOptions::default()
    };
    let m = open(spec, &opts).unwrap();
    assert_eq!(m.len(), 64 << 20);
    assert_eq!(m.name(), spec);
    assert_eq!(
        std::fs::metadata(&path).unwrap().blocks(),
        0,
        "created sparse"
    );
    exercise(m.as_ref());
    let blocks = std::fs::metadata(&path).unwrap().blocks();
    assert!(
        blocks * 512 <= 256 << 10,
        "after trims only edges allocated: {blocks} blocks"
    );
    exercise_vectored(m.as_ref());
    // Trim of a large written region releases its blocks.
    m.write_at(&vec![5u8; 8 << 20], 16 << 20).unwrap();
    m.flush().unwrap();
    let before = std::fs::metadata(&path).unwrap().blocks();
    m.trim(16 << 20, 8 << 20).unwrap();
    let after = std::fs::metadata(&path).unwrap().blocks();
    assert!(
        before - after >= (8 << 20) / 512,
        "trim punched a hole: {before} -> {after}"
    );
    // Existing file: opened as is, size unchanged even with create_size.
    drop(m);
    let again = open(
        spec,
        &OpenOptions {
            create_size: Some(1 << 20),
            read_only: false,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(again.len(), 64 << 20);
    assert_eq!(read(again.as_ref(), (64 << 20) - 1, 1), vec![9]);
}

#[test]
fn read_only_file_member_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro");
    std::fs::write(&path, vec![3u8; 8192]).unwrap();
    let opts = OpenOptions {
        create_size: None,
        read_only: true,
        ..OpenOptions::default()
    };
    let m = FileMember::open(&path, "ro-member", &opts).unwrap();
    assert_eq!(read(&m, 100, 3), vec![3, 3, 3]);
    let err = m.write_at(&[1], 0).unwrap_err();
    assert!(err.to_string().contains("ro-member"), "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(m.trim(0, 4096).is_err());
    assert_eq!(read(&m, 0, 1), vec![3]);
    m.flush().unwrap();
}

#[test]
fn missing_file_without_size_and_empty_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let err = open(path.to_str().unwrap(), &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, MemberError::Missing { .. }), "{err}");
    assert!(!path.exists(), "nothing created");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let err = open(empty.to_str().unwrap(), &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("zero bytes"), "{err}");
}

#[test]
fn window_maps_offsets_and_checks_bounds() {
    let inner = open("mem:2M", &OpenOptions::default()).unwrap();
    let w = Window::new(Arc::clone(&inner), 1 << 20, 1 << 20);
    assert_eq!(w.len(), 1 << 20);
    exercise(&w);
    exercise_vectored(&w);
    w.write_at(b"abc", 5).unwrap();
    assert_eq!(read(inner.as_ref(), (1 << 20) + 5, 3), b"abc".to_vec());
    assert_eq!(
        read(inner.as_ref(), 0, 1 << 20),
        vec![0u8; 1 << 20],
        "outside untouched"
    );
    assert!(w.name().contains("mem:2M"), "{}", w.name());
}

#[test]
#[should_panic(expected = "does not fit")]
fn window_past_the_end_panics_at_construction() {
    let inner = open("mem:1M", &OpenOptions::default()).unwrap();
    let _ = Window::new(inner, 4096, 1 << 20);
}

/// Attaches `file` to a free loop device; `None` (recorded as an environment-dependent skip)
/// when losetup does not work here (not root, no loop devices). losetup itself must be there.
fn attach_loop(file: &std::path::Path) -> Option<String> {
    if !testsupport::require_tool("losetup") {
        return None;
    }
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(file)
        .output()
        .expect("run losetup");
    if !out.status.success() {
        testsupport::skip_environment(&format!(
            "losetup cannot attach a loop device here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn block_device_member_via_loop_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backing");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(8 << 20).unwrap();
    let Some(dev) = attach_loop(&path) else {
        return;
    };
    let result = std::panic::catch_unwind(|| {
        let m = open(&dev, &OpenOptions::default()).unwrap();
        assert_eq!(m.len(), 8 << 20, "size from BLKGETSIZE64");
        exercise(m.as_ref());
        exercise_vectored(m.as_ref());
        // Aligned trim goes through fallocate/BLKZEROOUT.
        m.write_at(&vec![7u8; 1 << 20], 2 << 20).unwrap();
        m.trim(2 << 20, 1 << 20).unwrap();
        assert_eq!(read(m.as_ref(), 2 << 20, 1 << 20), vec![0u8; 1 << 20]);
        m.flush().unwrap();
    });
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
