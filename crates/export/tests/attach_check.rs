//! The attach check: a journal whose largest record cannot hold one stripe's apply record (every
//! member's chunk, and a table of up to two entries per member) is refused at attach, naming
//! the size it needs, instead of failing writes later. A wide array (64 members of 4 KiB
//! chunks) needs more than "every member's chunk + 4 KiB", the estimate before.

use std::sync::Arc;

use export::{AttachError, AttachOptions, JournalLayer};
use journal::Mode;
use layout::Level;
use member::{MemMember, Member};
use ondisk::{create, CreateOptions, Uuid};
use volume::{assemble, AssembleOptions};

const MEMBERS: usize = 64;
const CHUNK: u64 = 4096;

fn attach_with_journal(journal_bytes: u64) -> Result<(), AttachError> {
    let members: Vec<Arc<dyn Member>> = (0..MEMBERS)
        .map(|i| Arc::new(MemMember::new(&format!("m{i}"), 2 << 20).unwrap()) as Arc<dyn Member>)
        .collect();
    let mut opts = CreateOptions::new(Level::Raid6, "wide");
    opts.chunk_bytes = CHUNK;
    opts.assume_clean = true;
    create(&members, &opts).unwrap();
    let jm: Arc<dyn Member> = Arc::new(MemMember::new("journal", journal_bytes).unwrap());
    let jsb = journal::format(jm.as_ref(), Uuid::new_v4(), Mode::WriteBack).unwrap();
    let volume = Arc::new(assemble(members, &AssembleOptions::default()).unwrap());
    let result = JournalLayer::attach(jm, jsb, &volume, AttachOptions::default()).map(|_| ());
    volume.close().unwrap();
    result
}

#[test]
fn a_journal_too_small_for_one_wide_stripe_is_refused_at_attach() {
    // Largest record = ring / 16 = the old estimate, 64 × 4 KiB + 4 KiB: one apply record of
    // 64 chunks and 128 table entries does not fit it.
    let old_estimate = CHUNK * MEMBERS as u64 + 4096;
    let journal_bytes = old_estimate * 16 + journal::RING_OFFSET;
    match attach_with_journal(journal_bytes) {
        Err(e @ AttachError::TooSmall { .. }) => {
            let text = e.to_string();
            assert!(text.contains("journal"), "{text}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(()) => panic!("a journal that cannot hold one stripe's record was accepted"),
    }
    attach_with_journal(2 * journal_bytes).expect("twice the size fits");
}
