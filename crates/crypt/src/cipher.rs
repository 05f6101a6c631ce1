//! AES-256-XTS over whole 512-byte units (IEEE 1619; dm-crypt's `aes-xts-plain64`): the tweak
//! of a unit is its array sector number (array byte / 512) as a 128-bit little-endian number,
//! so a unit's ciphertext depends on where it lies in the array and does not move with data.
//!
//! Two implementations ([`Implementation`]), chosen when the cipher is made: VAES where the
//! processor has it, unless `RAIDKIT_CRYPT=portable` ([`IMPLEMENTATION_ENV`]) forces the other:
//! - where the processor has AES-NI, AVX-512F and VAES (checked at run time), `crate::vaes`:
//!   the whole of XTS in one pass over 512-bit registers (tweaks made in registers, four
//!   blocks per instruction, eight registers in flight), reading the source and writing the
//!   destination once;
//! - elsewhere, XTS computed here around the `aes` crate (which itself picks AES-NI, VAES or
//!   its software AES at run time) over batches of up to 16 units: every tweak of the batch
//!   first, then one `encrypt_blocks` call over all its 512 blocks, so AES-NI works on many
//!   independent blocks at once.
//!
//! `xts-mode` encrypts one block at a time (each waiting for the last), which measured 20 to 30
//! times slower (docs/PERFORMANCE.md "Encryption at rest"); it stays as the reference the tests
//! compare both implementations with, with the IEEE 1619 vectors.

use aes::cipher::consts::U16;
use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::Aes256;
use std::sync::OnceLock;

use zeroize::Zeroizing;

use crate::UNIT_BYTES;

/// AES-256-XTS takes two 256-bit keys.
pub const DATA_KEY_BYTES: usize = 64;

/// The array's data key: random at `create`, kept wrapped in the key slots, zeroed when
/// dropped.
#[derive(Clone)]
pub struct DataKey(pub(crate) Zeroizing<[u8; DATA_KEY_BYTES]>);

impl DataKey {
    /// A new random key.
    pub fn random() -> DataKey {
        let mut key = Zeroizing::new([0u8; DATA_KEY_BYTES]);
        crate::random(&mut key[..]);
        DataKey(key)
    }

    /// A key from its bytes (tests, known-answer vectors).
    pub fn from_bytes(bytes: [u8; DATA_KEY_BYTES]) -> DataKey {
        DataKey(Zeroizing::new(bytes))
    }

    pub(crate) fn bytes(&self) -> &[u8; DATA_KEY_BYTES] {
        &self.0
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// Units per batch (their tweaks computed first, then one AES call over all their blocks).
const BATCH_UNITS: usize = 16;
const BLOCKS_PER_UNIT: usize = UNIT_BYTES / 16;

/// Environment variable choosing the XTS implementation of every array a process serves, read
/// once per process ([`Implementation::chosen`]): `auto` (or unset: VAES where the processor
/// has it, else portable), `portable` (around the `aes` crate, on any processor), `vaes`
/// (refused where the processor lacks it). Both write the same ciphertext; `portable` exists
/// to run the path a processor without VAES takes, end to end, on one that has it.
pub const IMPLEMENTATION_ENV: &str = "RAIDKIT_CRYPT";

/// An XTS implementation (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// One pass over 512-bit registers (`crate::vaes`): AES-NI, AVX-512F and VAES.
    Vaes,
    /// Batched around the `aes` crate: any processor.
    Portable,
}

impl Implementation {
    /// Its name, as [`IMPLEMENTATION_ENV`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Vaes => "vaes",
            Implementation::Portable => "portable",
        }
    }

    /// Whether this processor can run it.
    pub fn is_available(self) -> bool {
        match self {
            Implementation::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Implementation::Vaes => {
                is_x86_feature_detected!("aes")
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("vaes")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Implementation::Vaes => false,
        }
    }

    /// The fastest this processor runs.
    pub fn fastest() -> Implementation {
        if Implementation::Vaes.is_available() {
            Implementation::Vaes
        } else {
            Implementation::Portable
        }
    }

    /// The implementation an [`IMPLEMENTATION_ENV`] value asks for (`None`: unset), or why it
    /// cannot be had.
    pub fn from_setting(value: Option<&str>) -> Result<Implementation, String> {
        match value {
            None | Some("auto") => Ok(Implementation::fastest()),
            Some("portable") => Ok(Implementation::Portable),
            Some("vaes") if Implementation::Vaes.is_available() => Ok(Implementation::Vaes),
            Some("vaes") => Err(format!(
                "{IMPLEMENTATION_ENV}=vaes: this processor lacks AES-NI, AVX-512F or VAES; \
                 unset it (or set auto) to use the portable implementation"
            )),
            Some(other) => Err(format!(
                "{IMPLEMENTATION_ENV}={other:?}: not an XTS implementation; use auto, portable \
                 or vaes"
            )),
        }
    }

    /// What [`DataCipher::new`] uses: [`IMPLEMENTATION_ENV`]'s choice, read and checked once per
    /// process (the `raidkit` binary calls this at its start and refuses a bad value).
    pub fn chosen() -> Result<Implementation, String> {
        static CHOSEN: OnceLock<Result<Implementation, String>> = OnceLock::new();
        CHOSEN
            .get_or_init(|| {
                let value = std::env::var(IMPLEMENTATION_ENV);
                match &value {
                    Ok(v) => Implementation::from_setting(Some(v)),
                    Err(std::env::VarError::NotPresent) => Implementation::from_setting(None),
                    Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                        "{IMPLEMENTATION_ENV} is not UTF-8; use auto, portable or vaes"
                    )),
                }
            })
            .clone()
    }
}

/// AES-256-XTS with the array's data key.
pub struct DataCipher {
    /// Encrypts the data blocks (the key's first half).
    k1: Aes256,
    /// Encrypts each unit's tweak (the second half).
    k2: Aes256,
    /// The one-pass VAES implementation, when the processor has it.
    #[cfg(target_arch = "x86_64")]
    vaes: Option<crate::vaes::VaesXts>,
}

/// Multiplies a tweak by the primitive element α of GF(2^128) (IEEE 1619 5.2, little-endian).
fn times_alpha(t: u128) -> u128 {
    (t << 1) ^ (((t as i128) >> 127) as u128 & 0x87)
}

impl DataCipher {
    /// The cipher for `key` on [`Implementation::chosen`] (VAES where the processor has it,
    /// unless [`IMPLEMENTATION_ENV`] says otherwise; a bad value, which the binary refuses at
    /// its start, gives the fastest).
    pub fn new(key: &DataKey) -> DataCipher {
        DataCipher::with(
            key,
            Implementation::chosen().unwrap_or_else(|_| Implementation::fastest()),
        )
    }

    /// The cipher for `key` on `implementation`, which must be available.
    pub fn with(key: &DataKey, implementation: Implementation) -> DataCipher {
        #[allow(unused_mut)]
        let mut cipher = DataCipher::portable(key);
        match implementation {
            Implementation::Portable => {}
            #[cfg(target_arch = "x86_64")]
            Implementation::Vaes => {
                cipher.vaes = crate::vaes::VaesXts::new(key.bytes());
                assert!(
                    cipher.vaes.is_some(),
                    "VAES is not available on this processor"
                );
            }
            #[cfg(not(target_arch = "x86_64"))]
            Implementation::Vaes => panic!("VAES is not available on this processor"),
        }
        cipher
    }

    /// The cipher for `key` around the `aes` crate, whatever the processor has (the tests
    /// compare both implementations).
    pub fn portable(key: &DataKey) -> DataCipher {
        let (k1, k2) = key.bytes().split_at(DATA_KEY_BYTES / 2);
        DataCipher {
            k1: Aes256::new_from_slice(k1).expect("a 32-byte AES-256 key"),
            k2: Aes256::new_from_slice(k2).expect("a 32-byte AES-256 key"),
            #[cfg(target_arch = "x86_64")]
            vaes: None,
        }
    }

    /// Which implementation runs.
    pub fn implementation(&self) -> Implementation {
        #[cfg(target_arch = "x86_64")]
        if self.vaes.is_some() {
            return Implementation::Vaes;
        }
        Implementation::Portable
    }

    /// Encrypts whole units in place; `buf[0..512]` is unit `first_unit`.
    pub fn encrypt(&self, buf: &mut [u8], first_unit: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = &self.vaes {
            return v.encrypt_in_place(buf, first_unit);
        }
        self.xts(buf, first_unit, true)
    }

    /// Encrypts whole units of `src` into `dst` (the same length): one pass over the data where
    /// the processor has VAES, else a copy and [`DataCipher::encrypt`].
    pub fn encrypt_to(&self, src: &[u8], dst: &mut [u8], first_unit: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = &self.vaes {
            return v.encrypt(src, dst, first_unit);
        }
        dst.copy_from_slice(src);
        self.xts(dst, first_unit, true)
    }

    /// Decrypts whole units in place, leaving every unit that is all zero bytes as it is (the
    /// layer's zero units: see `layer`); `buf[0..512]` is unit `first_unit`. On VAES the zero
    /// test is made on the registers the unit is loaded into; elsewhere each run of units that
    /// are not zero is decrypted in one call.
    pub fn decrypt_nonzero(&self, buf: &mut [u8], first_unit: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = &self.vaes {
            return v.decrypt_nonzero_in_place(buf, first_unit);
        }
        assert!(
            buf.len().is_multiple_of(UNIT_BYTES),
            "{} bytes are not whole units",
            buf.len()
        );
        let units = buf.len() / UNIT_BYTES;
        let zero = |buf: &[u8], i: usize| is_zero(&buf[i * UNIT_BYTES..(i + 1) * UNIT_BYTES]);
        let mut i = 0;
        while i < units {
            if zero(buf, i) {
                i += 1;
                continue;
            }
            let run_start = i;
            while i < units && !zero(buf, i) {
                i += 1;
            }
            self.xts(
                &mut buf[run_start * UNIT_BYTES..i * UNIT_BYTES],
                first_unit + run_start as u64,
                false,
            );
        }
    }

    /// Decrypts whole units in place; `buf[0..512]` is unit `first_unit`.
    pub fn decrypt(&self, buf: &mut [u8], first_unit: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = &self.vaes {
            return v.decrypt_in_place(buf, first_unit);
        }
        self.xts(buf, first_unit, false)
    }

    fn xts(&self, buf: &mut [u8], first_unit: u64, encrypt: bool) {
        assert!(
            buf.len().is_multiple_of(UNIT_BYTES),
            "{} bytes are not whole units",
            buf.len()
        );
        let mut tweaks = [0u128; BATCH_UNITS * BLOCKS_PER_UNIT];
        for (b, batch) in buf.chunks_mut(BATCH_UNITS * UNIT_BYTES).enumerate() {
            let units = batch.len() / UNIT_BYTES;
            let first = u128::from(first_unit) + (b * BATCH_UNITS) as u128;
            // Each unit's first tweak: its sector number encrypted with the second key.
            let mut t0 = [Array::<u8, U16>::default(); BATCH_UNITS];
            for (i, t) in t0[..units].iter_mut().enumerate() {
                *t = Array((first + i as u128).to_le_bytes());
            }
            self.k2.encrypt_blocks(&mut t0[..units]);
            for (i, t) in t0[..units].iter().enumerate() {
                let mut tweak = u128::from_le_bytes(t.0);
                for slot in &mut tweaks[i * BLOCKS_PER_UNIT..(i + 1) * BLOCKS_PER_UNIT] {
                    *slot = tweak;
                    tweak = times_alpha(tweak);
                }
            }
            let tweaks = &tweaks[..units * BLOCKS_PER_UNIT];
            xor_tweaks(batch, tweaks);
            let (blocks, rest) = Array::<u8, U16>::slice_as_chunks_mut(batch);
            debug_assert!(rest.is_empty());
            match encrypt {
                true => self.k1.encrypt_blocks(blocks),
                false => self.k1.decrypt_blocks(blocks),
            }
            xor_tweaks(batch, tweaks);
        }
    }
}

/// True when `unit` is all zero bytes. ORs 64-byte lanes together (which the compiler turns
/// into wide vector ORs) instead of testing byte by byte, which cost as much as decrypting.
pub fn is_zero(unit: &[u8]) -> bool {
    let mut acc = [0u8; 64];
    for chunk in unit.chunks_exact(64) {
        for (a, b) in acc.iter_mut().zip(chunk) {
            *a |= b;
        }
    }
    let mut rest = 0;
    for b in unit.chunks_exact(64).remainder() {
        rest |= b;
    }
    acc.iter().fold(rest, |x, y| x | y) == 0
}

/// XORs block `i` of `buf` with `tweaks[i]`.
fn xor_tweaks(buf: &mut [u8], tweaks: &[u128]) {
    for (block, t) in buf.chunks_exact_mut(16).zip(tweaks) {
        let x = u128::from_le_bytes(block.try_into().unwrap()) ^ t;
        block.copy_from_slice(&x.to_le_bytes());
    }
}

impl std::fmt::Debug for DataCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataCipher(aes-256-xts, 512-byte units)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// IEEE 1619-2007 (XTS-AES) test vector 10: XTS-AES-256, one 512-byte data unit, data unit
    /// sequence number 0xff, plaintext bytes 00..ff twice.
    const V10_KEY1: &str = "2718281828459045235360287471352662497757247093699959574966967627";
    const V10_KEY2: &str = "3141592653589793238462643383279502884197169399375105820974944592";
    const V10_CIPHERTEXT: &str = "
        1c3b3a102f770386e4836c99e370cf9bea00803f5e482357a4ae12d414a3e63b
        5d31e276f8fe4a8d66b317f9ac683f44680a86ac35adfc3345befecb4bb188fd
        5776926c49a3095eb108fd1098baec70aaa66999a72a82f27d848b21d4a741b0
        c5cd4d5fff9dac89aeba122961d03a757123e9870f8acf1000020887891429ca
        2a3e7a7d7df7b10355165c8b9a6d0a7de8b062c4500dc4cd120c0f7418dae3d0
        b5781c34803fa75421c790dfe1de1834f280d7667b327f6c8cd7557e12ac3a0f
        93ec05c52e0493ef31a12d3d9260f79a289d6a379bc70c50841473d1a8cc81ec
        583e9645e07b8d9670655ba5bbcfecc6dc3966380ad8fecb17b6ba02469a020a
        84e18e8f84252070c13e9f1f289be54fbc481457778f616015e1327a02b140f1
        505eb309326d68378f8374595c849d84f4c333ec4423885143cb47bd71c5edae
        9be69a2ffeceb1bec9de244fbe15992b11b77c040f12bd8f6a975a44a0f90c29
        a9abc3d4d893927284c58754cce294529f8614dcd2aba991925fedc4ae74ffac
        6e333b93eb4aff0479da9a410e4450e0dd7ae4c6e2910900575da401fc07059f
        645e8b7e9bfdef33943054ff84011493c27b3429eaedb4ed5376441a77ed4385
        1ad77f16f541dfd269d50d6a5f14fb0aab1cbb4c1550be97f7ab4066193c4caa
        773dad38014bd2092fa755c824bb5e54c4f36ffda9fcea70b9c6e693e148c151";

    fn vector10_key() -> DataKey {
        let mut key = [0u8; DATA_KEY_BYTES];
        key[..32].copy_from_slice(&hex(V10_KEY1));
        key[32..].copy_from_slice(&hex(V10_KEY2));
        DataKey::from_bytes(key)
    }

    /// Both implementations for `key`: the one `new` picks (VAES where present) and the
    /// portable one.
    fn both(key: &DataKey) -> [DataCipher; 2] {
        [DataCipher::new(key), DataCipher::portable(key)]
    }

    fn vector10() -> (DataCipher, Vec<u8>, Vec<u8>) {
        let plain: Vec<u8> = (0..512).map(|i| i as u8).collect();
        (DataCipher::new(&vector10_key()), plain, hex(V10_CIPHERTEXT))
    }

    #[test]
    fn ieee_1619_vector_10_encrypts_and_decrypts() {
        let (_, plain, expected) = vector10();
        for cipher in both(&vector10_key()) {
            let what = cipher.implementation().name();
            let mut buf = plain.clone();
            cipher.encrypt(&mut buf, 0xff);
            assert_eq!(buf, expected, "{what}");
            let mut out = vec![0u8; 512];
            cipher.encrypt_to(&plain, &mut out, 0xff);
            assert_eq!(out, expected, "{what} encrypt_to");
            cipher.decrypt(&mut buf, 0xff);
            assert_eq!(buf, plain, "{what}");
        }
    }

    /// `new` takes the VAES implementation exactly when the processor has AES-NI, AVX-512F
    /// and VAES, so the fast path the data path relies on is the one tested here.
    #[test]
    fn new_uses_vaes_where_the_processor_has_it() {
        let cipher = DataCipher::new(&vector10_key());
        #[cfg(target_arch = "x86_64")]
        let has = is_x86_feature_detected!("aes")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vaes");
        #[cfg(not(target_arch = "x86_64"))]
        let has = false;
        let want = if has {
            Implementation::Vaes
        } else {
            Implementation::Portable
        };
        assert_eq!(Implementation::Vaes.is_available(), has);
        assert_eq!(Implementation::fastest(), want);
        // The test process runs without RAIDKIT_CRYPT (the suite sets none).
        assert_eq!(cipher.implementation(), want);
        assert_eq!(
            DataCipher::portable(&vector10_key()).implementation(),
            Implementation::Portable
        );
        assert_eq!(
            DataCipher::with(&vector10_key(), Implementation::Portable).implementation(),
            Implementation::Portable
        );
    }

    /// RAIDKIT_CRYPT's values: auto and unset are the fastest, portable is always had, vaes
    /// only where the processor has it, anything else is refused naming the values.
    #[test]
    fn the_setting_picks_an_implementation_or_says_why_not() {
        let fastest = Implementation::fastest();
        assert_eq!(Implementation::from_setting(None), Ok(fastest));
        assert_eq!(Implementation::from_setting(Some("auto")), Ok(fastest));
        assert_eq!(
            Implementation::from_setting(Some("portable")),
            Ok(Implementation::Portable)
        );
        match Implementation::from_setting(Some("vaes")) {
            Ok(got) => {
                assert!(Implementation::Vaes.is_available());
                assert_eq!(got, Implementation::Vaes);
            }
            Err(e) => {
                assert!(!Implementation::Vaes.is_available());
                assert!(e.contains("lacks AES-NI, AVX-512F or VAES"), "{e}");
            }
        }
        let e = Implementation::from_setting(Some("soft")).unwrap_err();
        assert!(
            e.contains("RAIDKIT_CRYPT=\"soft\"") && e.contains("auto, portable or vaes"),
            "{e}"
        );
    }

    #[test]
    fn the_tweak_is_the_unit_number_so_units_of_an_area_match_units_alone() {
        let (cipher, plain, expected) = vector10();
        // Three units from 0xfe: the middle one is vector 10's unit 0xff.
        let mut area = [plain.clone(), plain.clone(), plain.clone()].concat();
        cipher.encrypt(&mut area, 0xfe);
        assert_eq!(&area[512..1024], &expected[..]);
        assert_ne!(
            &area[..512],
            &expected[..],
            "another unit number, another ciphertext"
        );
        assert_ne!(&area[1024..], &expected[..]);
        cipher.decrypt(&mut area, 0xfe);
        assert_eq!(area, [plain.clone(), plain.clone(), plain].concat());
    }

    /// Both implementations against `xts-mode`'s block-at-a-time XTS, over random keys, unit
    /// numbers (past 2^64 sectors' tweaks too: the top bits) and lengths crossing batches and
    /// the VAES code's groups of 8 units; in place and into another buffer.
    #[test]
    fn batched_xts_matches_xts_mode() {
        use testsupport::{seed, Rng, SeedGuard};
        use xts_mode::{get_tweak_default, Xts128};
        let s = seed("batched_xts_matches_xts_mode");
        let _guard = SeedGuard(s, "batched_xts_matches_xts_mode");
        let mut rng = Rng::new(s);
        for _ in 0..50 {
            let mut key = [0u8; DATA_KEY_BYTES];
            rng.fill(&mut key);
            let ours = both(&DataKey::from_bytes(key));
            let reference = Xts128::new(
                Aes256::new_from_slice(&key[..32]).unwrap(),
                Aes256::new_from_slice(&key[32..]).unwrap(),
            );
            let units = rng.range(1, 3 * BATCH_UNITS + 2);
            let first = match rng.chance(20) {
                true => u64::MAX - units as u64,
                false => rng.next_u64() >> rng.below(64),
            };
            let plain = rng.bytes(units * UNIT_BYTES);
            let mut b = plain.clone();
            reference.encrypt_area(&mut b, UNIT_BYTES, u128::from(first), get_tweak_default);
            for cipher in &ours {
                let what = cipher.implementation().name();
                let mut a = plain.clone();
                cipher.encrypt(&mut a, first);
                assert_eq!(a, b, "{what}: {units} units from {first}");
                let mut c = vec![0u8; a.len()];
                cipher.encrypt_to(&plain, &mut c, first);
                assert_eq!(c, b, "{what} encrypt_to: {units} units from {first}");
                cipher.decrypt(&mut a, first);
                assert_eq!(a, plain, "{what}: {units} units from {first}");
            }
        }
    }

    /// `decrypt_nonzero` leaves units of zero bytes zero and decrypts the others as `decrypt`
    /// does, in both implementations, whatever the mix (runs of each, crossing groups).
    #[test]
    fn decrypt_nonzero_leaves_zero_units_and_decrypts_the_rest() {
        use testsupport::{seed, Rng, SeedGuard};
        let s = seed("decrypt_nonzero_leaves_zero_units");
        let _guard = SeedGuard(s, "decrypt_nonzero_leaves_zero_units");
        let mut rng = Rng::new(s);
        for _ in 0..30 {
            let mut key = [0u8; DATA_KEY_BYTES];
            rng.fill(&mut key);
            let units = rng.range(1, 40);
            let first = rng.next_u64() >> 8;
            let zero: Vec<bool> = (0..units).map(|_| rng.chance(40)).collect();
            let plain = rng.bytes(units * UNIT_BYTES);
            for cipher in both(&DataKey::from_bytes(key)) {
                let what = cipher.implementation().name();
                let mut buf = plain.clone();
                cipher.encrypt(&mut buf, first);
                for (i, z) in zero.iter().enumerate() {
                    if *z {
                        buf[i * UNIT_BYTES..(i + 1) * UNIT_BYTES].fill(0);
                    }
                }
                cipher.decrypt_nonzero(&mut buf, first);
                for (i, z) in zero.iter().enumerate() {
                    let got = &buf[i * UNIT_BYTES..(i + 1) * UNIT_BYTES];
                    match z {
                        true => assert!(got.iter().all(|&b| b == 0), "{what}: unit {i}"),
                        false => assert_eq!(
                            got,
                            &plain[i * UNIT_BYTES..(i + 1) * UNIT_BYTES],
                            "{what}: unit {i}"
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn another_key_gives_another_ciphertext() {
        let (_, plain, expected) = vector10();
        let other = DataCipher::new(&DataKey::from_bytes([7; DATA_KEY_BYTES]));
        let mut buf = plain;
        other.encrypt(&mut buf, 0xff);
        assert_ne!(buf, expected);
    }
}
