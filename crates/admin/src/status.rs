//! [`Status`]: what `GET /v1/status` serves. The server encodes it and the CLI decodes it, one
//! type on both sides (the volume's own [`VolumeStatus`] and the cache's [`CacheStats`] are the
//! library's types, not copies), so a field added on one side cannot be lost on the other.

use cache::CacheStats;
use serde::{Deserialize, Serialize};
use volume::VolumeStatus;

/// The volume's status with the sections a front end keeps outside the volume (filled in by
/// `service::stack::ArrayStack`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Its fields are the top level of the JSON object.
    #[serde(flatten)]
    pub volume: VolumeStatus,
    /// The attached journal; `null` without one.
    pub journal: Option<JournalSection>,
    /// The read cache's counters (capacity 0: the cache is off).
    pub cache: Option<CacheStats>,
    /// The daemon's QoS for the array (latency target, throttle); `null` in `serve`.
    pub qos: Option<QosSection>,
}

/// The QoS section of the status (`nbd::qos`: an array with a latency target, or one that is
/// throttled while another misses its target).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosSection {
    /// `latency_target_us`; null: the array has none (it is the one throttled).
    pub latency_target_us: Option<u64>,
    /// 0: not throttled, up to `max_level`.
    pub throttle_level: u32,
    pub max_level: u32,
    /// Requests admitted at once at this level; null: no limit of the throttle's.
    pub max_in_flight: Option<u32>,
    /// The pause after each request, in multiples of the time it took.
    pub pause_factor: u32,
    /// Requests that waited for admission or paused after their reply, and that time.
    pub throttled_requests: u64,
    pub throttled_us: u64,
    /// Times the array was throttled one level further.
    pub scale_downs: u64,
    /// With a target: the windows in which more than a tenth of the requests took longer,
    /// and the last window judged (requests, of which over the target).
    pub windows_missed: u64,
    pub last_window_requests: Option<u32>,
    pub last_window_over_target: Option<u32>,
    /// io.max's caps (`max_bandwidth`, `max_iops`; null: none), and the requests that waited
    /// for them and that time.
    pub max_bandwidth_bytes_per_sec: Option<u64>,
    pub max_iops: Option<u64>,
    pub capped_requests: u64,
    pub capped_us: u64,
}

/// The journal section of the status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalSection {
    /// The journal member as given by the user.
    pub name: String,
    pub mode: JournalMode,
    /// Its storage loses its contents at a power cut (tmpfs, a RAM disk), and why.
    pub volatile: bool,
    pub volatile_reason: Option<String>,
    pub ring_bytes: u64,
    pub used_bytes: u64,
    pub write_back_record_bytes: u64,
    pub records_live: u64,
    pub commits: u64,
    pub checkpoints: u64,
    /// Applies forced by a full ring (a larger journal would avoid them).
    pub pressure_applies: u64,
    /// Write-back: acknowledged bytes not yet written to the members.
    pub unapplied_bytes: Option<u64>,
}

/// What the journal logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JournalMode {
    /// Parity-level stripe writes, before they reach the members (closes the write hole).
    WriteThrough,
    /// Client writes, acknowledged once logged and applied to the members later.
    WriteBack,
}

/// The name the JSON gives a unit enum value (`MemberState::ReplacementTarget` →
/// `replacement_target`), for text that must match it.
pub fn wire_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => panic!("not a unit enum value: {other:?}"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use volume::{
        ArrayHealth, ArrayRange, AtRisk, BitmapStatus, FilesystemStatus, MemberState, MemberStatus,
        MismatchLocation, ScrubReport, SpeedLimits, TaskKind, TaskStatus,
    };

    /// A status with every optional part present and every list non-empty.
    pub(crate) fn full() -> Status {
        let member = |role, name: &str, state| MemberStatus {
            role,
            name: name.to_string(),
            state,
            read_errors: 1,
            write_errors: 2,
            timeouts: 3,
            no_space_errors: 4,
            stuck_calls: 5,
            abandoned_calls: 6,
            filesystem: Some(FilesystemStatus {
                mount_point: "/mnt/t".into(),
                fs_type: "tmpfs".into(),
                free_bytes: 7,
                size_bytes: 8,
            }),
            rebuild_offset_bytes: Some(9),
            write_mostly: true,
            slow: true,
            latency_us: Some(10),
            peers_latency_us: Some(11),
        };
        Status {
            volume: VolumeStatus {
                name: "demo".into(),
                uuid: "6f1c2a4e-0b7d-4c1e-9d2a-3b5f7e9a1c20".parse().unwrap(),
                level: "raid6".into(),
                chunk_bytes: 65536,
                size_bytes: 3 << 30,
                health: ArrayHealth::Rebuilding,
                members: vec![
                    member(Some(0), "a", MemberState::Active),
                    member(Some(1), "b", MemberState::Replacing),
                    // No spare: its role is null.
                    member(Some(1), "c", MemberState::ReplacementTarget),
                ],
                task: Some(TaskStatus::new(
                    TaskKind::Replace,
                    Some(1),
                    1 << 20,
                    4 << 20,
                    1 << 20,
                    Some(3),
                )),
                speed_limits: SpeedLimits::default(),
                last_scrub: Some(ScrubReport {
                    stripes_checked: 10,
                    mismatches: 2,
                    repaired: 1,
                    first_mismatches: vec![MismatchLocation {
                        stripe: 4,
                        array_offset: 1 << 18,
                        role: 2,
                        member: "a".into(),
                        member_offset: 4096,
                        kind: "q".into(),
                    }],
                    finished: true,
                    units_lost: 1,
                    lost: vec![volume::BadBlockStatus {
                        role: 0,
                        member: "b".into(),
                        member_offset: 8192,
                        len: 4096,
                        array_offset: Some(8192),
                        stripe_array_offset: 0,
                    }],
                }),
                events: 7,
                bitmap: Some(BitmapStatus {
                    region_bytes: 1 << 26,
                    regions: 48,
                    dirty_regions: 2,
                    resync_pending_regions: 1,
                    block_writes: 11,
                }),
                used_map: Some(volume::UsedMapStatus {
                    region_bytes: 4 << 20,
                    regions: 768,
                    used_regions: 77,
                    used_bytes: 77 << 22,
                    block_writes: 5,
                }),
                unsynced_bytes: 3 << 20,
                bad_blocks: vec![volume::BadBlockStatus {
                    role: 2,
                    member: "c".into(),
                    member_offset: 1 << 20,
                    len: 4096,
                    array_offset: Some(5 << 20),
                    stripe_array_offset: 5 << 20,
                }],
                at_risk: Some(AtRisk {
                    ranges: vec![ArrayRange {
                        offset_bytes: 0,
                        len_bytes: 1 << 26,
                    }],
                    ranges_count: 1,
                    bytes: 1 << 26,
                    whole_array: false,
                }),
                checksum: Some(volume::ChecksumStatus {
                    algorithm: "crc32c".into(),
                    verified_blocks: 1000,
                    mismatches: 2,
                    rehashed: 1,
                    settled: 1,
                }),
                read_balance: Some("round-robin".into()),
            },
            journal: Some(JournalSection {
                name: "/dev/shm/j".into(),
                mode: JournalMode::WriteBack,
                volatile: true,
                volatile_reason: Some("on tmpfs, a filesystem in RAM".into()),
                ring_bytes: 256 << 20,
                used_bytes: 3 << 20,
                write_back_record_bytes: 12,
                records_live: 13,
                commits: 10,
                checkpoints: 2,
                pressure_applies: 14,
                unapplied_bytes: Some(1 << 20),
            }),
            cache: Some(CacheStats {
                hits: 3,
                misses: 1,
                prefetch_hits: 2,
                allocated_bytes: 2 << 20,
                capacity_bytes: 64 << 20,
                ..CacheStats::default()
            }),
            qos: Some(QosSection {
                latency_target_us: Some(500),
                throttle_level: 3,
                max_level: 7,
                max_in_flight: Some(2),
                pause_factor: 1,
                throttled_requests: 15,
                throttled_us: 16,
                scale_downs: 17,
                windows_missed: 18,
                last_window_requests: Some(19),
                last_window_over_target: Some(20),
                max_bandwidth_bytes_per_sec: Some(21),
                max_iops: Some(22),
                capped_requests: 23,
                capped_us: 24,
            }),
        }
    }

    /// Every object field is present and not null, every list is non-empty.
    fn assert_populated(value: &serde_json::Value, at: &str) {
        match value {
            serde_json::Value::Null => panic!("{at} is null: populate it in `full`"),
            serde_json::Value::Array(items) => {
                assert!(!items.is_empty(), "{at} is empty: populate it in `full`");
                items.iter().for_each(|v| assert_populated(v, at));
            }
            serde_json::Value::Object(fields) => fields
                .iter()
                .for_each(|(k, v)| assert_populated(v, &format!("{at}.{k}"))),
            _ => {}
        }
    }

    #[test]
    fn a_full_status_round_trips_through_the_served_json() {
        let status = full();
        let served = serde_json::to_value(&status).unwrap();
        assert_populated(&served, "status");
        // The volume's fields are the top level, beside the two sections.
        assert_eq!(served["name"], "demo");
        assert_eq!(served["members"][2]["state"], "replacement_target");
        assert_eq!(served["journal"]["mode"], "write-back");
        assert_eq!(served["cache"]["hits"], 3);
        let text = serde_json::to_string(&served).unwrap();
        let decoded: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(decoded, status);
    }

    #[test]
    fn a_status_missing_a_field_is_refused_not_defaulted() {
        let mut served = serde_json::to_value(full()).unwrap();
        served.as_object_mut().unwrap().remove("events");
        let err = serde_json::from_value::<Status>(served).unwrap_err();
        assert!(err.to_string().contains("events"), "{err}");
        let mut served = serde_json::to_value(full()).unwrap();
        served["members"][0]
            .as_object_mut()
            .unwrap()
            .remove("timeouts");
        assert!(serde_json::from_value::<Status>(served).is_err());
    }

    #[test]
    fn wire_names_are_the_json_names() {
        assert_eq!(
            wire_name(MemberState::ReplacementTarget),
            "replacement_target"
        );
        assert_eq!(wire_name(TaskKind::InitialSync), "initial_sync");
        assert_eq!(wire_name(JournalMode::WriteThrough), "write-through");
    }
}
