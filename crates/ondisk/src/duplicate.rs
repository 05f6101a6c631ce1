//! Telling whether two members given are the same storage.

use std::sync::Arc;

use member::Member;

/// True when `a` and `b` are the same member given twice: the same object, the same path, or
/// the same storage under two names (`Member::identity`: a file's device and inode, a block
/// device's number, an NBD server and export). Two `mem:SIZE` members with the same spec are
/// different RAM members.
pub fn same_member(a: &Arc<dyn Member>, b: &Arc<dyn Member>) -> bool {
    let same_object = std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b));
    let same_path = a.name() == b.name() && !member::ram_spec(a.name());
    let same_storage = a.identity().is_some() && a.identity() == b.identity();
    same_object || same_path || same_storage
}

/// The first member of `all` that is the same member as an earlier one ([`same_member`]), as
/// (its name, the earlier one's name).
pub fn find_duplicate(all: &[Arc<dyn Member>]) -> Option<(String, String)> {
    all.iter().enumerate().find_map(|(i, m)| {
        let earlier = all[..i].iter().find(|other| same_member(other, m))?;
        Some((m.name().to_string(), earlier.name().to_string()))
    })
}

/// "member X: given more than once", or, when the two names differ, which other name it is.
pub fn describe_duplicate(name: &str, other: &str) -> String {
    if name == other {
        format!("member {name}: given more than once")
    } else {
        format!(
            "member {name}: is the same storage as member {other} (one file, device or export \
             under two names, e.g. a symlink or a relative and an absolute path): give it once"
        )
    }
}
