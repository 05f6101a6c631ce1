//! Spare groups (mdadm's `spare-group`): arrays with the same `spare_group` share their spares.
//! When an array of a group is degraded and has no spare of its own, a spare of another array
//! of the group moves to it: taken out of the lending array (`Volume::take_spare`: its
//! superblock erased) and added to the degraded one, which rebuilds onto it.
//!
//! [`decide`] is the pure part: from a view of every array of the groups, which spare moves
//! where, or that none of the group's spares is large enough. The monitor thread acts on it
//! (`monitor::Monitor`), off the I/O path.

use std::collections::BTreeSet;

use volume::{ArrayHealth, MemberState, VolumeStatus};

/// What [`decide`] needs to know of one array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayView {
    /// The array's name in the configuration (unique in a daemon).
    pub name: String,
    pub group: Option<String>,
    /// Roles a spare could rebuild ([`roles_wanting`]).
    pub roles_wanting: usize,
    /// Its spares: name and whole size in bytes.
    pub spares: Vec<(String, u64)>,
    /// The size a whole member needs to take any of its roles.
    pub member_bytes_needed: u64,
}

/// What to do in a spare group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take `spare` out of array `from` and add it to array `to`.
    Move {
        group: String,
        from: String,
        to: String,
        spare: String,
        spare_bytes: u64,
    },
    /// Array `to` is degraded and the group has spares to lend, but none is large enough:
    /// `largest` is the largest of them (array, spare, bytes).
    NoneFits {
        group: String,
        to: String,
        needed: u64,
        largest: (String, String, u64),
    },
}

/// Roles of the array that are faulty or missing with nothing rebuilding onto them: what a
/// spare could rebuild. Zero for a failed array (nothing left to rebuild from) and for a
/// level without redundancy.
pub fn roles_wanting(status: &VolumeStatus) -> usize {
    if status.health == ArrayHealth::Failed {
        return 0;
    }
    let wanting = |m: &&volume::MemberStatus| {
        m.role.is_some() && matches!(m.state, MemberState::Faulty | MemberState::Missing)
    };
    status.members.iter().filter(wanting).count()
}

/// The moves to make now: for each array of a group (in name order) that wants a role rebuilt
/// and has no spare of its own, the smallest spare of another array of its group that fits
/// it, from an array that wants no role itself (an array never lends a spare it needs); one
/// spare per array and round (the next round sees what is still wanting), each spare moved
/// once. `excluded` (array, spare) pairs are not moved (a move of theirs failed). An array
/// that only the too-small spares could serve gets [`Decision::NoneFits`].
pub fn decide(arrays: &[ArrayView], excluded: &BTreeSet<(String, String)>) -> Vec<Decision> {
    let mut sorted: Vec<&ArrayView> = arrays.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut taken = excluded.clone();
    let mut decisions = Vec::new();
    for to in &sorted {
        let Some(group) = &to.group else { continue };
        if to.roles_wanting == 0 || !to.spares.is_empty() {
            continue;
        }
        let lenders = sorted.iter().filter(|from| {
            from.name != to.name && from.group.as_ref() == Some(group) && from.roles_wanting == 0
        });
        let candidates: Vec<(u64, &str, &str)> = lenders
            .flat_map(|from| {
                (from.spares.iter())
                    .map(|(spare, bytes)| (*bytes, from.name.as_str(), spare.as_str()))
            })
            .filter(|(_, from, spare)| !taken.contains(&(from.to_string(), spare.to_string())))
            .collect();
        let fitting = candidates
            .iter()
            .filter(|(bytes, _, _)| *bytes >= to.member_bytes_needed)
            .min();
        match (fitting, candidates.iter().max()) {
            (Some(&(bytes, from, spare)), _) => {
                taken.insert((from.to_string(), spare.to_string()));
                decisions.push(Decision::Move {
                    group: group.clone(),
                    from: from.to_string(),
                    to: to.name.clone(),
                    spare: spare.to_string(),
                    spare_bytes: bytes,
                });
            }
            (None, Some(&(bytes, from, spare))) => decisions.push(Decision::NoneFits {
                group: group.clone(),
                to: to.name.clone(),
                needed: to.member_bytes_needed,
                largest: (from.to_string(), spare.to_string(), bytes),
            }),
            (None, None) => {}
        }
    }
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn array(name: &str, group: Option<&str>, wanting: usize, spares: &[(&str, u64)]) -> ArrayView {
        ArrayView {
            name: name.into(),
            group: group.map(str::to_string),
            roles_wanting: wanting,
            spares: spares.iter().map(|(s, b)| (s.to_string(), *b)).collect(),
            member_bytes_needed: 2 * GIB,
        }
    }

    fn moves(arrays: &[ArrayView]) -> Vec<Decision> {
        decide(arrays, &BTreeSet::new())
    }

    fn moved(from: &str, to: &str, spare: &str, bytes: u64) -> Decision {
        Decision::Move {
            group: "shelf".into(),
            from: from.into(),
            to: to.into(),
            spare: spare.into(),
            spare_bytes: bytes,
        }
    }

    #[test]
    fn a_degraded_array_without_a_spare_gets_one_from_its_group() {
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array("b", Some("shelf"), 0, &[("/dev/sdx", 2 * GIB)]),
        ];
        assert_eq!(moves(&arrays), [moved("b", "a", "/dev/sdx", 2 * GIB)]);
    }

    #[test]
    fn nothing_moves_when_no_array_wants_or_the_degraded_one_has_its_own_spare() {
        let healthy = [
            array("a", Some("shelf"), 0, &[]),
            array("b", Some("shelf"), 0, &[("/dev/sdx", 2 * GIB)]),
        ];
        assert_eq!(moves(&healthy), []);
        // Its own spare is rebuilt onto by its own volume.
        let own = [
            array("a", Some("shelf"), 1, &[("/dev/sdw", 2 * GIB)]),
            array("b", Some("shelf"), 0, &[("/dev/sdx", 2 * GIB)]),
        ];
        assert_eq!(moves(&own), []);
    }

    #[test]
    fn only_arrays_of_the_same_group_lend() {
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array("b", Some("other"), 0, &[("/dev/sdx", 2 * GIB)]),
            array("c", None, 0, &[("/dev/sdy", 2 * GIB)]),
        ];
        assert_eq!(moves(&arrays), []);
        // An array in no group borrows from nobody.
        let ungrouped = [
            array("a", None, 1, &[]),
            array("b", None, 0, &[("/dev/sdx", 2 * GIB)]),
        ];
        assert_eq!(moves(&ungrouped), []);
    }

    #[test]
    fn an_array_that_is_degraded_itself_keeps_its_spare() {
        // b wants a role too (its own worker will rebuild onto its spare): it lends nothing.
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array("b", Some("shelf"), 1, &[("/dev/sdx", 2 * GIB)]),
        ];
        assert_eq!(moves(&arrays), []);
    }

    #[test]
    fn a_spare_too_small_is_never_moved_and_that_is_said() {
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array("b", Some("shelf"), 0, &[("/dev/small", GIB)]),
            array("c", Some("shelf"), 0, &[("/dev/smaller", GIB / 2)]),
        ];
        assert_eq!(
            moves(&arrays),
            [Decision::NoneFits {
                group: "shelf".into(),
                to: "a".into(),
                needed: 2 * GIB,
                largest: ("b".into(), "/dev/small".into(), GIB),
            }]
        );
        // With one that fits, the smallest that fits is chosen.
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array(
                "b",
                Some("shelf"),
                0,
                &[("/dev/small", GIB), ("/dev/big", 4 * GIB)],
            ),
            array("c", Some("shelf"), 0, &[("/dev/fits", 3 * GIB)]),
        ];
        assert_eq!(moves(&arrays), [moved("c", "a", "/dev/fits", 3 * GIB)]);
    }

    #[test]
    fn each_spare_moves_once_and_failed_moves_are_not_retried() {
        let arrays = [
            array("a", Some("shelf"), 1, &[]),
            array("b", Some("shelf"), 2, &[]),
            array("c", Some("shelf"), 0, &[("/dev/sdx", 2 * GIB)]),
        ];
        // One spare, two arrays wanting: the first by name gets it, the other nothing.
        assert_eq!(moves(&arrays), [moved("c", "a", "/dev/sdx", 2 * GIB)]);
        let failed = BTreeSet::from([("c".to_string(), "/dev/sdx".to_string())]);
        assert_eq!(decide(&arrays, &failed), []);
    }
}
