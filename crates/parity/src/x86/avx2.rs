//! AVX2: 32-byte vectors, four per step, GF multiply by split-nibble `vpshufb` lookups.
//! Soundness of the pointer arithmetic is argued in the parent module.

use std::arch::x86_64::*;

use super::{nibble_tables, Factor};
use crate::plan::{Plan, MAX_OUTPUTS};

const WIDTH: usize = 32;
const UNROLL: usize = 4;

#[derive(Clone, Copy)]
struct Mul {
    factor: Factor,
    low: __m256i,
    high: __m256i,
}

struct Src {
    ptr: *const u8,
    to_p: bool,
    q: Mul,
}

struct Out {
    ptr: *mut u8,
    p: Mul,
    q: Mul,
    accumulate: bool,
}

#[target_feature(enable = "avx2")]
fn mul_of(c: u8) -> Mul {
    let tables = nibble_tables(c);
    // SAFETY: the table is 32 bytes: two unaligned 16-byte loads at offsets 0 and 16.
    let (low, high) = unsafe {
        (
            _mm_loadu_si128(tables.as_ptr().cast()),
            _mm_loadu_si128(tables.as_ptr().add(16).cast()),
        )
    };
    Mul {
        factor: Factor::of(c),
        low: _mm256_broadcastsi128_si256(low),
        high: _mm256_broadcastsi128_si256(high),
    }
}

#[target_feature(enable = "avx2")]
#[inline]
fn apply(m: Mul, v: __m256i) -> __m256i {
    match m.factor {
        Factor::Zero => _mm256_setzero_si256(),
        Factor::One => v,
        Factor::Other(_) => {
            let mask = _mm256_set1_epi8(0x0f);
            let low = _mm256_and_si256(v, mask);
            let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
            _mm256_xor_si256(
                _mm256_shuffle_epi8(m.low, low),
                _mm256_shuffle_epi8(m.high, high),
            )
        }
    }
}

/// Runs the plan over its whole 32-byte vectors; returns the number of bytes done.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn run(plan: &mut Plan) -> usize {
    let srcs: Vec<Src> = plan
        .sources
        .iter()
        .map(|s| Src {
            ptr: s.data.as_ptr(),
            to_p: s.to_p,
            q: mul_of(s.q_coef),
        })
        .collect();
    let outs: Vec<Out> = plan
        .outputs
        .iter_mut()
        .map(|o| Out {
            ptr: o.data.as_mut_ptr(),
            p: mul_of(o.p_coef),
            q: mul_of(o.q_coef),
            accumulate: o.accumulate,
        })
        .collect();
    assert!(outs.len() <= MAX_OUTPUTS);
    let len = plan.len;
    let mut off = 0;
    while off + UNROLL * WIDTH <= len {
        // SAFETY: off + UNROLL * WIDTH <= len (parent module: all slices are len bytes).
        unsafe { step::<UNROLL>(&srcs, &outs, off) };
        off += UNROLL * WIDTH;
    }
    while off + WIDTH <= len {
        // SAFETY: off + WIDTH <= len.
        unsafe { step::<1>(&srcs, &outs, off) };
        off += WIDTH;
    }
    off
}

/// One step of `L` vectors at byte offset `off`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the length of any source or output.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn step<const L: usize>(srcs: &[Src], outs: &[Out], off: usize) {
    let zero = _mm256_setzero_si256();
    let mut p = [zero; L];
    let mut q = [zero; L];
    for s in srcs {
        let mut v = [zero; L];
        for (k, v) in v.iter_mut().enumerate() {
            // SAFETY: in bounds by this function's contract; unaligned load.
            *v = unsafe { _mm256_loadu_si256(s.ptr.add(off + k * WIDTH).cast()) };
        }
        if s.to_p {
            for k in 0..L {
                p[k] = _mm256_xor_si256(p[k], v[k]);
            }
        }
        if s.q.factor != Factor::Zero {
            for k in 0..L {
                q[k] = _mm256_xor_si256(q[k], apply(s.q, v[k]));
            }
        }
    }
    for o in outs {
        for k in 0..L {
            let mut value = _mm256_xor_si256(apply(o.p, p[k]), apply(o.q, q[k]));
            let ptr = o.ptr.wrapping_add(off + k * WIDTH);
            if o.accumulate {
                // SAFETY: in bounds by this function's contract; unaligned load.
                value = _mm256_xor_si256(value, unsafe { _mm256_loadu_si256(ptr.cast()) });
            }
            // SAFETY: in bounds; the output is exclusively borrowed by the plan.
            unsafe { _mm256_storeu_si256(ptr.cast(), value) };
        }
    }
}
