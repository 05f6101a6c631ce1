//! [`Snapshot`]: what `GET /v1/stats` serves and the metrics listener encodes: one array's
//! I/O counters (as its clients see it, and per member) with its status, at one moment. The
//! counters are monotonic totals; rates are the difference of two snapshots
//! (`iostats::rates`), as iostat computes them from two readings of /proc/diskstats.

use iostats::IoSnapshot;
use serde::{Deserialize, Serialize};
use volume::{MemberState, MemberStatus};

use crate::status::Status;

/// One array at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Wall-clock time it was taken, milliseconds since the Unix epoch (for display; rates use
    /// the counters' own monotonic `at_ns`).
    pub unix_ms: u64,
    /// The array's status then: health, members and their states, task, journal, cache.
    pub status: Status,
    /// The array's requests as its clients sent them (null: the front end counts none).
    pub client: Option<IoSnapshot>,
    /// Each role's member operations, by role (`status.members` names the member of a role).
    pub members: Vec<IoSnapshot>,
}

impl Snapshot {
    /// The member serving `role` now, as status lists it (not a replacement being filled).
    pub fn member(&self, role: usize) -> Option<&MemberStatus> {
        (self.status.volume.members.iter())
            .find(|m| m.role == Some(role) && m.state != MemberState::ReplacementTarget)
    }

    /// The name of the member serving `role` now.
    pub fn member_name(&self, role: usize) -> Option<&str> {
        self.member(role).map(|m| m.name.as_str())
    }
}

/// Milliseconds since the Unix epoch now.
pub fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_names_the_member_of_a_role() {
        let mut client = IoSnapshot::default();
        client.write.ops = 3;
        let snapshot = Snapshot {
            unix_ms: 1,
            status: crate::status::tests::full(),
            client: Some(client),
            members: vec![IoSnapshot::default(); 2],
        };
        let text = serde_json::to_string(&snapshot).unwrap();
        assert_eq!(serde_json::from_str::<Snapshot>(&text).unwrap(), snapshot);
        // Role 1 is served by "b" (being replaced), not by its replacement target "c".
        assert_eq!(snapshot.member_name(0), Some("a"));
        assert_eq!(snapshot.member_name(1), Some("b"));
        let replaced = snapshot.member(1).map(|m| m.state);
        assert_eq!(replaced, Some(MemberState::Replacing));
        assert_eq!(snapshot.member_name(2), None);
        let mut served = serde_json::to_value(&snapshot).unwrap();
        served["client"].as_object_mut().unwrap().remove("busy_ns");
        assert!(serde_json::from_value::<Snapshot>(served).is_err());
    }
}
