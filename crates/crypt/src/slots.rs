//! [`KeyArea`]: the encryption header and key slots every member's superblock carries
//! (docs/FORMAT.md "Encryption"), as LUKS2 keeps them: the random data key is stored only
//! wrapped, once per slot, each slot with its own salt and Argon2id parameters, so a key file
//! and several passphrases can each open the array and one can be removed without the others.
//!
//! A slot holds `wrapped = data key XOR d[0..64]` and `check = d[64..96]`, where `d` is
//! Argon2id(secret, the slot's salt, its parameters) with 96 bytes of output. Unlocking derives
//! `d` again and compares the check value: a wrong key is refused there, before anything is
//! unwrapped. The unwrapped key must then match the header's digest (Argon2id of the data key
//! with the header's salt), which every slot shares: a damaged slot cannot hand out a wrong
//! data key either. Each salt is random (32 bytes) and written once, so the 64 derived bytes
//! are never reused as a pad.

use std::fmt;

use argon2::{Algorithm, Argon2, Params, Version};
use zeroize::Zeroizing;

use crate::cipher::{DataKey, DATA_KEY_BYTES};
use crate::secret::Secret;
use crate::UNIT_BYTES;

/// Key slots in a key area.
pub const SLOTS: usize = 8;
/// Bytes of an encoded key area.
pub const KEY_AREA_BYTES: usize = HEADER_BYTES + SLOTS * SLOT_BYTES;

const HEADER_BYTES: usize = 88;
const SLOT_BYTES: usize = 144;
const SALT_BYTES: usize = 32;
const CHECK_BYTES: usize = 32;
const DIGEST_BYTES: usize = 32;
/// Header `cipher`: AES-256-XTS, tweak = the unit's array sector number (plain64).
const CIPHER_AES256_XTS_PLAIN64: u32 = 1;
/// Slot `kdf`: Argon2id, version 1.3 (0x13).
const KDF_ARGON2ID: u8 = 1;
const SLOT_ACTIVE: u8 = 1;

// Header fields (offsets in the key area).
const OFF_CIPHER: usize = 0;
const OFF_UNIT: usize = 4;
const OFF_DIGEST_KDF: usize = 8;
const OFF_DIGEST_SALT: usize = 24;
const OFF_DIGEST: usize = 56;
// Slot fields (offsets in a slot).
const SLOT_STATE: usize = 0;
const SLOT_KDF: usize = 1;
const SLOT_PARAMS: usize = 4;
const SLOT_SALT: usize = 16;
const SLOT_WRAPPED: usize = 48;
const SLOT_CHECK: usize = 112;

/// Argon2id's costs for one slot (or the digest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfParams {
    /// Memory, KiB.
    pub memory_kib: u32,
    /// Passes over the memory.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl KdfParams {
    /// What `create` and `key add` use unless told otherwise: 64 MiB, 3 passes, 1 lane (RFC
    /// 9106's second recommendation with one lane; about 0.1 to 0.3 s on one core).
    pub const DEFAULT: KdfParams = KdfParams {
        memory_kib: 64 * 1024,
        iterations: 3,
        parallelism: 1,
    };
    /// The digest's: the data key is 512 random bits, so the digest needs no cost.
    const DIGEST: KdfParams = KdfParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };
    /// Most memory a slot may ask for (a hostile superblock must not exhaust the host).
    pub const MEMORY_KIB_MAX: u32 = 4 * 1024 * 1024;
    /// Most passes a slot may ask for.
    pub const ITERATIONS_MAX: u32 = 64;
    /// Most lanes a slot may ask for.
    pub const PARALLELISM_MAX: u32 = 16;

    /// Checks the parameters are within the bounds this code accepts.
    pub fn check(&self) -> Result<(), String> {
        let p = self.parallelism;
        if !(1..=Self::PARALLELISM_MAX).contains(&p) {
            return Err(format!(
                "parallelism {p} is not in 1..={}",
                Self::PARALLELISM_MAX
            ));
        }
        let m = self.memory_kib;
        if m < 8 * p || m > Self::MEMORY_KIB_MAX {
            return Err(format!(
                "memory {m} KiB is not in {}..={} KiB",
                8 * p,
                Self::MEMORY_KIB_MAX
            ));
        }
        let t = self.iterations;
        if !(1..=Self::ITERATIONS_MAX).contains(&t) {
            return Err(format!(
                "iterations {t} is not in 1..={}",
                Self::ITERATIONS_MAX
            ));
        }
        Ok(())
    }

    /// Argon2id of `secret` with `salt` into `out`.
    fn derive(&self, secret: &[u8], salt: &[u8], out: &mut [u8]) -> Result<(), String> {
        self.check()?;
        let params = Params::new(
            self.memory_kib,
            self.iterations,
            self.parallelism,
            Some(out.len()),
        )
        .map_err(|e| format!("Argon2id parameters: {e}"))?;
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password_into(secret, salt, out)
            .map_err(|e| format!("Argon2id: {e}"))
    }

    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.memory_kib.to_le_bytes());
        out[4..8].copy_from_slice(&self.iterations.to_le_bytes());
        out[8..12].copy_from_slice(&self.parallelism.to_le_bytes());
    }

    fn decode(b: &[u8]) -> KdfParams {
        let u = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        KdfParams {
            memory_kib: u(0),
            iterations: u(4),
            parallelism: u(8),
        }
    }
}

impl fmt::Display for KdfParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "argon2id m={} KiB t={} p={}",
            self.memory_kib, self.iterations, self.parallelism
        )
    }
}

/// One active key slot.
#[derive(Clone, PartialEq, Eq)]
struct Slot {
    kdf: KdfParams,
    salt: [u8; SALT_BYTES],
    wrapped: [u8; DATA_KEY_BYTES],
    check: [u8; CHECK_BYTES],
}

impl Slot {
    /// A slot opening to `key` with `secret`.
    fn seal(key: &DataKey, secret: &Secret, kdf: KdfParams) -> Result<Slot, String> {
        let mut salt = [0u8; SALT_BYTES];
        crate::random(&mut salt);
        let d = derived(secret, &salt, kdf)?;
        let mut wrapped = [0u8; DATA_KEY_BYTES];
        for (i, w) in wrapped.iter_mut().enumerate() {
            *w = key.bytes()[i] ^ d[i];
        }
        let mut check = [0u8; CHECK_BYTES];
        check.copy_from_slice(&d[DATA_KEY_BYTES..]);
        Ok(Slot {
            kdf,
            salt,
            wrapped,
            check,
        })
    }

    /// The data key, if `secret` opens this slot (its check value matches).
    fn open(&self, secret: &Secret) -> Result<Option<DataKey>, String> {
        let d = derived(secret, &self.salt, self.kdf)?;
        if !equal(&d[DATA_KEY_BYTES..], &self.check) {
            return Ok(None);
        }
        let mut key = [0u8; DATA_KEY_BYTES];
        for (i, k) in key.iter_mut().enumerate() {
            *k = self.wrapped[i] ^ d[i];
        }
        let key = DataKey::from_bytes(key);
        Ok(Some(key))
    }
}

/// Argon2id's 96 bytes for a slot: the pad of the wrapped key, then the check value.
fn derived(
    secret: &Secret,
    salt: &[u8],
    kdf: KdfParams,
) -> Result<Zeroizing<[u8; DATA_KEY_BYTES + CHECK_BYTES]>, String> {
    let mut d = Zeroizing::new([0u8; DATA_KEY_BYTES + CHECK_BYTES]);
    kdf.derive(secret.as_bytes(), salt, &mut d[..])?;
    Ok(d)
}

/// Compares in time independent of where the bytes differ.
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The encryption header and key slots of an array.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyArea {
    digest_kdf: KdfParams,
    digest_salt: [u8; SALT_BYTES],
    digest: [u8; DIGEST_BYTES],
    slots: [Option<Slot>; SLOTS],
}

/// Why bytes are not a valid key area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAreaError(pub String);

impl fmt::Display for KeyAreaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyAreaError {}

/// Why a key does not unlock an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnlockError {
    /// No active slot's check value matches what the key derives: a wrong key or passphrase.
    WrongKey { slots_tried: usize },
    /// Slot `slot` accepted the key, but the key it unwrapped does not match the header's
    /// digest: the slot is damaged.
    Damaged { slot: usize },
    /// Argon2id refused the slot's parameters.
    Kdf(String),
}

impl fmt::Display for UnlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnlockError::WrongKey { slots_tried } => write!(
                f,
                "the key does not open any of the {slots_tried} key slots (wrong key file or \
                 passphrase)"
            ),
            UnlockError::Damaged { slot } => write!(
                f,
                "key slot {slot} accepted the key but holds a data key that does not match the \
                 array's digest: the slot is damaged; unlock with another key and remove slot \
                 {slot}"
            ),
            UnlockError::Kdf(why) => write!(f, "cannot derive the key: {why}"),
        }
    }
}

impl std::error::Error for UnlockError {}

impl KeyArea {
    /// A new key area for a new array: a random data key, sealed in slot 0 by `secret`.
    pub fn create(secret: &Secret, kdf: KdfParams) -> Result<(KeyArea, DataKey), String> {
        kdf.check()?;
        let key = DataKey::random();
        let mut digest_salt = [0u8; SALT_BYTES];
        crate::random(&mut digest_salt);
        let mut area = KeyArea {
            digest_kdf: KdfParams::DIGEST,
            digest_salt,
            digest: [0; DIGEST_BYTES],
            slots: Default::default(),
        };
        area.digest = area.digest_of(&key)?;
        area.slots[0] = Some(Slot::seal(&key, secret, kdf)?);
        Ok((area, key))
    }

    fn digest_of(&self, key: &DataKey) -> Result<[u8; DIGEST_BYTES], String> {
        let mut digest = [0u8; DIGEST_BYTES];
        self.digest_kdf
            .derive(key.bytes(), &self.digest_salt, &mut digest)?;
        Ok(digest)
    }

    /// The data key `secret` opens, and the slot that opened it. Slots are tried in order.
    pub fn unlock(&self, secret: &Secret) -> Result<(DataKey, usize), UnlockError> {
        let mut tried = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            tried += 1;
            let Some(key) = slot.open(secret).map_err(UnlockError::Kdf)? else {
                continue;
            };
            let digest = self.digest_of(&key).map_err(UnlockError::Kdf)?;
            if !equal(&digest, &self.digest) {
                return Err(UnlockError::Damaged { slot: i });
            }
            return Ok((key, i));
        }
        Err(UnlockError::WrongKey { slots_tried: tried })
    }

    /// Seals `key` (this array's: checked against the digest) for `secret` in the first free
    /// slot; returns it.
    pub fn add(&mut self, key: &DataKey, secret: &Secret, kdf: KdfParams) -> Result<usize, String> {
        kdf.check()?;
        if !equal(&self.digest_of(key)?, &self.digest) {
            return Err("the data key does not belong to this array".into());
        }
        let Some(free) = self.slots.iter().position(Option::is_none) else {
            return Err(format!(
                "all {SLOTS} key slots are in use: remove one first (raidkit key remove)"
            ));
        };
        self.slots[free] = Some(Slot::seal(key, secret, kdf)?);
        Ok(free)
    }

    /// Seals `key` (this array's) for `secret` in slot `slot`, which must be in use, in place
    /// of what it held (a key change: the old key no longer opens it).
    pub fn replace(
        &mut self,
        slot: usize,
        key: &DataKey,
        secret: &Secret,
        kdf: KdfParams,
    ) -> Result<(), String> {
        kdf.check()?;
        if slot >= SLOTS || self.slots[slot].is_none() {
            return Err(format!("key slot {slot} is not in use"));
        }
        if !equal(&self.digest_of(key)?, &self.digest) {
            return Err("the data key does not belong to this array".into());
        }
        self.slots[slot] = Some(Slot::seal(key, secret, kdf)?);
        Ok(())
    }

    /// Empties slot `slot` (its bytes become zero). The last active slot is never removed:
    /// the data would be lost with it.
    pub fn remove(&mut self, slot: usize) -> Result<(), String> {
        if slot >= SLOTS || self.slots[slot].is_none() {
            return Err(format!("key slot {slot} is not in use"));
        }
        if self.active().len() == 1 {
            return Err(format!(
                "key slot {slot} is the last one: removing it would make the data unreadable \
                 for ever (add another key first)"
            ));
        }
        self.slots[slot] = None;
        Ok(())
    }

    /// The active slots and their parameters, in order.
    pub fn active(&self) -> Vec<(usize, KdfParams)> {
        (self.slots.iter().enumerate())
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s.kdf)))
            .collect()
    }

    /// The cipher, for people.
    pub fn cipher_name(&self) -> &'static str {
        "aes-xts-plain64 (AES-256)"
    }

    /// The encryption unit.
    pub fn unit_bytes(&self) -> usize {
        UNIT_BYTES
    }

    /// The on-disk bytes (docs/FORMAT.md "Encryption").
    pub fn encode(&self) -> [u8; KEY_AREA_BYTES] {
        let mut b = [0u8; KEY_AREA_BYTES];
        b[OFF_CIPHER..OFF_CIPHER + 4].copy_from_slice(&CIPHER_AES256_XTS_PLAIN64.to_le_bytes());
        b[OFF_UNIT..OFF_UNIT + 4].copy_from_slice(&(UNIT_BYTES as u32).to_le_bytes());
        self.digest_kdf.encode(&mut b[OFF_DIGEST_KDF..]);
        b[OFF_DIGEST_SALT..OFF_DIGEST_SALT + SALT_BYTES].copy_from_slice(&self.digest_salt);
        b[OFF_DIGEST..OFF_DIGEST + DIGEST_BYTES].copy_from_slice(&self.digest);
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let s = &mut b[HEADER_BYTES + i * SLOT_BYTES..][..SLOT_BYTES];
            s[SLOT_STATE] = SLOT_ACTIVE;
            s[SLOT_KDF] = KDF_ARGON2ID;
            slot.kdf.encode(&mut s[SLOT_PARAMS..]);
            s[SLOT_SALT..SLOT_SALT + SALT_BYTES].copy_from_slice(&slot.salt);
            s[SLOT_WRAPPED..SLOT_WRAPPED + DATA_KEY_BYTES].copy_from_slice(&slot.wrapped);
            s[SLOT_CHECK..SLOT_CHECK + CHECK_BYTES].copy_from_slice(&slot.check);
        }
        b
    }

    /// Decodes and validates on-disk bytes: a known cipher and unit, parameters in bounds,
    /// empty slots all zero, at least one active slot.
    pub fn decode(b: &[u8]) -> Result<KeyArea, KeyAreaError> {
        let bad = |why: String| Err(KeyAreaError(why));
        if b.len() < KEY_AREA_BYTES {
            return bad(format!("{} bytes, {KEY_AREA_BYTES} expected", b.len()));
        }
        let u = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        if u(OFF_CIPHER) != CIPHER_AES256_XTS_PLAIN64 {
            return bad(format!("unknown cipher code {}", u(OFF_CIPHER)));
        }
        if u(OFF_UNIT) != UNIT_BYTES as u32 {
            return bad(format!(
                "encryption unit {} bytes, only 512 is known",
                u(OFF_UNIT)
            ));
        }
        if b[OFF_DIGEST_KDF + 12..OFF_DIGEST_SALT]
            .iter()
            .any(|&x| x != 0)
        {
            return bad("reserved header bytes are not zero".into());
        }
        let digest_kdf = KdfParams::decode(&b[OFF_DIGEST_KDF..]);
        digest_kdf
            .check()
            .map_err(|e| KeyAreaError(format!("digest: {e}")))?;
        let mut slots: [Option<Slot>; SLOTS] = Default::default();
        for (i, out) in slots.iter_mut().enumerate() {
            let s = &b[HEADER_BYTES + i * SLOT_BYTES..][..SLOT_BYTES];
            match s[SLOT_STATE] {
                0 if s.iter().all(|&x| x == 0) => continue,
                0 => return bad(format!("key slot {i} is empty but not zero")),
                SLOT_ACTIVE => {}
                other => return bad(format!("key slot {i}: unknown state {other}")),
            }
            if s[SLOT_KDF] != KDF_ARGON2ID || s[2] != 0 || s[3] != 0 {
                return bad(format!(
                    "key slot {i}: unknown key derivation {}",
                    s[SLOT_KDF]
                ));
            }
            let kdf = KdfParams::decode(&s[SLOT_PARAMS..]);
            kdf.check()
                .map_err(|e| KeyAreaError(format!("key slot {i}: {e}")))?;
            *out = Some(Slot {
                kdf,
                salt: s[SLOT_SALT..SLOT_SALT + SALT_BYTES].try_into().unwrap(),
                wrapped: s[SLOT_WRAPPED..SLOT_WRAPPED + DATA_KEY_BYTES]
                    .try_into()
                    .unwrap(),
                check: s[SLOT_CHECK..SLOT_CHECK + CHECK_BYTES].try_into().unwrap(),
            });
        }
        if slots.iter().all(Option::is_none) {
            return bad("no key slot is in use".into());
        }
        Ok(KeyArea {
            digest_kdf,
            digest_salt: b[OFF_DIGEST_SALT..OFF_DIGEST_SALT + SALT_BYTES]
                .try_into()
                .unwrap(),
            digest: b[OFF_DIGEST..OFF_DIGEST + DIGEST_BYTES].try_into().unwrap(),
            slots,
        })
    }

    /// True when `other` wraps the same data key (the same digest): two members' key areas
    /// of one array, whatever their slots.
    pub fn same_key(&self, other: &KeyArea) -> bool {
        self.digest_salt == other.digest_salt && self.digest == other.digest
    }
}

impl fmt::Debug for KeyArea {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyArea")
            .field("slots", &self.active())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cheap parameters: the tests check the logic, not the cost.
    const FAST: KdfParams = KdfParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };

    fn secret(s: &str) -> Secret {
        Secret::new(s.as_bytes().to_vec())
    }

    #[test]
    fn the_right_key_unlocks_and_a_wrong_one_is_refused_by_the_check_value() {
        let (area, key) = KeyArea::create(&secret("correct horse"), FAST).unwrap();
        let (opened, slot) = area.unlock(&secret("correct horse")).unwrap();
        assert_eq!((opened.bytes(), slot), (key.bytes(), 0));
        assert_eq!(
            area.unlock(&secret("correct hors")).unwrap_err(),
            UnlockError::WrongKey { slots_tried: 1 }
        );
    }

    #[test]
    fn a_damaged_wrapped_key_is_caught_by_the_digest_not_used() {
        let (area, _) = KeyArea::create(&secret("pw"), FAST).unwrap();
        let mut bytes = area.encode();
        bytes[HEADER_BYTES + SLOT_WRAPPED] ^= 1;
        let damaged = KeyArea::decode(&bytes).unwrap();
        assert_eq!(
            damaged.unlock(&secret("pw")).unwrap_err(),
            UnlockError::Damaged { slot: 0 }
        );
    }

    #[test]
    fn slots_are_added_each_with_their_own_salt_and_removed_but_never_the_last() {
        let (mut area, key) = KeyArea::create(&secret("one"), FAST).unwrap();
        let slow = KdfParams {
            memory_kib: 128,
            iterations: 2,
            parallelism: 1,
        };
        assert_eq!(area.add(&key, &secret("two"), slow), Ok(1));
        assert_eq!(area.active(), vec![(0, FAST), (1, slow)]);
        assert_eq!(area.unlock(&secret("two")).unwrap().1, 1);
        assert_eq!(area.unlock(&secret("one")).unwrap().1, 0);
        // The same secret twice: two different slots (own salts), both open.
        assert_eq!(area.add(&key, &secret("one"), FAST), Ok(2));
        let enc = area.encode();
        let s0 = &enc[HEADER_BYTES..][..SLOT_BYTES];
        let s2 = &enc[HEADER_BYTES + 2 * SLOT_BYTES..][..SLOT_BYTES];
        assert_ne!(s0[SLOT_SALT..SLOT_SALT + 32], s2[SLOT_SALT..SLOT_SALT + 32]);
        assert_ne!(s0[SLOT_WRAPPED..], s2[SLOT_WRAPPED..]);
        area.remove(0).unwrap();
        area.remove(2).unwrap();
        assert_eq!(
            area.unlock(&secret("one")).unwrap_err(),
            UnlockError::WrongKey { slots_tried: 1 }
        );
        assert!(area.remove(1).unwrap_err().contains("last"));
        assert!(area.remove(5).unwrap_err().contains("not in use"));
        assert_eq!(area.unlock(&secret("two")).unwrap().0.bytes(), key.bytes());
        // Removed slots are zero on disk.
        let enc = area.encode();
        assert!(enc[HEADER_BYTES..HEADER_BYTES + SLOT_BYTES]
            .iter()
            .all(|&x| x == 0));
    }

    #[test]
    fn a_replaced_slot_opens_with_the_new_key_only() {
        let (mut area, key) = KeyArea::create(&secret("old"), FAST).unwrap();
        area.replace(0, &key, &secret("new"), FAST).unwrap();
        assert_eq!(area.unlock(&secret("new")).unwrap().1, 0);
        assert!(matches!(
            area.unlock(&secret("old")),
            Err(UnlockError::WrongKey { .. })
        ));
        assert!(area
            .replace(3, &key, &secret("x"), FAST)
            .unwrap_err()
            .contains("not in use"));
    }

    #[test]
    fn another_arrays_key_is_not_added() {
        let (mut area, _) = KeyArea::create(&secret("a"), FAST).unwrap();
        let (_, other) = KeyArea::create(&secret("a"), FAST).unwrap();
        assert!(area
            .add(&other, &secret("b"), FAST)
            .unwrap_err()
            .contains("does not belong"));
    }

    #[test]
    fn full_slots_refuse_another() {
        let (mut area, key) = KeyArea::create(&secret("0"), FAST).unwrap();
        for i in 1..SLOTS {
            assert_eq!(area.add(&key, &secret(&i.to_string()), FAST), Ok(i));
        }
        assert!(area
            .add(&key, &secret("x"), FAST)
            .unwrap_err()
            .contains("in use"));
    }

    #[test]
    fn encode_decode_round_trips_and_bad_bytes_are_refused() {
        let (mut area, key) = KeyArea::create(&secret("a"), FAST).unwrap();
        area.add(&key, &secret("b"), FAST).unwrap();
        let bytes = area.encode();
        assert_eq!(KeyArea::decode(&bytes).unwrap(), area);
        let refuse = |at: usize, v: u8, what: &str| {
            let mut b = bytes;
            b[at] = v;
            let e = KeyArea::decode(&b).unwrap_err().0;
            assert!(e.contains(what), "byte {at} = {v}: {e}");
        };
        refuse(OFF_CIPHER, 2, "cipher");
        refuse(OFF_UNIT + 1, 16, "unit");
        refuse(HEADER_BYTES + 2 * SLOT_BYTES + 40, 1, "empty but not zero");
        refuse(HEADER_BYTES + SLOT_KDF, 2, "key derivation");
        refuse(HEADER_BYTES + SLOT_STATE, 9, "unknown state");
        // A hostile memory cost (2^31 KiB) is refused before Argon2id allocates it.
        refuse(HEADER_BYTES + SLOT_PARAMS + 3, 0x80, "memory");
        let empty = [0u8; KEY_AREA_BYTES];
        assert!(KeyArea::decode(&empty).unwrap_err().0.contains("cipher"));
        let mut none = bytes;
        none[HEADER_BYTES..].fill(0);
        assert!(KeyArea::decode(&none)
            .unwrap_err()
            .0
            .contains("no key slot"));
    }

    #[test]
    fn kdf_bounds() {
        assert!(KdfParams::DEFAULT.check().is_ok());
        let p = |m, t, p| KdfParams {
            memory_kib: m,
            iterations: t,
            parallelism: p,
        };
        assert!(p(7, 1, 1).check().is_err());
        assert!(p(8, 0, 1).check().is_err());
        assert!(p(64, 1, 0).check().is_err());
        assert!(p(64, 65, 1).check().is_err());
        assert!(p(KdfParams::MEMORY_KIB_MAX + 1, 1, 1).check().is_err());
    }
}
