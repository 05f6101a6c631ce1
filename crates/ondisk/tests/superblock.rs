//! Superblock encoding: roundtrip, corruption detection, version and field checks, and create's
//! refusals.

mod common;

use common::*;
use member::{Member, OpenOptions};
use ondisk::{
    create, read_superblock, ArrayState, CreateOptions, Role, RoleState, Superblock,
    SuperblockError, DATA_OFFSET_DEFAULT, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET,
};

fn mem_members(count: usize, size: &str) -> Vec<std::sync::Arc<dyn Member>> {
    (0..count)
        .map(|_| member::open(&format!("mem:{size}"), &OpenOptions::default()).unwrap())
        .collect()
}

fn raw(m: &dyn Member) -> Box<[u8; SUPERBLOCK_BYTES]> {
    let mut b = Box::new([0u8; SUPERBLOCK_BYTES]);
    m.read_at(&mut b[..], SUPERBLOCK_OFFSET).unwrap();
    b
}

#[test]
fn create_writes_decodable_superblocks() {
    let members = mem_members(4, "8M");
    let mut opts = CreateOptions::new("raid6".parse().unwrap(), "sb-test");
    opts.chunk_bytes = 256 * 1024;
    let written = create(&members, &opts).unwrap();
    for (role, m) in members.iter().enumerate() {
        let sb = read_superblock(m.as_ref()).unwrap();
        assert_eq!(sb, written[role]);
        assert_eq!(sb.role, Role::Active(role as u32));
        assert_eq!(sb.events, 1);
        assert_eq!(sb.state, ArrayState::Clean);
        assert_eq!(sb.data_offset_bytes, DATA_OFFSET_DEFAULT);
        assert_eq!(
            sb.data_bytes,
            7 << 20,
            "8 MiB - 1 MiB, a whole number of chunks"
        );
        assert_eq!(sb.array_size_bytes, 2 * (7 << 20));
        assert_eq!(sb.roles[role].member_uuid, sb.member_uuid);
        assert_eq!(sb.roles[role].state, RoleState::Active);
        assert_eq!(sb.roles[4].state, RoleState::Unused);
        let bytes = sb.encode();
        assert_eq!(Superblock::decode(&bytes), Ok(sb.clone()));
        assert_eq!(
            &bytes[..],
            &raw(m.as_ref())[..],
            "encoding is deterministic"
        );
    }
    let uuids: std::collections::HashSet<_> = written.iter().map(|s| s.member_uuid).collect();
    assert_eq!(uuids.len(), 4, "member UUIDs are unique");
}

#[test]
fn every_flipped_byte_is_detected() {
    let members = mem_members(2, "2M");
    create(
        &members,
        &CreateOptions::new("raid1".parse().unwrap(), "flip"),
    )
    .unwrap();
    let good = raw(members[0].as_ref());
    let seed = seed();
    let mut x = seed | 1;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x % SUPERBLOCK_BYTES as u64) as usize;
        let mut bad = good.clone();
        bad[at] ^= 1 << ((x >> 60) % 8);
        let err = Superblock::decode(&bad).unwrap_err();
        let expected = at >= 8 || matches!(err, SuperblockError::NoMagic);
        assert!(
            matches!(err, SuperblockError::Checksum { .. }) || (at < 8 && expected),
            "byte {at}: {err} (seed {seed})"
        );
    }
}

#[test]
fn newer_version_and_unknown_features_are_refused() {
    let members = mem_members(1, "2M");
    create(
        &members,
        &CreateOptions::new("linear".parse().unwrap(), "ver"),
    )
    .unwrap();
    let good = raw(members[0].as_ref());
    let recrc = |b: &mut [u8; SUPERBLOCK_BYTES]| {
        let crc = ondisk::checksum(b);
        b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    let mut v2 = good.clone();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    recrc(&mut v2);
    let err = Superblock::decode(&v2).unwrap_err();
    assert_eq!(err, SuperblockError::Version { found: 2 });
    assert!(err.to_string().contains("version 2"), "{err}");
    let mut feat = good.clone();
    // Bit 6 is unknown (bit 2, once the example, is the reshape record now).
    feat[24] = 0x40;
    recrc(&mut feat);
    assert!(matches!(
        Superblock::decode(&feat),
        Err(SuperblockError::Features { unknown: 0x40 })
    ));
    let mut level = good.clone();
    level[96] = 9;
    recrc(&mut level);
    let err = Superblock::decode(&level).unwrap_err();
    assert!(err.to_string().contains("level"), "{err}");
    let zero = Box::new([0u8; SUPERBLOCK_BYTES]);
    assert_eq!(Superblock::decode(&zero), Err(SuperblockError::NoMagic));
}

#[test]
fn create_refuses_members_in_use_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let paths = new_array(dir.path(), "used", "raid1", 2);
    let members = open_all(&paths);
    let before = hash_files(&paths);
    let opts = CreateOptions::new("raid0".parse().unwrap(), "again");
    let err = create(&members, &opts).unwrap_err().to_string();
    assert!(err.contains(paths[0].to_str().unwrap()), "{err}");
    assert!(err.contains("carries a raidkit superblock"), "{err}");
    assert_eq!(hash_files(&paths), before, "nothing written");
    // Non-zero data in the first MiB.
    let fresh = files(dir.path(), "dirty", 2);
    let fresh_members = open_all(&fresh);
    fresh_members[1].write_at(b"x", 777_777).unwrap();
    let err = create(&fresh_members, &opts).unwrap_err().to_string();
    assert!(err.contains("dirty1"), "{err}");
    assert!(
        err.contains("non-zero data in its first MiB (at byte 777777)"),
        "{err}"
    );
    // Data past the first MiB does not count as in use.
    fresh_members[1].write_at(&[0], 777_777).unwrap();
    fresh_members[0].write_at(b"y", 3 << 20).unwrap();
    // Force overwrites and zeroes.
    let mut forced = opts.clone();
    forced.force = true;
    create(&members, &forced).unwrap();
    assert_eq!(read_sb(&paths[0]).level, "raid0".parse().unwrap());
    create(&fresh_members, &opts).unwrap();
    let mut buf = [1u8; 1];
    fresh_members[0].read_at(&mut buf, 3 << 20).unwrap();
    assert_eq!(buf, [0], "create zeroes the data area");
}

#[test]
fn create_validates_options() {
    let cases: [(&str, usize, u64, &str, &str); 6] = [
        (
            "raid5",
            2,
            128 << 10,
            "ok",
            "raid5 needs at least 3 members, 2 given",
        ),
        (
            "raid6",
            3,
            128 << 10,
            "ok",
            "raid6 needs at least 4 members, 3 given",
        ),
        ("raid0", 2, 100_000, "ok", "chunk size 100000"),
        ("raid0", 2, 8 << 20, "ok", "chunk size 8388608"),
        ("raid1", 2, 128 << 10, "", "name is empty"),
        (
            "raid1",
            2,
            128 << 10,
            "a-name-that-is-longer-than-32-bytes",
            "the most is 32",
        ),
    ];
    for (level, count, chunk, name, needle) in cases {
        let members = mem_members(count, "4M");
        let mut opts = CreateOptions::new(level.parse().unwrap(), name);
        opts.chunk_bytes = chunk;
        let err = create(&members, &opts).unwrap_err().to_string();
        assert!(
            err.contains(needle),
            "{level}/{count}/{chunk}/{name}: {err}"
        );
        assert!(
            read_superblock(members[0].as_ref()).is_err(),
            "nothing written"
        );
    }
    let small = vec![member::open("mem:1M", &OpenOptions::default()).unwrap()];
    let err = create(&small, &CreateOptions::new("linear".parse().unwrap(), "s")).unwrap_err();
    assert!(err.to_string().contains("too small"), "{err}");
    let one = member::open("mem:4M", &OpenOptions::default()).unwrap();
    let twice = vec![one.clone(), one];
    let err = create(&twice, &CreateOptions::new("raid1".parse().unwrap(), "d")).unwrap_err();
    assert!(err.to_string().contains("given more than once"), "{err}");
}

#[test]
fn members_of_different_sizes() {
    let members: Vec<_> = ["mem:3M", "mem:5M", "mem:4100K"]
        .iter()
        .map(|s| member::open(s, &OpenOptions::default()).unwrap())
        .collect();
    let mut opts = CreateOptions::new("linear".parse().unwrap(), "lin");
    let sbs = create(&members, &opts).unwrap();
    let sizes: Vec<u64> = sbs.iter().map(|s| s.data_bytes).collect();
    assert_eq!(sizes, [2 << 20, 4 << 20, (4100 << 10) - (1 << 20)]);
    opts.level = "raid5".parse().unwrap();
    opts.force = true;
    let sbs = create(&members, &opts).unwrap();
    assert!(sbs.iter().all(|s| s.data_bytes == 2 << 20));
    assert_eq!(sbs[0].array_size_bytes, 4 << 20);
}

/// A replace recorded on disk (feature_compat bit 2): the spare entry names the role it
/// replaces (entry bytes 25..32) and the target's own superblock its copy offset (byte 248).
/// A reader that ignores the bit (an older raidkit, or bit 2 cleared) sees a plain spare; an
/// array written before the bit existed decodes unchanged.
#[test]
fn a_replace_record_roundtrips_and_is_ignored_without_its_feature_bit() {
    let members = mem_members(4, "8M");
    let mut opts = CreateOptions::new("raid5".parse().unwrap(), "replace");
    opts.spares = vec![members[3].clone()];
    let written = create(&members[..3], &opts).unwrap();
    let old = &written[0];
    assert_eq!(old.feature_compat & ondisk::FEATURE_COMPAT_REPLACE, 0);
    let mut spare = written[3].clone();
    assert_eq!(spare.role, Role::Spare);
    assert_eq!(spare.replace_offset_bytes, None);
    assert!(spare.roles.iter().all(|e| e.replacing.is_none()));
    spare.roles[3].replacing = Some(1);
    spare.replace_offset_bytes = Some(192 * 1024);
    spare.sync_replace_feature();
    assert_ne!(spare.feature_compat & ondisk::FEATURE_COMPAT_REPLACE, 0);
    let bytes = spare.encode();
    assert_eq!(Superblock::decode(&bytes), Ok(spare.clone()));
    assert_eq!(bytes[256 + 3 * 32 + 25], 1, "entry flag byte");
    assert_eq!(
        &bytes[256 + 3 * 32 + 28..256 + 3 * 32 + 32],
        &1u32.to_le_bytes()
    );
    assert_eq!(&bytes[248..256], &(192u64 * 1024).to_le_bytes());
    assert_eq!(spare.replacing_role(spare.member_uuid), Some(1));

    // The same bytes with bit 2 cleared (what a reader that ignores it sees): a plain spare.
    let mut ignored = bytes.clone();
    ignored[16] &= !(ondisk::FEATURE_COMPAT_REPLACE as u8);
    let crc = ondisk::checksum(&ignored);
    ignored[4092..].copy_from_slice(&crc.to_le_bytes());
    let plain = Superblock::decode(&ignored).unwrap();
    assert_eq!(plain.replace_offset_bytes, None);
    assert!(plain.roles.iter().all(|e| e.replacing.is_none()));
    assert_eq!(plain.roles[3].state, RoleState::Spare);

    // Recorded without the bit, or an offset on a member that is not the target: refused.
    let mut bad = spare.clone();
    bad.feature_compat &= !ondisk::FEATURE_COMPAT_REPLACE;
    assert!(bad.validate().is_err());
    let mut holder = written[1].clone();
    holder.replace_offset_bytes = Some(0);
    holder.sync_replace_feature();
    assert!(holder.validate().is_err());
}

/// Found by the `bitmap` fuzz target (docs/FUZZING.md): a superblock whose checksum is valid
/// but whose bitmap area is far larger than its regions need (here 64 TiB before a data offset
/// of 128 TiB on a 256 TiB member) was accepted, and assembly's `bitmap::read_image` then
/// allocated the whole area at once: the process aborted ("memory allocation of ... bytes
/// failed") instead of refusing the member. The area is now bounded by the format's maximum
/// (2^20 regions, 33 blocks) and refused naming the field.
#[test]
fn a_bitmap_area_larger_than_the_format_allows_is_refused_not_allocated() {
    let members = mem_members(2, "64M");
    let mut opts = CreateOptions::new("raid1".parse().unwrap(), "huge-bitmap");
    opts.force = true;
    create(&members, &opts).unwrap();
    let mut b = raw(members[0].as_ref());
    let put = |b: &mut [u8; SUPERBLOCK_BYTES], at: usize, v: u64| {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes())
    };
    // Offsets from docs/FORMAT.md: data_offset_bytes, member_bytes, bitmap_bytes.
    put(&mut b, 120, 1 << 47);
    put(&mut b, 144, 1 << 48);
    put(&mut b, 200, 1 << 46);
    let crc = ondisk::checksum(&b);
    b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    let big = member::MemMember::new("big", 1 << 48).unwrap();
    big.write_at(&b[..], SUPERBLOCK_OFFSET).unwrap();
    match read_superblock(&big) {
        Err(e) => assert!(e.to_string().contains("bitmap_bytes"), "{e}"),
        Ok(sb) => {
            let at = sb.bitmap.unwrap();
            panic!(
                "accepted a bitmap of {} bytes for {} array bytes",
                at.bytes, sb.array_size_bytes
            );
        }
    }
}

/// `create` with a key area: every member's superblock carries it behind `feature_incompat`
/// bit 1, which a reader knowing only the bitmap bit (raidkit before encryption) refuses; the
/// bit without the area, or the area's bytes damaged, are refused by name.
#[test]
fn an_encrypted_array_carries_its_key_area_behind_an_incompatible_bit() {
    let members = mem_members(3, "4M");
    let secret = crypt::Secret::new(b"pw".to_vec());
    let kdf = crypt::KdfParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };
    let (area, key) = crypt::KeyArea::create(&secret, kdf).unwrap();
    let mut opts = CreateOptions::new("raid5".parse().unwrap(), "enc");
    opts.encryption = Some(area.clone());
    create(&members, &opts).unwrap();
    for m in &members {
        let sb = read_superblock(m.as_ref()).unwrap();
        assert_eq!(sb.encryption.as_ref(), Some(&area));
        assert_eq!(sb.feature_incompat & ondisk::FEATURE_INCOMPAT_ENCRYPTED, 2);
        let (opened, _) = sb.encryption.unwrap().unlock(&secret).unwrap();
        let probe = |k: &crypt::DataKey| {
            let mut b = vec![7u8; 512];
            crypt::DataCipher::new(k).encrypt(&mut b, 0);
            b
        };
        assert_eq!(probe(&opened), probe(&key));
        let bytes = raw(m.as_ref());
        let incompat = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
        assert_ne!(
            incompat & !ondisk::FEATURE_INCOMPAT_BITMAP,
            0,
            "a reader that knows only the bitmap bit sees an unknown incompatible feature"
        );
    }
    let recrc = |b: &mut [u8; SUPERBLOCK_BYTES]| {
        let crc = ondisk::checksum(b);
        b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    let good = raw(members[0].as_ref());
    let mut no_bit = good.clone();
    no_bit[24] &= !2;
    recrc(&mut no_bit);
    let err = Superblock::decode(&no_bit).unwrap_err().to_string();
    assert!(err.contains("encryption"), "{err}");
    let mut damaged = good.clone();
    damaged[2440] = 9; // the cipher code
    recrc(&mut damaged);
    let err = Superblock::decode(&damaged).unwrap_err().to_string();
    assert!(
        err.contains("encryption") && err.contains("cipher"),
        "{err}"
    );
    // Without encryption the bit and the area stay clear.
    let plain = mem_members(2, "2M");
    create(&plain, &CreateOptions::new("raid1".parse().unwrap(), "p")).unwrap();
    let sb = read_superblock(plain[0].as_ref()).unwrap();
    assert_eq!((sb.encryption, sb.feature_incompat & 2), (None, 0));
}

/// `create` with a used-regions map: every member's superblock names it (bytes 3808..3840)
/// behind `feature_incompat` bit 5, after the bitmap, and its blocks are written clear; the
/// bit without the bytes, the bytes without the bit, a region that is not whole stripes and a
/// map over the bitmap are refused by name; a reader that knows only bits 0 and 1 (raidkit
/// before the map) sees an unknown incompatible feature.
#[test]
fn a_used_map_is_placed_after_the_bitmap_behind_an_incompatible_bit() {
    let members = mem_members(4, "16M");
    let mut opts = CreateOptions::new("raid5".parse().unwrap(), "used");
    opts.used_region_bytes = Some(1 << 20);
    let written = create(&members, &opts).unwrap();
    let geometry = layout::Geometry::new(opts.level, opts.chunk_bytes, &[15 << 20; 4]).unwrap();
    for (m, sb) in members.iter().zip(&written) {
        assert_eq!(&read_superblock(m.as_ref()).unwrap(), sb);
        let used = sb.used_map.expect("a used map");
        let bitmap = sb.bitmap.expect("a bitmap");
        assert_eq!(used.offset_bytes, bitmap.offset_bytes + bitmap.bytes);
        assert_eq!(used.region_bytes % geometry.unit_bytes(), 0);
        assert!(used.region_bytes >= 1 << 20);
        let regions = used.regions(sb.array_size_bytes);
        let (image, bad) =
            ondisk::bitmap::read_map_image(m.as_ref(), &sb.array_uuid, &used.area(), regions)
                .unwrap();
        assert_eq!(bad, 0);
        assert!(
            image.iter().all(|&b| b == 0),
            "a new array's regions are unused"
        );
        // The bitmap's codec with another magic: a used-map block is not a bitmap block.
        let (_, bad) = ondisk::bitmap::read_image(
            m.as_ref(),
            &sb.array_uuid,
            &ondisk::BitmapRef {
                offset_bytes: used.offset_bytes,
                ..bitmap
            },
            1,
        )
        .unwrap();
        assert_eq!(bad, 1);
        let bytes = raw(m.as_ref());
        let incompat = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
        assert_eq!(incompat & ondisk::FEATURE_INCOMPAT_USED_MAP, 1 << 5);
        assert_ne!(incompat & !3, 0, "an older reader refuses it");
        let at = u64::from_le_bytes(bytes[3808..3816].try_into().unwrap());
        assert_eq!(at, used.offset_bytes);
    }
    let recrc = |b: &mut [u8; SUPERBLOCK_BYTES]| {
        let crc = ondisk::checksum(b);
        b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    let good = raw(members[0].as_ref());
    let refused = |change: &dyn Fn(&mut [u8; SUPERBLOCK_BYTES]), field: &str| {
        let mut b = good.clone();
        change(&mut b);
        recrc(&mut b);
        let err = Superblock::decode(&b).unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    };
    refused(&|b| b[24] &= !(1 << 5), "used_map");
    refused(&|b| b[3808..3840].fill(0), "used_map");
    refused(&|b| b[3832] = 1, "used_map");
    let unit = geometry.unit_bytes();
    refused(
        &|b| b[3824..3832].copy_from_slice(&(unit + 4096).to_le_bytes()),
        "used_map_region_bytes",
    );
    refused(
        &|b| b[3808..3816].copy_from_slice(&8192u64.to_le_bytes()),
        "used_map_offset",
    );
    // Without the map the bytes stay zero and the bit clear.
    let plain = mem_members(2, "4M");
    let mut off = CreateOptions::new("raid1".parse().unwrap(), "p");
    off.used_region_bytes = None;
    let sb = &create(&plain, &off).unwrap()[0];
    assert_eq!(sb.used_map, None);
    assert!(raw(plain[0].as_ref())[3808..3840].iter().all(|&b| b == 0));
    // Linear and RAID 0 have nothing to rebuild.
    let mut stripe = CreateOptions::new("raid0".parse().unwrap(), "s");
    stripe.used_region_bytes = Some(1 << 20);
    let err = create(&mem_members(2, "4M"), &stripe)
        .unwrap_err()
        .to_string();
    assert!(err.contains("used-regions map"), "{err}");
}

/// `create` gives every member (spares too) an empty bad-block list behind `feature_incompat`
/// bit 3, after the bitmap; `bad_blocks = false` leaves bit and bytes clear (as arrays made
/// before the list, which decode unchanged). Bytes in 3744..3776 without the bit, the bit
/// without the area, and an area overlapping the bitmap or the data are refused by name; a
/// reader that knows bits 0..2 only sees an unknown incompatible feature 0x8.
#[test]
fn a_bad_block_list_is_carried_behind_incompatible_bit_3() {
    let members = mem_members(3, "4M");
    let spare = mem_members(1, "4M");
    let mut opts = CreateOptions::new("raid5".parse().unwrap(), "bb");
    opts.spares = spare.clone();
    assert!(opts.bad_blocks, "on by default for a redundant level");
    create(&members, &opts).unwrap();
    for m in members.iter().chain(&spare) {
        let sb = read_superblock(m.as_ref()).unwrap();
        let at = sb.bad_blocks.expect("a list area");
        // After the bitmap and the used-regions map (metadata_layout's order).
        let used = sb.used_map.unwrap();
        assert_eq!(at.offset_bytes, used.offset_bytes + used.bytes);
        assert_eq!(at.bytes, ondisk::BAD_BLOCKS_AREA_BYTES);
        assert_eq!(sb.feature_incompat & ondisk::FEATURE_INCOMPAT_BAD_BLOCKS, 8);
        let list = ondisk::badblocks::read_list(m.as_ref(), &sb.array_uuid, &at).unwrap();
        assert!(list.is_empty());
        let incompat = u64::from_le_bytes(raw(m.as_ref())[24..32].try_into().unwrap());
        // Bit 3, and bit 5: the used-regions map, on by default too.
        assert_eq!(
            incompat & !0b111,
            8 | 32,
            "unknown to a reader of bits 0..2"
        );
    }
    let recrc = |b: &mut [u8; SUPERBLOCK_BYTES]| {
        let crc = ondisk::checksum(b);
        b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    let refused = |bytes: &[u8; SUPERBLOCK_BYTES], why: &str| {
        let err = Superblock::decode(bytes).unwrap_err().to_string();
        assert!(err.contains("bad_blocks"), "{why}: {err}");
    };
    let good = raw(members[0].as_ref());
    let mut no_bit = good.clone();
    no_bit[24] &= !8;
    recrc(&mut no_bit);
    refused(&no_bit, "the reference without the bit");
    let mut stray = good.clone();
    stray[3770] = 1;
    recrc(&mut stray);
    refused(&stray, "bytes past the reference");
    let mut on_bitmap = good.clone();
    on_bitmap[3744..3752].copy_from_slice(&8192u64.to_le_bytes());
    recrc(&mut on_bitmap);
    refused(&on_bitmap, "over the bitmap");
    let mut on_data = good.clone();
    on_data[3744..3752].copy_from_slice(&((1u64 << 20) - 4096).to_le_bytes());
    recrc(&mut on_data);
    refused(&on_data, "into the data");
    let mut zero_area = good.clone();
    zero_area[3744..3760].fill(0);
    recrc(&mut zero_area);
    refused(&zero_area, "the bit without an area");

    let plain = mem_members(2, "2M");
    let mut off = CreateOptions::new("raid1".parse().unwrap(), "p");
    off.bad_blocks = false;
    create(&plain, &off).unwrap();
    let sb = read_superblock(plain[0].as_ref()).unwrap();
    assert_eq!((sb.bad_blocks, sb.feature_incompat & 8), (None, 0));
    assert!(raw(plain[0].as_ref())[3744..3776].iter().all(|&b| b == 0));
    let mut bytes_no_bit = raw(plain[0].as_ref());
    bytes_no_bit[3744] = 1;
    recrc(&mut bytes_no_bit);
    refused(&bytes_no_bit, "bytes without the bit");
    let raid0 = CreateOptions::new("raid0".parse().unwrap(), "z");
    assert!(!raid0.bad_blocks, "nothing rebuilds a RAID 0");
}
