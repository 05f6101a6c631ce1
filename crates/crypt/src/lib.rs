//! Encryption at rest: AES-256-XTS per 512-byte unit of the array, with the data key wrapped in
//! key slots by Argon2id-derived keys (as LUKS2 does), and the export layer that encrypts every
//! write and decrypts every read between the read cache and the journal layer.
//!
//! - [`cipher`]: [`DataKey`] (the random 64-byte AES-256-XTS key) and [`DataCipher`], which
//!   encrypts and decrypts whole units in place, the unit's array sector number as the tweak.
//! - [`slots`]: [`KeyArea`], the encryption header and eight key slots kept in every member's
//!   superblock (docs/FORMAT.md "Encryption"): its byte layout, creating one, unlocking (a
//!   wrong key is refused by each slot's check value, never by decrypting garbage), adding and
//!   removing slots (never the last).
//! - [`secret`]: where a key or passphrase comes from ([`KeySource`]: a key file, a passphrase
//!   file, or a prompt on the terminal).
//! - [`layer`]: [`Encrypted`], the `nbd::Export` filter; a unit's read-modify-write for a
//!   request that does not cover it whole runs under `member::BlockLocks`.
//!
//! Below this layer (journal, volume, members) everything is ciphertext: parity is computed over
//! ciphertext, and scrub, rebuild, resync, replace and journal replay need no key.

pub mod cipher;
pub mod layer;
pub mod secret;
pub mod slots;
#[cfg(target_arch = "x86_64")]
mod vaes;

pub use cipher::{DataCipher, DataKey, Implementation, DATA_KEY_BYTES, IMPLEMENTATION_ENV};
pub use layer::Encrypted;
pub use secret::{KeySource, Secret};
pub use slots::{KdfParams, KeyArea, KeyAreaError, UnlockError, KEY_AREA_BYTES, SLOTS};

/// The encryption unit: one tweak per 512 bytes. Every NBD client sends 512-byte-aligned
/// requests (the kernel, qemu, libnbd), so only a request that is not needs a unit's
/// read-modify-write (see `layer`).
/// (At the crate's root, so `cipher` and `vaes`, which `cipher` chooses between, both name it
/// without naming each other.)
pub const UNIT_BYTES: usize = 512;

/// Fills `buf` from the operating system's random source (`getrandom`).
pub(crate) fn random(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the operating system's random source failed");
}
