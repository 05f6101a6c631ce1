//! AVX-512 (F + BW) with GFNI: 64-byte vectors, eight per step, GF multiply by `vgf2p8affineqb`;
//! the loop is aligned to the first output, and the unaligned head and the short tail are done
//! with byte-masked loads and stores. Soundness of the pointer arithmetic is argued in the
//! parent module.

use std::arch::x86_64::*;

use super::{affine_matrix, Factor, Groups, Out, Prepared, Src};
use crate::combination::Combination;

const WIDTH: usize = 64;
const UNROLL: usize = 8;
const _: () = assert!(UNROLL == 8, "the remainder steps below assume 8");

#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
fn matrix(c: u8) -> __m512i {
    _mm512_set1_epi64(affine_matrix(c) as i64)
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
fn apply(factor: Factor, v: __m512i) -> __m512i {
    match factor {
        Factor::Zero => _mm512_setzero_si512(),
        Factor::One => v,
        Factor::Other(c) => _mm512_gf2p8affine_epi64_epi8::<0>(v, matrix(c)),
    }
}

/// Runs the whole combination; returns `combination.len`.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and GFNI.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub unsafe fn run(combination: &mut Combination) -> usize {
    let prepared = Prepared::new(combination);
    let (srcs, outs, groups) = (prepared.srcs(), prepared.outs(), prepared.groups());
    let len = combination.len;
    // Align the loop to the first output (buffers from one allocator often share their
    // misalignment, e.g. 16 bytes past a page for large glibc blocks): a 64-byte access that
    // straddles two cache lines costs two.
    let head = outs[0].ptr.align_offset(WIDTH).min(len);
    if head > 0 {
        // SAFETY: 0 + head <= len.
        unsafe { masked_step(srcs, outs, 0, head) };
    }
    let mut off = head;
    while off + UNROLL * WIDTH <= len {
        // SAFETY: off + UNROLL * WIDTH <= len (parent module: all slices are len bytes).
        unsafe { step::<UNROLL>(&groups, outs, off) };
        off += UNROLL * WIDTH;
    }
    // Fewer than UNROLL whole vectors remain: at most one step each of 4, 2 and 1.
    if off + 4 * WIDTH <= len {
        // SAFETY: off + 4 * WIDTH <= len.
        unsafe { step::<4>(&groups, outs, off) };
        off += 4 * WIDTH;
    }
    if off + 2 * WIDTH <= len {
        // SAFETY: off + 2 * WIDTH <= len.
        unsafe { step::<2>(&groups, outs, off) };
        off += 2 * WIDTH;
    }
    if off + WIDTH <= len {
        // SAFETY: off + WIDTH <= len.
        unsafe { step::<1>(&groups, outs, off) };
        off += WIDTH;
    }
    if off < len {
        // SAFETY: off + (len - off) = len.
        unsafe { masked_step(srcs, outs, off, len - off) };
    }
    len
}

/// One vector step over only the `count` (1..=64) bytes at `off`, with byte-masked loads and
/// stores: masked-off bytes are neither read (AVX-512 suppresses faults for masked-off
/// elements) nor written.
///
/// # Safety
/// `off + count` must not exceed the length of any source or output.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn masked_step(srcs: &[Src], outs: &[Out], off: usize, count: usize) {
    assert!((1..=WIDTH).contains(&count));
    let mask: __mmask64 = if count == WIDTH {
        !0
    } else {
        (1u64 << count) - 1
    };
    let (mut p, mut q) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for s in srcs {
        // SAFETY: only the first `count` bytes are read, in bounds by the contract.
        let v = unsafe { _mm512_maskz_loadu_epi8(mask, s.ptr.add(off).cast()) };
        if s.to_p {
            p = _mm512_xor_si512(p, v);
        }
        q = _mm512_xor_si512(q, apply(s.q, v));
    }
    for o in outs {
        let mut value = _mm512_xor_si512(apply(o.p, p), apply(o.q, q));
        let ptr = o.ptr.wrapping_add(off);
        if o.accumulate {
            // SAFETY: only the first `count` bytes are read, in bounds by the contract.
            value = _mm512_xor_si512(value, unsafe { _mm512_maskz_loadu_epi8(mask, ptr.cast()) });
        }
        // SAFETY: only the first `count` bytes are written; the output is exclusively borrowed.
        unsafe { _mm512_mask_storeu_epi8(ptr.cast(), mask, value) };
    }
}

/// One step of `L` vectors at byte offset `off`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the length of any source or output.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn step<const L: usize>(groups: &Groups, outs: &[Out], off: usize) {
    let zero = _mm512_setzero_si512();
    let mut p = [zero; L];
    let mut q = [zero; L];
    // SAFETY (all five): the same bounds contract as this function's.
    unsafe {
        fold::<L, true, 0>(groups.p_only, off, &mut p, &mut q);
        fold::<L, false, 1>(groups.q_one, off, &mut p, &mut q);
        fold::<L, true, 1>(groups.p_q_one, off, &mut p, &mut q);
        fold::<L, false, 2>(groups.q_mul, off, &mut p, &mut q);
        fold::<L, true, 2>(groups.p_q_mul, off, &mut p, &mut q);
    }
    for o in outs {
        // SAFETY (all arms): the same bounds contract as this function's.
        unsafe {
            match (o.p, o.q, o.accumulate) {
                (Factor::One, Factor::Zero, false) => emit::<L, false>(o, &p, off),
                (Factor::One, Factor::Zero, true) => emit::<L, true>(o, &p, off),
                (Factor::Zero, Factor::One, false) => emit::<L, false>(o, &q, off),
                (Factor::Zero, Factor::One, true) => emit::<L, true>(o, &q, off),
                _ => emit_combined::<L>(o, &p, &q, off),
            }
        }
    }
}

/// Writes `value` (XORed into the old contents when `ACCUMULATE`) to output `o` at `off`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the output's length.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn emit<const L: usize, const ACCUMULATE: bool>(o: &Out, value: &[__m512i; L], off: usize) {
    for (k, &value) in value.iter().enumerate() {
        let ptr = o.ptr.wrapping_add(off + k * WIDTH);
        // SAFETY: in bounds by this function's contract; unaligned load and store; the output
        // is exclusively borrowed by the combination.
        unsafe {
            let value = if ACCUMULATE {
                _mm512_xor_si512(value, _mm512_loadu_si512(ptr.cast()))
            } else {
                value
            };
            _mm512_storeu_si512(ptr.cast(), value);
        }
    }
}

/// Writes `o.p * p ^ o.q * q` (XORed into the old contents when `o.accumulate`) at `off`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the output's length.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn emit_combined<const L: usize>(o: &Out, p: &[__m512i; L], q: &[__m512i; L], off: usize) {
    let mut value = [_mm512_setzero_si512(); L];
    for k in 0..L {
        value[k] = _mm512_xor_si512(apply(o.p, p[k]), apply(o.q, q[k]));
    }
    // SAFETY: the same contract as this function's.
    unsafe {
        if o.accumulate {
            emit::<L, true>(o, &value, off);
        } else {
            emit::<L, false>(o, &value, off);
        }
    }
}

/// Folds `L` vectors at `off` of every source in `group` into the accumulators: into `p` when
/// `TO_P`; into `q` as-is when `Q == 1`, through the source's multiplier when `Q == 2`.
///
/// # Safety
/// `off + L * WIDTH` must not exceed the length of any source in `group`.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
unsafe fn fold<const L: usize, const TO_P: bool, const Q: u8>(
    group: &[Src],
    off: usize,
    p: &mut [__m512i; L],
    q: &mut [__m512i; L],
) {
    for s in group {
        let m = match s.q {
            Factor::Other(c) => matrix(c),
            _ => _mm512_setzero_si512(),
        };
        for k in 0..L {
            // SAFETY: in bounds by this function's contract; unaligned load.
            let v = unsafe { _mm512_loadu_si512(s.ptr.add(off + k * WIDTH).cast()) };
            if TO_P {
                p[k] = _mm512_xor_si512(p[k], v);
            }
            if Q == 1 {
                q[k] = _mm512_xor_si512(q[k], v);
            } else if Q == 2 {
                q[k] = _mm512_xor_si512(q[k], _mm512_gf2p8affine_epi64_epi8::<0>(v, m));
            }
        }
    }
}
