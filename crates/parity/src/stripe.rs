//! Argument checks shared by every implementation, and the classification of a set of lost
//! blocks into the recovery case that handles it.
//!
//! Wrong arguments are programming errors of the caller (the engine), never client input, so they
//! are `assert!`s: a parity routine that silently accepted mismatched lengths would corrupt data.

use crate::gf::MAX_DATA_BLOCKS;

/// Which blocks of a stripe are lost, in the shape the recovery code handles.
/// Data indices are logical data positions (0-based); P and Q are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Nothing to do.
    Nothing,
    /// One data block; rebuilt from P and the other data.
    Data(usize),
    /// P only; regenerated from the data.
    P,
    /// Q only; regenerated from the data.
    Q,
    /// Two data blocks `x < y`; rebuilt from P, Q and the other data.
    DataData(usize, usize),
    /// Data block `x` and P; `x` is rebuilt from Q, then P regenerated.
    DataP(usize),
    /// Data block `x` and Q; `x` is rebuilt from P, then Q regenerated.
    DataQ(usize),
    /// Both parities; regenerated from the data.
    PQ,
}

/// Asserts that every slice has the length of the first and returns it.
pub fn common_len(lens: impl IntoIterator<Item = usize>) -> usize {
    let mut iter = lens.into_iter();
    let first = iter.next().expect("parity: at least one block is required");
    for (i, len) in iter.enumerate() {
        assert_eq!(
            len,
            first,
            "parity: block {} has length {len}, block 0 has {first}",
            i + 1
        );
    }
    first
}

/// Asserts a RAID-6 data count: at least one block, at most [`MAX_DATA_BLOCKS`].
pub fn check_data_count(count: usize) {
    assert!(count >= 1, "parity: a stripe needs at least one data block");
    assert!(
        count <= MAX_DATA_BLOCKS,
        "parity: {count} data blocks exceed the RAID-6 maximum of {MAX_DATA_BLOCKS}"
    );
}

/// Validates `reconstruct` arguments and returns (data block count, classified loss).
pub fn classify(block_count: usize, has_q: bool, lost: &[usize]) -> (usize, Lost) {
    let parity_count = if has_q { 2 } else { 1 };
    assert!(
        block_count > parity_count,
        "reconstruct: {block_count} blocks cannot hold data plus {parity_count} parity"
    );
    let n = block_count - parity_count;
    check_data_count(n);
    assert!(
        lost.len() <= parity_count,
        "reconstruct: {} lost blocks exceed the {parity_count} parity block(s)",
        lost.len()
    );
    for &index in lost {
        assert!(
            index < block_count,
            "reconstruct: lost index {index} out of range 0..{block_count}"
        );
    }
    let (p, q) = (n, n + 1);
    let loss = match *lost {
        [] => Lost::Nothing,
        [a] => classify_one(a, p),
        [a, b] => {
            assert!(a != b, "reconstruct: lost index {a} listed twice");
            let (x, y) = (a.min(b), a.max(b));
            match (x < p, y) {
                (true, y) if y < p => Lost::DataData(x, y),
                (true, y) if y == p => Lost::DataP(x),
                (true, _) => Lost::DataQ(x),
                (false, _) => {
                    assert!(x == p && y == q);
                    Lost::PQ
                }
            }
        }
        _ => unreachable!("length checked above"),
    };
    (n, loss)
}

fn classify_one(index: usize, p: usize) -> Lost {
    if index < p {
        Lost::Data(index)
    } else if index == p {
        Lost::P
    } else {
        Lost::Q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_case_in_either_order() {
        // 4 data, P = 4, Q = 5
        assert_eq!(classify(6, true, &[]), (4, Lost::Nothing));
        assert_eq!(classify(6, true, &[2]), (4, Lost::Data(2)));
        assert_eq!(classify(6, true, &[4]), (4, Lost::P));
        assert_eq!(classify(6, true, &[5]), (4, Lost::Q));
        assert_eq!(classify(6, true, &[3, 1]), (4, Lost::DataData(1, 3)));
        assert_eq!(classify(6, true, &[4, 0]), (4, Lost::DataP(0)));
        assert_eq!(classify(6, true, &[3, 5]), (4, Lost::DataQ(3)));
        assert_eq!(classify(6, true, &[5, 4]), (4, Lost::PQ));
        assert_eq!(classify(3, false, &[2]), (2, Lost::P));
    }

    #[test]
    #[should_panic(expected = "listed twice")]
    fn rejects_duplicate_lost_index() {
        classify(6, true, &[1, 1]);
    }

    #[test]
    #[should_panic(expected = "exceed")]
    fn rejects_two_lost_without_q() {
        classify(4, false, &[0, 1]);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn rejects_out_of_range_index() {
        classify(4, false, &[4]);
    }
}
