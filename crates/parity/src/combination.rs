//! The one linear combination every fast operation is expressed in, so that the SIMD code is a
//! single loop per instruction set instead of one per operation.
//!
//! For every byte offset, with `p = XOR of the sources marked to_p` and
//! `q = XOR of q_coef * source` (GF(2^8)), each output becomes
//! `out = (out if accumulate, else 0) ^ p_coef * p ^ q_coef * q`.
//! XOR, P+Q generation, RMW updates and every recovery case are such combinations (see
//! `kernel.rs`).

use crate::gf::gf_mul;
use crate::stripe::common_len;

/// At most this many outputs per combination (two lost blocks, or P and Q).
pub const MAX_OUTPUTS: usize = 2;

/// A block read by a combination.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    pub data: &'a [u8],
    /// Whether it is XORed into the running `p`.
    pub to_p: bool,
    /// Its coefficient in the running `q` (0: not part of q).
    pub q_coef: u8,
}

impl<'a> Source<'a> {
    const NONE: Source<'static> = Source {
        data: &[],
        to_p: false,
        q_coef: 0,
    };

    /// A data block: XORed into `p`, and into `q` times `q_coef` (0: not part of q).
    pub fn data(data: &'a [u8], q_coef: u8) -> Source<'a> {
        Source {
            data,
            to_p: true,
            q_coef,
        }
    }
}

/// Combinations with at most this many sources collect them without touching the heap.
const STACK_SOURCES: usize = 32;

/// A growing list of sources kept on the stack while it is short (a small parity call then
/// costs no allocation), moved to the heap beyond [`STACK_SOURCES`].
pub struct Sources<'a> {
    stack: [Source<'a>; STACK_SOURCES],
    heap: Vec<Source<'a>>,
    count: usize,
}

impl<'a> Sources<'a> {
    pub fn new() -> Sources<'a> {
        Sources {
            stack: [Source::NONE; STACK_SOURCES],
            heap: Vec::new(),
            count: 0,
        }
    }

    pub fn push(&mut self, source: Source<'a>) {
        if self.count < STACK_SOURCES {
            self.stack[self.count] = source;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack);
            }
            self.heap.push(source);
        }
        self.count += 1;
    }

    pub fn as_slice(&self) -> &[Source<'a>] {
        if self.count <= STACK_SOURCES {
            &self.stack[..self.count]
        } else {
            assert_eq!(self.heap.len(), self.count);
            &self.heap
        }
    }
}

/// A block written by a combination.
pub struct Output<'a> {
    pub data: &'a mut [u8],
    pub p_coef: u8,
    pub q_coef: u8,
    /// XOR the result into the existing contents instead of overwriting them.
    pub accumulate: bool,
}

impl<'a> Output<'a> {
    /// `data` receives `p` (`accumulate`: XORed into what it holds).
    pub fn p(data: &'a mut [u8], accumulate: bool) -> Output<'a> {
        Output {
            data,
            p_coef: 1,
            q_coef: 0,
            accumulate,
        }
    }

    /// `data` receives `q` (`accumulate`: XORed into what it holds).
    pub fn q(data: &'a mut [u8], accumulate: bool) -> Output<'a> {
        Output {
            data,
            p_coef: 0,
            q_coef: 1,
            accumulate,
        }
    }
}

/// A validated combination: all blocks have length `len`, 1..=MAX_OUTPUTS outputs, >= 1 source.
pub struct Combination<'p, 's, 'o> {
    pub sources: &'p [Source<'s>],
    pub outputs: &'p mut [Output<'o>],
    pub len: usize,
}

impl<'p, 's, 'o> Combination<'p, 's, 'o> {
    pub fn new(sources: &'p [Source<'s>], outputs: &'p mut [Output<'o>]) -> Self {
        assert!(!sources.is_empty(), "parity combination: no sources");
        assert!(
            (1..=MAX_OUTPUTS).contains(&outputs.len()),
            "parity combination: {} outputs, expected 1..={MAX_OUTPUTS}",
            outputs.len()
        );
        let lens = sources.iter().map(|s| s.data.len());
        let len = common_len(lens.chain(outputs.iter().map(|o| o.data.len())));
        Combination {
            sources,
            outputs,
            len,
        }
    }

    /// Executes the combination byte by byte on `start..len`: the tail the SIMD loops leave,
    /// and the whole combination on CPUs without SIMD support.
    pub fn run_scalar_from(&mut self, start: usize) {
        assert!(
            start <= self.len,
            "parity combination: tail start {start} past length {}",
            self.len
        );
        for offset in start..self.len {
            let (mut p, mut q) = (0u8, 0u8);
            for source in self.sources {
                let byte = source.data[offset];
                if source.to_p {
                    p ^= byte;
                }
                q ^= gf_mul(source.q_coef, byte);
            }
            for output in self.outputs.iter_mut() {
                let value = gf_mul(output.p_coef, p) ^ gf_mul(output.q_coef, q);
                let old = if output.accumulate {
                    output.data[offset]
                } else {
                    0
                };
                output.data[offset] = old ^ value;
            }
        }
    }
}
