//! `service::array_journal` driven as a library, as a second front end would: a journal added
//! to a stopped array is referenced by every superblock; started without it, a write-through
//! journal is dropped and detached, a write-back one refused unless its loss is forced (and
//! left attached by the refusal); `remove` forgets it.

use std::sync::Arc;

use journal::Mode;
use member::{Member, OpenOptions};
use ondisk::JournalRef;
use service::array_journal::{self, JournalAtStart, JournalOptions};
use volume::AssembleOptions;

/// A clean RAID 5 of three RAM members with a journal in `mode` on a RAM member.
fn array_with_journal(mode: Mode) -> (Vec<Arc<dyn Member>>, JournalRef) {
    let members: Vec<_> = (0..3)
        .map(|_| member::open("mem:8M", &OpenOptions::default()).unwrap())
        .collect();
    let create = ondisk::CreateOptions::new("raid5".parse().unwrap(), "lib");
    ondisk::create(&members, &create).unwrap();
    let opts = JournalOptions {
        mode,
        ..JournalOptions::default()
    };
    let jsb = array_journal::add(&members, "mem:4M", &opts).unwrap();
    let reference = ondisk::freshest_superblock(&members).unwrap().journal;
    assert_eq!(reference.map(|j| j.uuid), Some(jsb.journal_uuid));
    (members, reference.unwrap())
}

fn start_without_journal(
    members: &[Arc<dyn Member>],
    force_loss: bool,
) -> anyhow::Result<JournalAtStart> {
    let opts = JournalOptions {
        force_loss,
        ..JournalOptions::default()
    };
    array_journal::check_before_assembly(&opts, members, false, &AssembleOptions::default())
}

#[test]
fn a_lost_write_through_journal_is_dropped_and_detached() {
    let (members, reference) = array_with_journal(Mode::WriteThrough);
    let JournalAtStart::Dropped(dropped) = start_without_journal(&members, false).unwrap() else {
        panic!("not dropped");
    };
    assert_eq!(dropped.reference, reference);
    assert!(dropped.detached);
    let warning = dropped.to_string();
    assert!(warning.contains("write hole is open again"), "{warning}");
    assert_eq!(ondisk::freshest_superblock(&members).unwrap().journal, None);
}

#[test]
fn a_lost_write_back_journal_is_refused_unless_its_loss_is_forced() {
    let (members, reference) = array_with_journal(Mode::WriteBack);
    let refused = start_without_journal(&members, false)
        .err()
        .expect("refused");
    let text = refused.to_string();
    assert!(
        text.contains("--force-journal-loss") && text.contains("shut down cleanly"),
        "{text}"
    );
    let kept = ondisk::freshest_superblock(&members).unwrap().journal;
    assert_eq!(kept, Some(reference), "the refusal detached the journal");
    let JournalAtStart::Dropped(dropped) = start_without_journal(&members, true).unwrap() else {
        panic!("not dropped");
    };
    let warning = dropped.to_string();
    assert!(warning.contains("forced"), "{warning}");
    assert_eq!(ondisk::freshest_superblock(&members).unwrap().journal, None);
}

#[test]
fn a_second_journal_is_refused_and_remove_forgets_the_first() {
    let (members, reference) = array_with_journal(Mode::WriteThrough);
    let again = array_journal::add(&members, "mem:4M", &JournalOptions::default());
    let text = again.expect_err("refused").to_string();
    assert!(text.contains("already has journal"), "{text}");
    let removed = array_journal::remove(&members, &JournalOptions::default()).unwrap();
    assert_eq!(removed.reference, reference);
    assert!(removed.dropped.is_some() && removed.replayed.is_none());
    assert_eq!(ondisk::freshest_superblock(&members).unwrap().journal, None);
}
