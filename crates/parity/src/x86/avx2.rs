//! AVX2: 32-byte vectors, four per step. Two entry points share one loop: [`run`] multiplies by
//! split-nibble `vpshufb` lookups (AVX2 only), [`run_gfni`] by one `vgf2p8affineqb` (AVX2 +
//! GFNI). Soundness of the pointer arithmetic is argued in the parent module; the shared loop is
//! `#[inline(always)]` so it is compiled inside each entry point with that entry's features.

use std::arch::x86_64::*;

use super::{affine_matrix, nibble_tables, Factor, Groups, Out, Prepared, Src};
use crate::combination::Combination;

const WIDTH: usize = 32;
const UNROLL: usize = 4;

/// A constant multiplier in registers: with GFNI, `a` holds the affine matrix; without, `a` and
/// `b` hold the low- and high-nibble product tables.
#[derive(Clone, Copy)]
struct Mul {
    a: __m256i,
    b: __m256i,
}

/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn mul_of<const GFNI: bool>(c: u8) -> Mul {
    if GFNI {
        let matrix = _mm256_set1_epi64x(affine_matrix(c) as i64);
        return Mul {
            a: matrix,
            b: matrix,
        };
    }
    let tables = nibble_tables(c);
    // SAFETY: the table is 32 bytes: two unaligned 16-byte loads at offsets 0 and 16.
    let (low, high) = unsafe {
        (
            _mm_loadu_si128(tables.as_ptr().cast()),
            _mm_loadu_si128(tables.as_ptr().add(16).cast()),
        )
    };
    Mul {
        a: _mm256_broadcastsi128_si256(low),
        b: _mm256_broadcastsi128_si256(high),
    }
}

/// # Safety
/// The CPU must support AVX2, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn mul<const GFNI: bool>(m: Mul, v: __m256i) -> __m256i {
    if GFNI {
        // SAFETY: the caller guarantees GFNI support.
        return unsafe { _mm256_gf2p8affine_epi64_epi8::<0>(v, m.a) };
    }
    let mask = _mm256_set1_epi8(0x0f);
    let low = _mm256_and_si256(v, mask);
    let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
    _mm256_xor_si256(
        _mm256_shuffle_epi8(m.a, low),
        _mm256_shuffle_epi8(m.b, high),
    )
}

/// # Safety
/// The CPU must support AVX2, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn apply<const GFNI: bool>(factor: Factor, v: __m256i) -> __m256i {
    match factor {
        Factor::Zero => _mm256_setzero_si256(),
        Factor::One => v,
        // SAFETY: features as guaranteed by the caller.
        Factor::Other(c) => unsafe { mul::<GFNI>(mul_of::<GFNI>(c), v) },
    }
}

/// Runs the combination over its whole 32-byte vectors (nibble-table multiply); returns the
/// number of bytes done.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn run(combination: &mut Combination) -> usize {
    // SAFETY: AVX2 is guaranteed by the caller and enabled here.
    unsafe { run_body::<false>(combination) }
}

/// As [`run`], multiplying with GFNI.
///
/// # Safety
/// The CPU must support AVX2 and GFNI.
#[target_feature(enable = "avx2,gfni")]
pub unsafe fn run_gfni(combination: &mut Combination) -> usize {
    // SAFETY: AVX2 and GFNI are guaranteed by the caller and enabled here.
    unsafe { run_body::<true>(combination) }
}

/// # Safety
/// The CPU must support AVX2, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn run_body<const GFNI: bool>(combination: &mut Combination) -> usize {
    let prepared = Prepared::new(combination);
    let (outs, groups) = (prepared.outs(), prepared.groups());
    let len = combination.len;
    let mut off = 0;
    while off + UNROLL * WIDTH <= len {
        // SAFETY: off + UNROLL * WIDTH <= len (parent module: all slices are len bytes).
        unsafe { step::<UNROLL, GFNI>(&groups, outs, off) };
        off += UNROLL * WIDTH;
    }
    while off + WIDTH <= len {
        // SAFETY: off + WIDTH <= len.
        unsafe { step::<1, GFNI>(&groups, outs, off) };
        off += WIDTH;
    }
    off
}

/// One step of `L` vectors at byte offset `off`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the length of any source or output; the CPU must support
/// AVX2, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn step<const L: usize, const GFNI: bool>(groups: &Groups, outs: &[Out], off: usize) {
    let zero = _mm256_setzero_si256();
    let mut p = [zero; L];
    let mut q = [zero; L];
    // SAFETY (all five): the same bounds and feature contract as this function's.
    unsafe {
        fold::<L, GFNI, true, 0>(groups.p_only, off, &mut p, &mut q);
        fold::<L, GFNI, false, 1>(groups.q_one, off, &mut p, &mut q);
        fold::<L, GFNI, true, 1>(groups.p_q_one, off, &mut p, &mut q);
        fold::<L, GFNI, false, 2>(groups.q_mul, off, &mut p, &mut q);
        fold::<L, GFNI, true, 2>(groups.p_q_mul, off, &mut p, &mut q);
    }
    for o in outs {
        for k in 0..L {
            // SAFETY: features as guaranteed by this function's contract.
            let (from_p, from_q) = unsafe { (apply::<GFNI>(o.p, p[k]), apply::<GFNI>(o.q, q[k])) };
            let mut value = _mm256_xor_si256(from_p, from_q);
            let ptr = o.ptr.wrapping_add(off + k * WIDTH);
            if o.accumulate {
                // SAFETY: in bounds by this function's contract; unaligned load.
                value = _mm256_xor_si256(value, unsafe { _mm256_loadu_si256(ptr.cast()) });
            }
            // SAFETY: in bounds; the output is exclusively borrowed by the combination.
            unsafe { _mm256_storeu_si256(ptr.cast(), value) };
        }
    }
}

/// Folds `L` vectors at `off` of every source in `group` into the accumulators: into `p` when
/// `TO_P`; into `q` as-is when `Q == 1`, through the source's multiplier when `Q == 2`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the length of any source in `group`; the CPU must support
/// AVX2, and GFNI when `GFNI`.
#[inline(always)]
unsafe fn fold<const L: usize, const GFNI: bool, const TO_P: bool, const Q: u8>(
    group: &[Src],
    off: usize,
    p: &mut [__m256i; L],
    q: &mut [__m256i; L],
) {
    for s in group {
        let m = match s.q {
            // SAFETY: features as guaranteed by this function's contract.
            Factor::Other(c) => unsafe { mul_of::<GFNI>(c) },
            _ => Mul {
                a: _mm256_setzero_si256(),
                b: _mm256_setzero_si256(),
            },
        };
        for k in 0..L {
            // SAFETY: in bounds by this function's contract; unaligned load.
            let v = unsafe { _mm256_loadu_si256(s.ptr.add(off + k * WIDTH).cast()) };
            if TO_P {
                p[k] = _mm256_xor_si256(p[k], v);
            }
            if Q == 1 {
                q[k] = _mm256_xor_si256(q[k], v);
            } else if Q == 2 {
                // SAFETY: features as guaranteed by this function's contract.
                q[k] = _mm256_xor_si256(q[k], unsafe { mul::<GFNI>(m, v) });
            }
        }
    }
}
