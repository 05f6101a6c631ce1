//! A write-through journal on storage a power cut empties (tmpfs, a RAM disk) is no reason to
//! skip the members' flush: after FLUSH (or a FUA write) returns, the data is durable on the
//! members themselves. (With the journal on durable storage FLUSH is the journal's: the
//! members are flushed by its checkpoints.)

use std::sync::Arc;

use export::{AttachOptions, JournalLayer};
use journal::{format, read_superblock, Mode};
use member::{MemMember, Member, SimMember};
use nbd::Export;
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions};

const CHUNK: u64 = 16 << 10;
const DATA_OFFSET: u64 = 64 << 10;
const MEMBER_BYTES: u64 = (1 << 20) + DATA_OFFSET;
const JOURNAL_BYTES: u64 = 4 << 20;

/// A RAID 5 of four simulated members (they keep what was not flushed apart) with a
/// write-through journal attached with `opts`; returns the export and the members.
fn raid5_with_journal(opts: AttachOptions) -> (Arc<JournalLayer>, Vec<Arc<SimMember>>) {
    let sims: Vec<Arc<SimMember>> = (0..4)
        .map(|i| Arc::new(SimMember::new(&format!("m{i}"), MEMBER_BYTES)))
        .collect();
    let members: Vec<Arc<dyn Member>> = sims.iter().map(|s| Arc::clone(s) as _).collect();
    let mut create_opts = CreateOptions::new("raid5".parse().unwrap(), "volatile");
    create_opts.chunk_bytes = CHUNK;
    create_opts.data_offset_bytes = DATA_OFFSET;
    create_opts.assume_clean = true;
    create(&members, &create_opts).unwrap();
    for sim in &sims {
        sim.flush().unwrap();
    }
    let volume = Arc::new(assemble(members, &AssembleOptions::default()).unwrap());
    let jm: Arc<dyn Member> = Arc::new(MemMember::new("mem:4M", JOURNAL_BYTES).unwrap());
    format(jm.as_ref(), uuid::Uuid::new_v4(), Mode::WriteThrough).unwrap();
    let jsb = read_superblock(jm.as_ref()).unwrap();
    let (layer, _) = JournalLayer::attach(jm, jsb, &volume, opts).unwrap();
    (Arc::new(layer), sims)
}

fn unflushed(sims: &[Arc<SimMember>]) -> usize {
    sims.iter().map(|s| s.unflushed_count()).sum()
}

#[test]
fn flush_reaches_the_members_when_the_journal_is_volatile() {
    let (layer, sims) = raid5_with_journal(AttachOptions {
        volatile: true,
        ..AttachOptions::default()
    });
    let export = layer.export();
    let data = vec![0x3cu8; 3 * CHUNK as usize];
    export.write(0, &data, false).unwrap();
    export.flush().unwrap();
    assert_eq!(
        unflushed(&sims),
        0,
        "FLUSH returned with data not durable on the members"
    );
    let mut durable = vec![0u8; CHUNK as usize];
    sims[0].read_durable(&mut durable, DATA_OFFSET).unwrap();
    assert_eq!(
        durable,
        data[..CHUNK as usize],
        "member 0's first chunk is not durable"
    );

    // A FUA write is durable on the members when it returns, too.
    export.write(CHUNK * 3, &data, true).unwrap();
    assert_eq!(
        unflushed(&sims),
        0,
        "a FUA write returned with data not durable"
    );
}
