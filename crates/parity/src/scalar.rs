//! Scalar reference implementations: plain byte loops over the GF(2^8) tables, written for
//! obviousness rather than speed. The fast kernels are tested against these.

use crate::gf::{gf_inv, gf_mul, gf_pow2, two_data_coefficients, MAX_DATA_BLOCKS};
use crate::stripe::{check_data_count, classify, common_len, Lost};

/// dst ^= src (equal lengths).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    common_len([dst.len(), src.len()]);
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// dst = XOR of all srcs (all equal length, at least one src).
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
    assert!(!srcs.is_empty(), "xor_gen: at least one source is required");
    common_len(srcs.iter().map(|s| s.len()).chain([dst.len()]));
    dst.copy_from_slice(srcs[0]);
    for src in &srcs[1..] {
        xor_into(dst, src);
    }
}

/// dst ^= c * src in GF(2^8).
fn mul_xor_into(dst: &mut [u8], c: u8, src: &[u8]) {
    common_len([dst.len(), src.len()]);
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= gf_mul(c, *s);
    }
}

/// Q = sum over i of g^i * data[i].
fn q_gen(data: &[&[u8]], q: &mut [u8]) {
    q.fill(0);
    for (i, block) in data.iter().enumerate() {
        mul_xor_into(q, gf_pow2(i), block);
    }
}

/// P = XOR of data; Q = sum over i of g^i * data[i] (GF(2^8), polynomial 0x11d, as Linux md).
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    check_data_count(data.len());
    common_len(data.iter().map(|d| d.len()).chain([p.len(), q.len()]));
    xor_gen(data, p);
    q_gen(data, q);
}

/// p ^= delta; q ^= g^data_index * delta, where delta = old_data ^ new_data.
pub fn pq_update(delta: &[u8], data_index: usize, p: &mut [u8], q: Option<&mut [u8]>) {
    xor_into(p, delta);
    if let Some(q) = q {
        assert!(
            data_index < MAX_DATA_BLOCKS,
            "pq_update: data index {data_index} out of range"
        );
        mul_xor_into(q, gf_pow2(data_index), delta);
    }
}

/// Rebuild up to two lost blocks in place. `blocks` = n data blocks, P, then Q when `has_q`.
pub fn reconstruct(blocks: &mut [&mut [u8]], has_q: bool, lost: &[usize]) {
    let (n, loss) = classify(blocks.len(), has_q, lost);
    common_len(blocks.iter().map(|b| b.len()));
    match loss {
        Lost::Nothing => {}
        Lost::Data(x) => rebuild_data_from_p(blocks, n, x),
        Lost::P => regenerate(blocks, n, true, false),
        Lost::Q => regenerate(blocks, n, false, true),
        Lost::PQ => regenerate(blocks, n, true, true),
        Lost::DataQ(x) => {
            rebuild_data_from_p(blocks, n, x);
            regenerate(blocks, n, false, true);
        }
        Lost::DataP(x) => {
            rebuild_data_from_q(blocks, n, x);
            regenerate(blocks, n, true, false);
        }
        Lost::DataData(x, y) => rebuild_two_data(blocks, n, x, y),
    }
}

/// Recompute P and/or Q from the n data blocks.
fn regenerate(blocks: &mut [&mut [u8]], n: usize, p: bool, q: bool) {
    let (data, parity) = blocks.split_at_mut(n);
    let data: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
    if p {
        xor_gen(&data, parity[0]);
    }
    if q {
        q_gen(&data, parity[1]);
    }
}

/// d_x = P ^ XOR of the other data blocks.
fn rebuild_data_from_p(blocks: &mut [&mut [u8]], n: usize, x: usize) {
    let target = std::mem::take(&mut blocks[x]);
    target.copy_from_slice(blocks[n]);
    for (i, block) in blocks[..n].iter().enumerate() {
        if i != x {
            xor_into(target, block);
        }
    }
    blocks[x] = target;
}

/// d_x = g^-x * (Q ^ sum over i != x of g^i d_i).
fn rebuild_data_from_q(blocks: &mut [&mut [u8]], n: usize, x: usize) {
    let target = std::mem::take(&mut blocks[x]);
    target.copy_from_slice(blocks[n + 1]);
    for (i, block) in blocks[..n].iter().enumerate() {
        if i != x {
            mul_xor_into(target, gf_pow2(i), block);
        }
    }
    let inv = gf_inv(gf_pow2(x));
    for byte in target.iter_mut() {
        *byte = gf_mul(inv, *byte);
    }
    blocks[x] = target;
}

/// Two data blocks x < y: with Pxy = P ^ (XOR of other data) = d_x ^ d_y and
/// Qxy = Q ^ (sum of g^i d_i over other data) = g^x d_x ^ g^y d_y,
/// d_x = a Pxy ^ b Qxy and d_y = Pxy ^ d_x.
fn rebuild_two_data(blocks: &mut [&mut [u8]], n: usize, x: usize, y: usize) {
    let dy = std::mem::take(&mut blocks[y]);
    let dx = std::mem::take(&mut blocks[x]);
    let (a, b) = two_data_coefficients(x, y);
    // dx holds Pxy, dy holds Qxy while they are being summed.
    dx.copy_from_slice(blocks[n]);
    dy.copy_from_slice(blocks[n + 1]);
    for (i, block) in blocks[..n].iter().enumerate() {
        if i != x && i != y {
            xor_into(dx, block);
            mul_xor_into(dy, gf_pow2(i), block);
        }
    }
    for (px, qx) in dx.iter_mut().zip(dy.iter_mut()) {
        let data_x = gf_mul(a, *px) ^ gf_mul(b, *qx);
        *qx = *px ^ data_x;
        *px = data_x;
    }
    blocks[x] = dx;
    blocks[y] = dy;
}
