//! AES-256-XTS over whole 512-byte units with VAES on 512-bit registers (AVX-512F + VAES +
//! AES-NI), the whole mode in one pass: each unit's first tweak encrypted with AES-NI, its 32
//! block tweaks made four at a time in registers (multiplied by α⁴ per register), each block
//! XORed, put through the 14 rounds and XORed again, and stored, eight registers (one unit) in
//! flight at once. The `aes` crate's VAES backend does the rounds as fast, but the XTS around it
//! (a tweak array in memory, two XOR passes, its blocks copied in and out of the backend's
//! arrays) made the whole 2 to 4 times slower (docs/PERFORMANCE.md "Encryption at rest").
//!
//! Used only when the processor has all three features ([`VaesXts::new`] checks at run time);
//! otherwise `cipher` uses the `aes` crate. Both are tested against `xts-mode` and the IEEE 1619
//! vector.
//!
//! Soundness of the `unsafe` here: every `#[target_feature]` function is called only through
//! [`VaesXts`], which exists only when `is_x86_feature_detected!` found `aes`, `avx512f` and
//! `vaes`; loads and stores are the unaligned forms, at offsets within the slices, whose
//! lengths are checked to be whole units (and equal, source and destination) before any.

use std::arch::x86_64::*;

use zeroize::Zeroize;

use crate::UNIT_BYTES;

const ROUND_KEYS: usize = 15;
/// 512-bit registers per unit (32 blocks of 16 bytes).
const REGS_PER_UNIT: usize = UNIT_BYTES / 64;

/// Round keys, as bytes (zeroed when dropped).
#[derive(Clone)]
struct RoundKeys([[u8; 16]; ROUND_KEYS]);

impl Drop for RoundKeys {
    fn drop(&mut self) {
        self.0.as_flattened_mut().zeroize();
    }
}

/// AES-256-XTS on VAES: the data key's encryption and decryption round keys, the tweak key's
/// encryption round keys.
pub(crate) struct VaesXts {
    enc1: RoundKeys,
    dec1: RoundKeys,
    enc2: RoundKeys,
}

impl VaesXts {
    /// The cipher for `key` (k1 ‖ k2), if this processor has AES-NI, AVX-512F and VAES.
    pub(crate) fn new(key: &[u8; 64]) -> Option<VaesXts> {
        if !(is_x86_feature_detected!("aes")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vaes"))
        {
            return None;
        }
        // SAFETY: AES-NI is present (checked above).
        unsafe {
            let enc1 = expand(key[..32].try_into().unwrap());
            let dec1 = inverse(&enc1);
            let enc2 = expand(key[32..].try_into().unwrap());
            Some(VaesXts { enc1, dec1, enc2 })
        }
    }

    /// Encrypts whole units of `src` into `dst` (the same length; they may be one buffer
    /// through [`VaesXts::encrypt_in_place`]); `src[0..512]` is unit `first_unit`.
    pub(crate) fn encrypt(&self, src: &[u8], dst: &mut [u8], first_unit: u64) {
        check(src.len(), dst.len());
        // SAFETY: `new` found the features; lengths checked; `src` and `dst` do not overlap
        // (a shared and a mutable borrow).
        unsafe {
            xts(
                &self.enc1,
                &self.enc2,
                src.as_ptr(),
                dst.as_mut_ptr(),
                src.len(),
                first_unit,
                Mode::Encrypt,
            )
        }
    }

    pub(crate) fn encrypt_in_place(&self, buf: &mut [u8], first_unit: u64) {
        self.in_place(buf, first_unit, Mode::Encrypt)
    }

    pub(crate) fn decrypt_in_place(&self, buf: &mut [u8], first_unit: u64) {
        self.in_place(buf, first_unit, Mode::Decrypt)
    }

    /// As [`VaesXts::decrypt_in_place`], but a unit that is all zero bytes is left as it is
    /// (tested on the registers already loaded, so it costs no pass of its own).
    pub(crate) fn decrypt_nonzero_in_place(&self, buf: &mut [u8], first_unit: u64) {
        self.in_place(buf, first_unit, Mode::DecryptNonzero)
    }

    fn in_place(&self, buf: &mut [u8], first_unit: u64, mode: Mode) {
        check(buf.len(), buf.len());
        let keys = match mode {
            Mode::Encrypt => &self.enc1,
            Mode::Decrypt | Mode::DecryptNonzero => &self.dec1,
        };
        let p = buf.as_mut_ptr();
        // SAFETY: as `encrypt`; source and destination are the same bytes, each unit's
        // registers all loaded before any is stored.
        unsafe { xts(keys, &self.enc2, p, p, buf.len(), first_unit, mode) }
    }
}

fn check(src: usize, dst: usize) {
    assert!(
        src.is_multiple_of(UNIT_BYTES),
        "{src} bytes are not whole units"
    );
    assert_eq!(src, dst, "source and destination differ in length");
}

/// AES-256 key expansion step producing an even round key (Intel's AES-NI white paper).
#[inline]
#[target_feature(enable = "aes")]
fn assist_even(t1: __m128i, t2: __m128i) -> __m128i {
    let t2 = _mm_shuffle_epi32::<0xff>(t2);
    let mut t1 = t1;
    let mut t4 = _mm_slli_si128::<4>(t1);
    t1 = _mm_xor_si128(t1, t4);
    t4 = _mm_slli_si128::<4>(t4);
    t1 = _mm_xor_si128(t1, t4);
    t4 = _mm_slli_si128::<4>(t4);
    t1 = _mm_xor_si128(t1, t4);
    _mm_xor_si128(t1, t2)
}

/// The odd round key's step.
#[inline]
#[target_feature(enable = "aes")]
fn assist_odd(t1: __m128i, t3: __m128i) -> __m128i {
    let t2 = _mm_shuffle_epi32::<0xaa>(_mm_aeskeygenassist_si128::<0>(t1));
    let mut t3 = t3;
    let mut t4 = _mm_slli_si128::<4>(t3);
    t3 = _mm_xor_si128(t3, t4);
    t4 = _mm_slli_si128::<4>(t4);
    t3 = _mm_xor_si128(t3, t4);
    t4 = _mm_slli_si128::<4>(t4);
    t3 = _mm_xor_si128(t3, t4);
    _mm_xor_si128(t3, t2)
}

fn store16(k: __m128i) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: an unaligned store of 16 bytes into 16 bytes.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), k) };
    out
}

fn load16(k: &[u8; 16]) -> __m128i {
    // SAFETY: an unaligned load of 16 bytes from 16 bytes.
    unsafe { _mm_loadu_si128(k.as_ptr().cast()) }
}

/// AES-256 encryption round keys of `key`.
#[target_feature(enable = "aes")]
fn expand(key: &[u8; 32]) -> RoundKeys {
    let mut rk = RoundKeys([[0; 16]; ROUND_KEYS]);
    let mut t1 = load16(key[..16].try_into().unwrap());
    let mut t3 = load16(key[16..].try_into().unwrap());
    rk.0[0] = store16(t1);
    rk.0[1] = store16(t3);
    macro_rules! even {
        ($i:expr, $rcon:expr) => {
            t1 = assist_even(t1, _mm_aeskeygenassist_si128::<$rcon>(t3));
            rk.0[$i] = store16(t1);
        };
    }
    macro_rules! pair {
        ($i:expr, $rcon:expr) => {
            even!($i, $rcon);
            t3 = assist_odd(t1, t3);
            rk.0[$i + 1] = store16(t3);
        };
    }
    pair!(2, 0x01);
    pair!(4, 0x02);
    pair!(6, 0x04);
    pair!(8, 0x08);
    pair!(10, 0x10);
    pair!(12, 0x20);
    even!(14, 0x40);
    rk
}

/// The decryption round keys (the equivalent inverse cipher) of encryption round keys `enc`.
#[target_feature(enable = "aes")]
fn inverse(enc: &RoundKeys) -> RoundKeys {
    let mut rk = RoundKeys([[0; 16]; ROUND_KEYS]);
    rk.0[0] = enc.0[ROUND_KEYS - 1];
    for i in 1..ROUND_KEYS - 1 {
        rk.0[i] = store16(_mm_aesimc_si128(load16(&enc.0[ROUND_KEYS - 1 - i])));
    }
    rk.0[ROUND_KEYS - 1] = enc.0[0];
    rk
}

/// Each 128-bit lane of `x` multiplied by α⁴ in GF(2^128) (XTS's little-endian convention):
/// shifted left by 4 bits across the lane's two 64-bit halves, the 4 bits out of the top
/// folded back in as their product with x⁷+x²+x+1 (0x87).
#[inline]
#[target_feature(enable = "avx512f")]
fn times_alpha4(x: __m512i) -> __m512i {
    let carry = _mm512_srli_epi64::<60>(x);
    // In each lane: the low half now holds the high half's 4 bits, the high half the low's.
    let swapped = _mm512_shuffle_epi32::<0x4e>(carry);
    let folded = _mm512_xor_si512(
        _mm512_xor_si512(swapped, _mm512_slli_epi64::<1>(swapped)),
        _mm512_xor_si512(
            _mm512_slli_epi64::<2>(swapped),
            _mm512_slli_epi64::<7>(swapped),
        ),
    );
    // Low halves (even 64-bit elements) take the folded bits, high halves the carry.
    let incoming = _mm512_mask_blend_epi64(0xaa, folded, swapped);
    _mm512_xor_si512(_mm512_slli_epi64::<4>(x), incoming)
}

/// The first register of tweaks of a unit whose first tweak is `t`: t, tα, tα², tα³.
fn first_tweaks(t: u128) -> [u128; 4] {
    let a = |t: u128| (t << 1) ^ (((t as i128) >> 127) as u128 & 0x87);
    let t1 = a(t);
    let t2 = a(t1);
    [t, t1, t2, a(t2)]
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Encrypt,
    Decrypt,
    /// Decrypt, leaving units that are all zero bytes as they are (in place only).
    DecryptNonzero,
}

/// Units of `src` encrypted (or decrypted with `keys` the decryption round keys) into `dst`.
/// Tweaks of up to 8 units are made at once (8 independent AES-NI chains).
///
/// # Safety
/// The processor has AES-NI, AVX-512F and VAES; `src` and `dst` are valid for `len` bytes,
/// `len` a multiple of 512, and either the same pointer or not overlapping; the same pointer
/// for `Mode::DecryptNonzero`.
#[target_feature(enable = "aes,avx512f,vaes")]
unsafe fn xts(
    keys: &RoundKeys,
    tweak_keys: &RoundKeys,
    src: *const u8,
    dst: *mut u8,
    len: usize,
    first_unit: u64,
    mode: Mode,
) {
    let k: [__m512i; ROUND_KEYS] =
        std::array::from_fn(|i| _mm512_broadcast_i32x4(load16(&keys.0[i])));
    let tk: [__m128i; ROUND_KEYS] = std::array::from_fn(|i| load16(&tweak_keys.0[i]));
    const GROUP: usize = 8;
    let units = len / UNIT_BYTES;
    let mut unit = 0;
    while unit < units {
        let n = (units - unit).min(GROUP);
        // The group's first tweaks: each unit's number encrypted with the tweak key.
        let mut t0 = [_mm_setzero_si128(); GROUP];
        for (i, t) in t0[..n].iter_mut().enumerate() {
            let number = u128::from(first_unit) + (unit + i) as u128;
            *t = _mm_xor_si128(load16(&number.to_le_bytes()), tk[0]);
        }
        for key in &tk[1..ROUND_KEYS - 1] {
            for t in &mut t0[..n] {
                *t = _mm_aesenc_si128(*t, *key);
            }
        }
        for t in &mut t0[..n] {
            *t = _mm_aesenclast_si128(*t, tk[ROUND_KEYS - 1]);
        }
        for t in &t0[..n] {
            let first = first_tweaks(u128::from_le_bytes(store16(*t)));
            let mut tw = [_mm512_setzero_si512(); REGS_PER_UNIT];
            // SAFETY: 64 bytes read from the 64-byte array.
            tw[0] = unsafe { _mm512_loadu_si512(first.as_ptr().cast()) };
            for r in 1..REGS_PER_UNIT {
                tw[r] = times_alpha4(tw[r - 1]);
            }
            let base = unit * UNIT_BYTES;
            unit += 1;
            let mut x = [_mm512_setzero_si512(); REGS_PER_UNIT];
            for (r, x) in x.iter_mut().enumerate() {
                // SAFETY: `base + 64 r + 64 <= len` (whole units); unaligned load.
                *x = unsafe { _mm512_loadu_si512(src.add(base + 64 * r).cast()) };
            }
            if mode == Mode::DecryptNonzero {
                let any = x
                    .iter()
                    .fold(_mm512_setzero_si512(), |a, &x| _mm512_or_si512(a, x));
                if _mm512_test_epi64_mask(any, any) == 0 {
                    // All zero: left as it is (`src` is `dst`).
                    continue;
                }
            }
            let mut b = [_mm512_setzero_si512(); REGS_PER_UNIT];
            for r in 0..REGS_PER_UNIT {
                b[r] = _mm512_xor_si512(_mm512_xor_si512(x[r], tw[r]), k[0]);
            }
            if mode == Mode::Encrypt {
                for key in &k[1..ROUND_KEYS - 1] {
                    for x in &mut b {
                        *x = _mm512_aesenc_epi128(*x, *key);
                    }
                }
                for x in &mut b {
                    *x = _mm512_aesenclast_epi128(*x, k[ROUND_KEYS - 1]);
                }
            } else {
                for key in &k[1..ROUND_KEYS - 1] {
                    for x in &mut b {
                        *x = _mm512_aesdec_epi128(*x, *key);
                    }
                }
                for x in &mut b {
                    *x = _mm512_aesdeclast_epi128(*x, k[ROUND_KEYS - 1]);
                }
            }
            for r in 0..REGS_PER_UNIT {
                // SAFETY: as the load above; every load of this unit came first.
                unsafe {
                    _mm512_storeu_si512(
                        dst.add(base + 64 * r).cast(),
                        _mm512_xor_si512(b[r], tw[r]),
                    )
                };
            }
        }
    }
}
