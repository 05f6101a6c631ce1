//! RAID 5/6 reconstruction of a member range (read-error repair, rebuild, replace): one
//! contiguous read per readable member, then each stripe's lost blocks from `parity`.

use super::block_role;
use crate::error::IoError;
use crate::io::MemOp;
use crate::levels::Lost;
use crate::parts::Parts;

/// Largest per-member buffer kept for reuse: a background step (4 MiB). A thread keeps at most
/// one set (members × this).
const SCRATCH_KEEP_BYTES_MAX: u64 = 4 << 20;

thread_local! {
    /// Per-thread read buffers of `reconstruct_parity`, reused by the next call.
    static SCRATCH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// True when a stripe holding a member's `[offset, offset+len)` has untrusted parity (see
/// [`crate::ParityTrust`]): nothing of it can be reconstructed correctly yet. (A member's
/// row r belongs to stripe r on every role.)
pub(super) fn parity_untrusted_rows(io: &Parts, offset: u64, len: u64) -> bool {
    if len == 0 {
        return false;
    }
    let hook = io.trust.get();
    let chunk = io.geometry.chunk_bytes();
    (offset / chunk..(offset + len).div_ceil(chunk))
        .any(|stripe| io.parity_untrusted(hook.as_ref(), stripe))
}

/// RAID 5/6: one contiguous read per readable member, then each stripe's lost blocks.
pub(super) fn reconstruct_parity(
    io: &Parts,
    lost: &Lost<'_>,
    buf: &mut [u8],
) -> Result<(), IoError> {
    let (role, offset, readable) = (lost.role, lost.offset, lost.readable);
    let g = &io.geometry;
    let n = io.members.count();
    let len = buf.len();
    // Buffers are reused between calls on the same thread (a rebuild runs step after step
    // on one worker): every byte is overwritten by the reads or the reconstruction.
    let mut others = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    others.resize_with(n, Vec::new);
    for (r, b) in others.iter_mut().enumerate() {
        b.resize(if r == role { 0 } else { len }, 0);
    }
    let ops = others
        .iter_mut()
        .enumerate()
        .filter(|(r, _)| readable[*r])
        .map(|(r, b)| MemOp::Read {
            role: r,
            offset,
            buf: b.as_mut_slice(),
        })
        .collect();
    io.run(ops)?;
    // The role's own block is rebuilt straight into `buf`.
    let mut views: Vec<&mut [u8]> = Vec::with_capacity(n);
    let mut out = Some(buf);
    for (r, b) in others.iter_mut().enumerate() {
        views.push(match r == role {
            true => out.take().expect("one output"),
            false => b.as_mut_slice(),
        });
    }
    let chunk = g.chunk_bytes();
    let mut at = offset;
    while at < offset + len as u64 {
        let stripe = at / chunk;
        let end = ((stripe + 1) * chunk).min(offset + len as u64);
        let range = (at - offset) as usize..(end - offset) as usize;
        rebuild_stripe(g, stripe, &mut views, range, readable);
        at = end;
    }
    drop(views);
    if lost.reuse && len as u64 <= SCRATCH_KEEP_BYTES_MAX {
        SCRATCH.with(|s| *s.borrow_mut() = others);
    }
    Ok(())
}

/// Rebuilds the lost blocks of `stripe` over `range` of the per-role buffers.
fn rebuild_stripe(
    g: &layout::Geometry,
    stripe: u64,
    bufs: &mut [&mut [u8]],
    range: std::ops::Range<usize>,
    readable: &[bool],
) {
    let count = g.member_count();
    let mut by_role: Vec<Option<&mut [u8]>> = bufs
        .iter_mut()
        .map(|b| Some(&mut b[range.clone()]))
        .collect();
    let mut blocks: Vec<&mut [u8]> = (0..count)
        .map(|b| {
            by_role[block_role(g, stripe, b)]
                .take()
                .expect("each role holds one block")
        })
        .collect();
    let lost: Vec<usize> = (0..count)
        .filter(|&b| !readable[block_role(g, stripe, b)])
        .collect();
    assert!(lost.len() <= g.parity_count());
    if !lost.is_empty() {
        parity::reconstruct(&mut blocks, g.q_role(stripe).is_some(), &lost);
    }
}
