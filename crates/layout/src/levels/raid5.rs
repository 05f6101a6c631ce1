//! RAID 5: distributed parity, md's left-symmetric placement (P on member (n−1) − (s mod n),
//! data index i on (P + 1 + i) mod n). The stripe arithmetic is shared with RAID 6
//! ([`ParityStripes`]); RAID 5 is the case with one parity block: 3 members at least, one may
//! go.

use super::parity_stripes::ParityStripes;

pub(crate) const RAID5: ParityStripes = ParityStripes { parity_count: 1 };
