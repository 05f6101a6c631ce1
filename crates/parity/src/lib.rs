//! RAID parity kernels: XOR (RAID 5 P) and RAID-6 P+Q syndromes, read-modify-write updates, and
//! recovery of any one or two lost blocks of a stripe.
//!
//! Q is computed exactly as Linux md computes it: `Q = sum over i of g^i * data[i]` in GF(2^8)
//! with generator g = 2 and polynomial 0x11d, where `data[i]` is the stripe's i-th data block in
//! logical order. Arrays written by raidkit therefore carry the same parity bytes md would.
//!
//! - [`xor_into`], [`xor_gen`], [`pq_gen`], [`pq_update`], [`reconstruct`]: the entry points; they
//!   dispatch to the fastest implementation the CPU supports (detected once at run time).
//! - [`Kernel`]: the implementations (portable, AVX2, AVX2+GFNI, AVX-512+GFNI) with the same
//!   operations as methods, for tests and benchmarks that pick one; [`Kernel::best`] is the
//!   dispatch choice ([`KERNEL_ENV`] can force one).
//! - [`scalar`]: the plain reference implementation of the same functions; always available.
//! - [`gf_mul`], [`gf_pow2`]: field helpers, e.g. for a caller that checks parity itself.
//!
//! Wrong arguments (unequal lengths, bad indices) are the caller's bug and panic with a message
//! naming the argument; they never depend on client input.
//!
//! ```
//! let d0 = [0x80u8; 3];
//! let d1 = [0x80u8; 3];
//! let (mut p, mut q) = ([0u8; 3], [0u8; 3]);
//! parity::pq_gen(&[&d0, &d1], &mut p, &mut q);
//! assert_eq!(p, [0; 3]);
//! assert_eq!(q, [0x80 ^ 0x1d; 3]); // g^0 * 0x80 + g^1 * 0x80
//!
//! // Lose both data blocks and get them back from P and Q.
//! let (mut a, mut b) = ([0u8; 3], [0u8; 3]);
//! parity::reconstruct(&mut [&mut a, &mut b, &mut p, &mut q], true, &[0, 1]);
//! assert_eq!((a, b), (d0, d1));
//! ```

mod combination;
mod gf;
mod kernel;
pub mod scalar;
mod stripe;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use gf::{gf_div, gf_inv, gf_mul, gf_pow2, MAX_DATA_BLOCKS};
pub use kernel::{Kernel, KERNEL_ENV};

/// dst ^= src (equal lengths).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    Kernel::best().xor_into(dst, src)
}

/// dst = XOR of all srcs (all equal length, at least one src).
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
    Kernel::best().xor_gen(srcs, dst)
}

/// RAID-6 syndromes as Linux md computes them: P = XOR of data; Q = sum over i of g^i * data[i]
/// in GF(2^8), generator g = 2, polynomial 0x11d. `data[i]` is data index i (logical order
/// within the stripe). At least one and at most [`MAX_DATA_BLOCKS`] data blocks.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    Kernel::best().pq_gen(data, p, q)
}

/// Read-modify-write update: given delta = old_data ^ new_data for data index `data_index`,
/// p ^= delta; q ^= g^data_index * delta. (q is None for RAID 5.)
pub fn pq_update(delta: &[u8], data_index: usize, p: &mut [u8], q: Option<&mut [u8]>) {
    Kernel::best().pq_update(delta, data_index, p, q)
}

/// Rebuild in place up to two lost blocks of a stripe. `blocks` holds the n data blocks
/// (index 0..n) then P (index n) then, when `has_q`, Q (index n+1). `lost` lists the indices
/// (0, 1 or 2 distinct, at most 1 when !has_q) whose contents are garbage and must be recomputed
/// from the others. Covers every case: one data; P; Q; data+data; data+P; data+Q; P+Q.
pub fn reconstruct(blocks: &mut [&mut [u8]], has_q: bool, lost: &[usize]) {
    Kernel::best().reconstruct(blocks, has_q, lost)
}
