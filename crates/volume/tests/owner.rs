//! The owner record (`feature_compat` bit 1): an assembly for writing records its process on
//! every member with a lease, renews it without touching `events`, and clears it at release;
//! a second assembly refuses while that owner lives (naming the member, pid and host), takes
//! over from another host with `force_owner`, never from a process running on this host; the
//! first process then learns it was taken over. Arrays without a record assemble as before.

use std::sync::Arc;

use member::{Member, OpenOptions};
use ondisk::owner::ThisHost;
use ondisk::{
    create, read_superblock, AssembleError, CreateOptions, Superblock, FEATURE_COMPAT_OWNER,
    SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET,
};
use volume::{assemble, AssembleOptions};

fn array() -> Vec<Arc<dyn Member>> {
    let members: Vec<Arc<dyn Member>> = (0..3)
        .map(|_| member::open("mem:8M", &OpenOptions::default()).unwrap())
        .collect();
    create(
        &members,
        &CreateOptions::new("raid5".parse().unwrap(), "owned"),
    )
    .unwrap();
    members
}

fn owned_by(me: &ThisHost, force_owner: bool) -> AssembleOptions {
    AssembleOptions {
        owner: Some(me.clone()),
        force_owner,
        ..AssembleOptions::default()
    }
}

/// This process seen as if from another host: a different machine id (so its pid cannot be
/// looked up, and only the lease tells whether it lives).
fn other_host() -> ThisHost {
    let mut them = ThisHost::get();
    them.host_id = [0x5a; 16];
    them.host_name = "elsewhere".to_string();
    them
}

fn sbs(members: &[Arc<dyn Member>]) -> Vec<Superblock> {
    members
        .iter()
        .map(|m| read_superblock(m.as_ref()).unwrap())
        .collect()
}

#[test]
fn an_owner_record_roundtrips_at_its_documented_bytes_and_is_optional() {
    let members = array();
    let mut sb = read_superblock(members[0].as_ref()).unwrap();
    assert_eq!(sb.owner, None, "a new array has no owner");
    assert_eq!(sb.feature_compat & FEATURE_COMPAT_OWNER, 0);
    let mut owner = ThisHost::get().owner_record(1_700_000_000, 30);
    owner.renewed_secs = 1_700_000_010;
    owner.process.host_name = "h".repeat(64);
    sb.set_owner(Some(owner.clone()));
    let bytes = sb.encode();
    assert_eq!(u64::from_le_bytes(bytes[16..24].try_into().unwrap()) & 2, 2);
    assert_eq!(bytes[2304..2320], owner.process.host_id);
    assert_eq!(bytes[2320..2336], owner.process.boot_id);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(2336), owner.process.pid);
    assert_eq!(u32_at(2340), 30);
    assert_eq!(u64_at(2344), owner.process.start_ticks);
    assert_eq!(u64_at(2352), 1_700_000_000);
    assert_eq!(u64_at(2360), 1_700_000_010);
    assert_eq!(u64_at(2368), owner.process.pid_namespace);
    assert_eq!(&bytes[2376..2440], "h".repeat(64).as_bytes());
    // Past the record: the key area, then issue 15's feature ranges (3680..3840: here the
    // bad-block list's reference at 3744..3760 and the used-regions map's at 3808..3840) and
    // reserved zeroes.
    assert!(sb.bad_blocks.is_some() && sb.used_map.is_some());
    assert!(
        bytes[2440..3744]
            .iter()
            .chain(&bytes[3760..3808])
            .chain(&bytes[3840..4092])
            .all(|&b| b == 0),
        "the rest stays reserved"
    );
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    // Without its bit the bytes mean nothing (as to a reader that predates the record).
    let mut cleared: Box<[u8; SUPERBLOCK_BYTES]> = bytes.clone();
    cleared[16] &= !2;
    let crc = ondisk::checksum(&cleared);
    cleared[4092..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Superblock::decode(&cleared).unwrap().owner, None);
    // A lease of 0 seconds is invalid.
    let mut zero = sb.clone();
    zero.owner.as_mut().unwrap().lease_secs = 0;
    assert!(zero.validate().is_err());
}

#[test]
fn a_second_assembly_refuses_a_live_owner_and_force_takes_over_from_another_host() {
    let members = array();
    let before = sbs(&members);
    let me = ThisHost::get();
    let first = assemble(members.clone(), &owned_by(&other_host(), false)).unwrap();
    let claimed = sbs(&members);
    for (sb, old) in claimed.iter().zip(&before) {
        let owner = sb.owner.as_ref().expect("the claim is on every member");
        assert_eq!(owner.process.host_name, "elsewhere");
        assert_eq!(owner.lease_secs, ondisk::owner::LEASE_SECS);
        assert_eq!(sb.events, old.events, "a claim does not bump events");
    }
    // A second assembly, as this host: the first's lease is live.
    let err = assemble(members.clone(), &owned_by(&me, false)).unwrap_err();
    assert!(
        matches!(err, AssembleError::Owned { local: false, .. }),
        "{err}"
    );
    let text = err.to_string();
    for needle in [
        "\"owned\"",
        &format!("pid {}", me.pid),
        "host elsewhere",
        "lease renewed ",
        "--force-owner",
        "s for its lease to run out",
    ] {
        assert!(text.contains(needle), "{needle:?} in: {text}");
    }
    assert_eq!(sbs(&members), claimed, "a refusal writes nothing");
    // Renewal keeps events.
    first.renew_owner().unwrap();
    assert!(sbs(&members).iter().all(|sb| sb.events == before[0].events));
    // The operator knows "elsewhere" is gone: force takes over.
    let second = assemble(members.clone(), &owned_by(&me, true)).unwrap();
    assert!(sbs(&members)
        .iter()
        .all(|sb| sb.owner.as_ref().unwrap().process.host_id == me.host_id));
    // The first learns it at its next renewal, and its release leaves the new owner's record.
    let taken = first.renew_owner().unwrap_err();
    assert_eq!(taken.owner.process.pid, me.pid);
    assert!(taken.to_string().contains("taken over"), "{taken}");
    first.release_owner();
    assert!(sbs(&members).iter().all(|sb| sb.owner.is_some()));
    // A clean stop clears the record; the array then assembles without force.
    second.close().unwrap();
    second.release_owner();
    assert!(sbs(&members).iter().all(|sb| sb.owner.is_none()));
    drop((first, second));
    assemble(members.clone(), &owned_by(&me, false)).unwrap();
}

#[test]
fn a_process_running_on_this_host_is_never_forced_out_and_a_dead_one_is_ignored() {
    let members = array();
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let me = ThisHost::get();
    let mut them = me.clone();
    them.pid = child.id();
    them.start_ticks = {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        rest.split_whitespace().nth(19).unwrap().parse().unwrap()
    };
    let first = assemble(members.clone(), &owned_by(&them, false)).unwrap();
    // Lease long expired by its timestamps, but the process runs here: live, even with force.
    let err = assemble(members.clone(), &owned_by(&me, true)).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, AssembleError::Owned { local: true, .. }),
        "{text}"
    );
    assert!(text.contains(&format!("pid {}", child.id())), "{text}");
    assert!(text.contains("runs on this host"), "{text}");
    assert!(
        !text.contains("--force-owner"),
        "force cannot help here: {text}"
    );
    // Killed (no release): gone at once, no force needed.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(first);
    assemble(members.clone(), &owned_by(&me, false)).unwrap();
}

#[test]
fn an_array_without_owner_record_assembles_and_read_only_use_records_none() {
    let members = array();
    // Old arrays (no record, bit 1 clear) open as before, with or without the check.
    let v = assemble(members.clone(), &AssembleOptions::default()).unwrap();
    assert!(sbs(&members).iter().all(|sb| sb.owner.is_none()));
    v.renew_owner().unwrap();
    drop(v);
    let raw = {
        let mut b = [0u8; 8];
        members[0].read_at(&mut b, SUPERBLOCK_OFFSET + 16).unwrap();
        u64::from_le_bytes(b)
    };
    assert_eq!(
        raw & FEATURE_COMPAT_OWNER,
        0,
        "no record written without an owner"
    );
    assemble(members, &owned_by(&ThisHost::get(), false)).unwrap();
}

#[test]
fn create_never_overwrites_a_served_array_force_or_not() {
    let members = array();
    let first = assemble(members.clone(), &owned_by(&other_host(), false)).unwrap();
    let mut opts = CreateOptions::new("raid1".parse().unwrap(), "new");
    opts.force = true;
    let before = sbs(&members);
    let err = create(&members, &opts).unwrap_err().to_string();
    for needle in [
        "\"owned\" is in use by raidkit pid",
        "host elsewhere",
        "s for its lease to run out",
        "--force does not override",
    ] {
        assert!(err.contains(needle), "{needle:?} in: {err}");
    }
    assert!(
        !err.contains("--force-owner"),
        "create has no such flag: {err}"
    );
    assert_eq!(sbs(&members), before, "nothing written");
    assert!(ondisk::refuse_if_served(&members).is_err());
    first.release_owner();
    ondisk::refuse_if_served(&members).unwrap();
    create(&members, &opts).unwrap();
}

/// A member that counts its flushes and durable writes.
#[derive(Debug)]
struct Counted {
    inner: Arc<dyn Member>,
    flushes: std::sync::atomic::AtomicU64,
    durable: std::sync::atomic::AtomicU64,
}

impl Member for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.durable
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.write_durable_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.write_zeroes(offset, len)
    }
}

/// A renewal writes each member's superblock durably on its own, without flushing the member:
/// a flush of a file member would write back every data page written since the last one,
/// every 10 s, with the metadata lock held.
#[test]
fn a_renewal_writes_each_superblock_durably_without_flushing_the_member() {
    let counted: Vec<Arc<Counted>> = array()
        .into_iter()
        .map(|inner| {
            Arc::new(Counted {
                inner,
                flushes: Default::default(),
                durable: Default::default(),
            })
        })
        .collect();
    let members: Vec<Arc<dyn Member>> = counted.iter().map(|c| Arc::clone(c) as _).collect();
    let v = assemble(members.clone(), &owned_by(&ThisHost::get(), false)).unwrap();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::SeqCst);
    let before: Vec<(u64, u64)> = counted
        .iter()
        .map(|c| (load(&c.flushes), load(&c.durable)))
        .collect();
    let renewed_before = sbs(&members)[0].owner.as_ref().unwrap().renewed_secs;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    v.renew_owner().unwrap();
    for (c, (flushes, durable)) in counted.iter().zip(before) {
        assert_eq!(
            load(&c.flushes),
            flushes,
            "{}: a renewal flushed the member",
            c.name()
        );
        assert_eq!(
            load(&c.durable),
            durable + 1,
            "{}: one durable superblock write",
            c.name()
        );
    }
    assert!(sbs(&members)
        .iter()
        .all(|sb| sb.owner.as_ref().unwrap().renewed_secs > renewed_before));
}
