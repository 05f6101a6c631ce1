//! x86-64 SIMD combination loops. The only `unsafe` code of the crate lives here.
//!
//! Each `run` returns how many leading bytes of the combination it did (AVX-512: all of them,
//! with masked head and tail steps; AVX2: the whole vectors); the caller finishes the rest byte
//! by byte. The loops share one pattern: [`Prepared`] turns the combination into raw pointers
//! with the sources grouped by what they feed ([`Groups`]); each step of `L` vectors loads every
//! source once, folds it into the `p` and `q` accumulators with a branch-free loop per group,
//! then combines the accumulators into each output with the output's coefficients.
//!
//! Soundness, shared by both modules: `Combination::new` asserted that every source and output
//! slice is exactly `combination.len` bytes long, and a step at byte offset `off` touches
//! `off..off + L * WIDTH`, which the loops keep `<= combination.len`. Loads and stores are
//! unaligned (`loadu`/`storeu`). Outputs are `&mut` slices borrowed from the combination, so no
//! source aliases an output and no two outputs alias. The raw pointers are used only while those
//! borrows are held.

pub mod avx2;
pub mod avx512;

use crate::combination::{Combination, Source, MAX_OUTPUTS};
#[cfg(test)]
use crate::gf::gf_mul;
use crate::gf::mul_const;

/// Combinations with at most this many sources are prepared without touching the heap.
const STACK_SOURCES: usize = 32;

/// A combination source as the loops see it.
#[derive(Clone, Copy)]
pub struct Src {
    pub ptr: *const u8,
    pub to_p: bool,
    pub q: Factor,
}

/// A combination output as the loops see it.
#[derive(Clone, Copy)]
pub struct Out {
    pub ptr: *mut u8,
    pub p: Factor,
    pub q: Factor,
    pub accumulate: bool,
}

impl Src {
    const NONE: Src = Src {
        ptr: std::ptr::null(),
        to_p: false,
        q: Factor::Zero,
    };

    /// Sort key grouping sources by what they feed (see [`Groups`]).
    pub fn kind(&self) -> u8 {
        match (self.to_p, self.q) {
            (true, Factor::Zero) => 0,
            (false, Factor::One) => 1,
            (true, Factor::One) => 2,
            (false, Factor::Other(_)) => 3,
            (true, Factor::Other(_)) => 4,
            (false, Factor::Zero) => 5,
        }
    }
}

impl Out {
    const NONE: Out = Out {
        ptr: std::ptr::null_mut(),
        p: Factor::Zero,
        q: Factor::Zero,
        accumulate: false,
    };
}

/// A combination's sources (sorted by [`Src::kind`]) and outputs as raw pointers, on the stack
/// for up to [`STACK_SOURCES`] sources, so a small call costs no allocation.
pub struct Prepared {
    stack: [Src; STACK_SOURCES],
    heap: Vec<Src>,
    source_count: usize,
    outs: [Out; MAX_OUTPUTS],
    output_count: usize,
}

impl Prepared {
    /// The raw pointers stay valid while the combination's borrows are held (the caller keeps
    /// `combination`).
    pub fn new(combination: &mut Combination) -> Prepared {
        let mut outs = [Out::NONE; MAX_OUTPUTS];
        assert!(combination.outputs.len() <= MAX_OUTPUTS);
        for (slot, o) in outs.iter_mut().zip(combination.outputs.iter_mut()) {
            let (p, q) = (Factor::of(o.p_coef), Factor::of(o.q_coef));
            *slot = Out {
                ptr: o.data.as_mut_ptr(),
                p,
                q,
                accumulate: o.accumulate,
            };
        }
        let to_src = |s: &Source| Src {
            ptr: s.data.as_ptr(),
            to_p: s.to_p,
            q: Factor::of(s.q_coef),
        };
        let mut prepared = Prepared {
            stack: [Src::NONE; STACK_SOURCES],
            heap: Vec::new(),
            source_count: combination.sources.len(),
            outs,
            output_count: combination.outputs.len(),
        };
        if combination.sources.len() <= STACK_SOURCES {
            for (slot, s) in prepared.stack.iter_mut().zip(combination.sources) {
                *slot = to_src(s);
            }
            prepared.stack[..combination.sources.len()].sort_unstable_by_key(Src::kind);
        } else {
            prepared.heap = combination.sources.iter().map(to_src).collect();
            prepared.heap.sort_unstable_by_key(Src::kind);
        }
        prepared
    }

    pub fn srcs(&self) -> &[Src] {
        if self.heap.is_empty() {
            &self.stack[..self.source_count]
        } else {
            &self.heap
        }
    }

    pub fn outs(&self) -> &[Out] {
        &self.outs[..self.output_count]
    }

    pub fn groups(&self) -> Groups<'_> {
        Groups::of(self.srcs())
    }
}

/// Sources split by what they feed, so each inner loop is branch-free: `p` only; `q` with
/// coefficient 1; both with 1; `q` with a multiply; both with a multiply. Sources that feed
/// nothing are dropped.
pub struct Groups<'a> {
    pub p_only: &'a [Src],
    pub q_one: &'a [Src],
    pub p_q_one: &'a [Src],
    pub q_mul: &'a [Src],
    pub p_q_mul: &'a [Src],
}

impl<'a> Groups<'a> {
    /// `srcs` must be sorted by [`Src::kind`].
    fn of(srcs: &'a [Src]) -> Groups<'a> {
        assert!(
            srcs.is_sorted_by_key(Src::kind),
            "combination sources must be grouped by kind"
        );
        let end = |kind: u8| srcs.partition_point(|s| s.kind() <= kind);
        let bounds = [0, end(0), end(1), end(2), end(3), end(4)];
        Groups {
            p_only: &srcs[bounds[0]..bounds[1]],
            q_one: &srcs[bounds[1]..bounds[2]],
            p_q_one: &srcs[bounds[2]..bounds[3]],
            q_mul: &srcs[bounds[3]..bounds[4]],
            p_q_mul: &srcs[bounds[4]..bounds[5]],
        }
    }
}

/// How a source or an output is multiplied, decided once per combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    Zero,
    One,
    /// Any other constant; kernels look up its multiply matrix or tables when they use it.
    Other(u8),
}

impl Factor {
    pub fn of(c: u8) -> Factor {
        match c {
            0 => Factor::Zero,
            1 => Factor::One,
            c => Factor::Other(c),
        }
    }
}

/// The GF2P8AFFINEQB matrix that multiplies a byte by `c` in GF(2^8)/0x11d (table lookup).
pub fn affine_matrix(c: u8) -> u64 {
    AFFINE[c as usize]
}

/// Split-nibble product tables for `vpshufb` (table lookup): bytes 0..16 hold c * nibble,
/// bytes 16..32 hold c * (nibble << 4).
pub fn nibble_tables(c: u8) -> &'static [u8; 32] {
    &NIBBLES[c as usize]
}

/// Built at compile time: computing a matrix per call cost more than the work on small blocks.
static AFFINE: [u64; 256] = build_affine();
static NIBBLES: [[u8; 32]; 256] = build_nibbles();

/// Multiplying by a constant is linear over GF(2), so it is an 8x8 bit matrix whatever the
/// polynomial (the instruction set's own multiply, GF2P8MULB, uses the AES polynomial 0x11b
/// and cannot be used). Output bit i of the product takes its row from byte 7 - i of the
/// matrix; bit k of that row is bit i of c * x^k.
const fn build_affine() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut matrix = 0u64;
        let mut out_bit = 0;
        while out_bit < 8 {
            let mut row = 0u64;
            let mut in_bit = 0;
            while in_bit < 8 {
                if mul_const(c as u8, 1 << in_bit) & (1 << out_bit) != 0 {
                    row |= 1 << in_bit;
                }
                in_bit += 1;
            }
            matrix |= row << (8 * (7 - out_bit));
            out_bit += 1;
        }
        table[c] = matrix;
        c += 1;
    }
    table
}

const fn build_nibbles() -> [[u8; 32]; 256] {
    let mut table = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut nibble = 0;
        while nibble < 16 {
            table[c][nibble] = mul_const(c as u8, nibble as u8);
            table[c][16 + nibble] = mul_const(c as u8, (nibble as u8) << 4);
            nibble += 1;
        }
        c += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies an affine matrix the way GF2P8AFFINEQB does (with b = 0), in plain Rust.
    fn apply_affine(matrix: u64, x: u8) -> u8 {
        let mut out = 0u8;
        for out_bit in 0..8 {
            let row = (matrix >> (8 * (7 - out_bit))) as u8;
            if (row & x).count_ones() % 2 == 1 {
                out |= 1 << out_bit;
            }
        }
        out
    }

    #[test]
    fn affine_matrix_and_nibble_tables_multiply_like_the_field() {
        for c in 0..=255u8 {
            let matrix = affine_matrix(c);
            let tables = nibble_tables(c);
            for x in 0..=255u8 {
                let want = gf_mul(c, x);
                assert_eq!(apply_affine(matrix, x), want, "affine c={c:#x} x={x:#x}");
                let (low, high) = (tables[(x & 15) as usize], tables[16 + (x >> 4) as usize]);
                assert_eq!(low ^ high, want);
            }
        }
    }

    #[test]
    fn identity_matrix_is_the_instruction_identity() {
        // The well-known GF2P8AFFINEQB identity matrix.
        assert_eq!(affine_matrix(1), 0x0102_0408_1020_4080);
    }
}
