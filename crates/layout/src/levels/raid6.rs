//! RAID 6: P+Q dual parity, md's left-symmetric placement (Q on the member after P, data from
//! P + 2; the data index is its Q coefficient exponent). The stripe arithmetic is shared with
//! RAID 5 ([`ParityStripes`]); RAID 6 is the case with two parity blocks: 4 members at least,
//! any two may go.

use super::parity_stripes::ParityStripes;

pub(crate) const RAID6: ParityStripes = ParityStripes { parity_count: 2 };
