//! Behaviour checks run against every implementation (scalar reference and fast paths).

use parity::Kernel;

use super::Rng;

/// One implementation's entry points: the scalar reference, the dispatching top level, or one
/// kernel picked explicitly.
#[derive(Clone, Copy, Debug)]
pub enum Impl {
    Scalar,
    Dispatch,
    Kernel(Kernel),
}

pub const SCALAR: Impl = Impl::Scalar;
pub const DISPATCH: Impl = Impl::Dispatch;

impl Impl {
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    pub fn xor_into(self, dst: &mut [u8], src: &[u8]) {
        match self {
            Impl::Scalar => parity::scalar::xor_into(dst, src),
            Impl::Dispatch => parity::xor_into(dst, src),
            Impl::Kernel(k) => k.xor_into(dst, src),
        }
    }

    pub fn xor_gen(self, srcs: &[&[u8]], dst: &mut [u8]) {
        match self {
            Impl::Scalar => parity::scalar::xor_gen(srcs, dst),
            Impl::Dispatch => parity::xor_gen(srcs, dst),
            Impl::Kernel(k) => k.xor_gen(srcs, dst),
        }
    }

    pub fn pq_gen(self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        match self {
            Impl::Scalar => parity::scalar::pq_gen(data, p, q),
            Impl::Dispatch => parity::pq_gen(data, p, q),
            Impl::Kernel(k) => k.pq_gen(data, p, q),
        }
    }

    pub fn pq_update(self, delta: &[u8], i: usize, p: &mut [u8], q: Option<&mut [u8]>) {
        match self {
            Impl::Scalar => parity::scalar::pq_update(delta, i, p, q),
            Impl::Dispatch => parity::pq_update(delta, i, p, q),
            Impl::Kernel(k) => k.pq_update(delta, i, p, q),
        }
    }

    pub fn reconstruct(self, blocks: &mut [&mut [u8]], has_q: bool, lost: &[usize]) {
        match self {
            Impl::Scalar => parity::scalar::reconstruct(blocks, has_q, lost),
            Impl::Dispatch => parity::reconstruct(blocks, has_q, lost),
            Impl::Kernel(k) => k.reconstruct(blocks, has_q, lost),
        }
    }
}

/// md's syndrome loop, byte by byte, with the shift-and-reduce multiply by 2 (Horner form,
/// highest data index first): independent of the crate's tables.
pub fn md_q_byte(column: &[u8]) -> u8 {
    let mut q = 0u8;
    for &d in column.iter().rev() {
        let carry = if q & 0x80 != 0 { 0x1d } else { 0 };
        q = (q << 1) ^ carry ^ d;
    }
    q
}

/// A random stripe: n data blocks of `len` bytes, then P and Q as md computes them.
pub fn random_stripe(rng: &mut Rng, n: usize, len: usize) -> Vec<Vec<u8>> {
    let mut blocks: Vec<Vec<u8>> = (0..n).map(|_| rng.bytes(len)).collect();
    let (p, q) = md_pq(&blocks, len);
    blocks.push(p);
    blocks.push(q);
    blocks
}

/// Every set of at most `max` distinct indices below `count`, in both orders for pairs.
pub fn loss_sets(count: usize, max: usize) -> Vec<Vec<usize>> {
    let mut sets = vec![vec![]];
    for a in 0..count {
        sets.push(vec![a]);
        if max >= 2 {
            for b in 0..count {
                if a != b {
                    sets.push(vec![a, b]);
                }
            }
        }
    }
    sets
}

/// Garble the lost blocks, reconstruct, and compare with the original stripe.
pub fn check_reconstruct(
    imp: Impl,
    rng: &mut Rng,
    stripe: &[Vec<u8>],
    has_q: bool,
    lost: &[usize],
) {
    let mut work: Vec<Vec<u8>> = stripe.to_vec();
    for &index in lost {
        rng.fill(&mut work[index]);
    }
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|b| b.as_mut_slice()).collect();
    imp.reconstruct(&mut refs, has_q, lost);
    for (index, (got, want)) in work.iter().zip(stripe).enumerate() {
        assert!(
            got == want,
            "{}: reconstruct n={} len={} has_q={has_q} lost={lost:?}: block {index} differs",
            imp.name(),
            stripe.len() - if has_q { 2 } else { 1 },
            want.len()
        );
    }
}

/// Every loss set on one random stripe, RAID 6 and RAID 5.
pub fn check_all_losses(imp: Impl, rng: &mut Rng, n: usize, len: usize) {
    let stripe = random_stripe(rng, n, len);
    for lost in loss_sets(n + 2, 2) {
        check_reconstruct(imp, rng, &stripe, true, &lost);
    }
    let raid5: Vec<Vec<u8>> = stripe[..n + 1].to_vec();
    for lost in loss_sets(n + 1, 1) {
        check_reconstruct(imp, rng, &raid5, false, &lost);
    }
}

/// pq_gen and xor_gen agree with md's byte loop on a random stripe.
pub fn check_generation(imp: Impl, rng: &mut Rng, n: usize, len: usize) {
    let stripe = random_stripe(rng, n, len);
    let data: Vec<&[u8]> = stripe[..n].iter().map(|b| b.as_slice()).collect();
    let mut p = rng.bytes(len);
    let mut q = rng.bytes(len);
    imp.pq_gen(&data, &mut p, &mut q);
    assert!(p == stripe[n], "{}: pq_gen P n={n} len={len}", imp.name());
    assert!(
        q == stripe[n + 1],
        "{}: pq_gen Q n={n} len={len}",
        imp.name()
    );
    let mut x = rng.bytes(len);
    imp.xor_gen(&data, &mut x);
    assert!(x == stripe[n], "{}: xor_gen n={n} len={len}", imp.name());
}

/// A random read-modify-write of data block i keeps P and Q equal to a fresh generation.
pub fn check_update(imp: Impl, rng: &mut Rng, n: usize, len: usize) {
    let mut stripe = random_stripe(rng, n, len);
    let i = rng.range(0, n - 1);
    let new_data = rng.bytes(len);
    let mut delta = stripe[i].clone();
    imp.xor_into(&mut delta, &new_data);
    let (head, parity) = stripe.split_at_mut(n);
    let (p, q) = parity.split_at_mut(1);
    imp.pq_update(&delta, i, &mut p[0], Some(&mut q[0]));
    head[i] = new_data;
    let expected = md_pq(&stripe[..n], stripe[0].len());
    assert!(
        stripe[n] == expected.0,
        "{}: pq_update P n={n} i={i} len={len}",
        imp.name()
    );
    assert!(
        stripe[n + 1] == expected.1,
        "{}: pq_update Q n={n} i={i} len={len}",
        imp.name()
    );
    let mut p5 = stripe[n].clone();
    imp.pq_update(&delta, i, &mut p5, None);
    imp.pq_update(&delta, i, &mut p5, None);
    assert!(
        p5 == stripe[n],
        "{}: pq_update twice without q must cancel",
        imp.name()
    );
}

/// P and Q of `len`-byte data blocks as md computes them, byte by byte.
fn md_pq(data: &[Vec<u8>], len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; len];
    for byte in 0..len {
        let column: Vec<u8> = data.iter().map(|b| b[byte]).collect();
        p[byte] = column.iter().fold(0, |acc, d| acc ^ d);
        q[byte] = md_q_byte(&column);
    }
    (p, q)
}
