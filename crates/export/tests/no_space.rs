//! A write-back journal whose array runs out of space (the members' filesystem is full): the
//! applier keeps the records instead of failing the array, a client write that would wait for
//! buffer space fails with `StorageFull`, everything acknowledged is applied once space is
//! back, and a close while still full leaves the records for the next start's replay.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use export::{replay_array_writes, WriteBack};
use journal::{format, read_superblock, Journal, Mode};
use layout::Level;
use member::{FaultControl, FaultRule, FaultyMember, MemMember, Member};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions, MemberState, Volume};

const CHUNK: u64 = 16 << 10;
/// Where the array's data starts on each member (after its superblock area).
const DATA_OFFSET: u64 = 64 << 10;
const MEMBER_BYTES: u64 = (1 << 20) + DATA_OFFSET;
const JOURNAL_BYTES: u64 = (4 << 20) + 8192;
const BUFFER_BYTES: u64 = 256 << 10;

struct Rig {
    controls: Vec<FaultControl>,
    members: Vec<Arc<dyn Member>>,
    journal_member: Arc<dyn Member>,
}

impl Rig {
    /// A new RAID 5 array of 4 members that can be made to run out of space.
    fn new() -> Rig {
        let mut controls = Vec::new();
        let members: Vec<Arc<dyn Member>> = (0..4)
            .map(|i| {
                let inner = Arc::new(MemMember::new(&format!("m{i}"), MEMBER_BYTES).unwrap());
                let f = FaultyMember::new(inner);
                controls.push(f.control());
                Arc::new(f) as Arc<dyn Member>
            })
            .collect();
        let mut opts = CreateOptions::new(Level::Raid5, "full");
        opts.chunk_bytes = CHUNK;
        opts.data_offset_bytes = DATA_OFFSET;
        opts.assume_clean = true;
        create(&members, &opts).unwrap();
        let journal_member = Arc::new(MemMember::new("journal", JOURNAL_BYTES).unwrap());
        Rig {
            controls,
            members,
            journal_member,
        }
    }

    fn volume(&self) -> Arc<Volume> {
        Arc::new(assemble(self.members.clone(), &AssembleOptions::default()).unwrap())
    }

    /// Starts the write-back cache over `v`; `fresh` formats the journal first.
    fn write_back(&self, v: &Arc<Volume>, fresh: bool) -> WriteBack {
        let jm = &self.journal_member;
        let sb = match fresh {
            true => format(jm.as_ref(), uuid::Uuid::new_v4(), Mode::WriteBack).unwrap(),
            false => read_superblock(jm.as_ref()).unwrap(),
        };
        let summary = v.replay_journal(jm.as_ref(), &sb).unwrap();
        replay_array_writes(jm.as_ref(), &sb, &summary, v).unwrap();
        v.mark_dirty().unwrap();
        // The buffer stays far below the ring: no background checkpoints needed (the
        // cache's drain checkpoints).
        let j = Journal::start(Arc::clone(jm), sb, &summary).unwrap();
        WriteBack::start(j, Arc::clone(v), BUFFER_BYTES).unwrap()
    }

    /// A fresh write-back session on the volume, written until the array ran out of space
    /// and a write was refused: the volume, the cache, the model of every acknowledged write,
    /// and how many were acknowledged.
    fn out_of_space(&self) -> (Arc<Volume>, WriteBack, Vec<u8>, usize) {
        let a = self.volume();
        let wb = self.write_back(&a, true);
        let mut model = vec![0u8; a.size_bytes() as usize];
        self.fill();
        let acked = write_until_refused(&wb, &mut model);
        (a, wb, model, acked)
    }

    fn fill(&self) {
        for role in [1, 2] {
            self.controls[role].fail_writes_as(FaultRule::Always, ErrorKind::StorageFull);
        }
    }

    fn heal(&self) {
        self.controls.iter().for_each(FaultControl::heal);
    }
}

fn data(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag.wrapping_mul(31) ^ (i as u8)).collect()
}

/// Writes 64 KiB blocks through `wb` until one is refused; returns the model of what was
/// acknowledged and the count.
fn write_until_refused(wb: &WriteBack, model: &mut [u8]) -> usize {
    let block = 64 << 10;
    for i in 0..(model.len() / block) {
        let bytes = data(i as u8 + 1, block);
        match wb.write((i * block) as u64, &bytes) {
            Ok(()) => model[i * block..(i + 1) * block].copy_from_slice(&bytes),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
                assert!(e.to_string().contains("out of space"), "{e}");
                return i;
            }
        }
    }
    panic!("no write was refused although the array is out of space");
}

#[test]
fn write_back_keeps_records_while_the_array_is_out_of_space() {
    let rig = Rig::new();
    let (a, wb, mut model, acked) = rig.out_of_space();
    assert!(acked > 0, "writes into the journal were acknowledged first");
    assert!(wb.flush().is_ok(), "the journal itself has not failed");
    let mut got = vec![0u8; model.len()];
    wb.read(0, &mut got).unwrap();
    assert!(got == model, "acknowledged writes read back while waiting");
    let states: Vec<MemberState> = a.member_status().iter().map(|m| m.state).collect();
    assert_eq!(states, vec![MemberState::Active; 4]);
    rig.heal();
    let deadline = Instant::now() + Duration::from_secs(30);
    while wb.buffered_bytes() > 0 {
        assert!(
            Instant::now() < deadline,
            "never applied after space came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wb.write(0, &data(200, 4096)).unwrap();
    model[..4096].copy_from_slice(&data(200, 4096));
    wb.close().unwrap();
    // Close resyncs the units left half-written, now that there is space.
    a.close().unwrap();
    assert_eq!(a.status().unsynced_bytes, 0);
    a.read(0, &mut got).unwrap();
    assert!(got == model, "the array holds every acknowledged write");
    assert!(a.check().unwrap().is_consistent());
}

#[test]
fn a_close_while_out_of_space_leaves_the_records_for_replay() {
    let rig = Rig::new();
    let (a, wb, model, _) = rig.out_of_space();
    let e = wb.close().expect_err("the buffer cannot be drained");
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
    drop(wb);
    drop(a);
    // The next start, with space: replay applies what was acknowledged.
    rig.heal();
    let a = rig.volume();
    let wb = rig.write_back(&a, false);
    wb.close().unwrap();
    let mut got = vec![0u8; model.len()];
    a.read(0, &mut got).unwrap();
    assert!(got == model, "replay restored every acknowledged write");
}
