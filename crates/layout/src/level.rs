//! RAID levels: names and aliases; each level's rules are its module in `levels`.

use std::fmt;
use std::str::FromStr;

/// A RAID level. Each level's mapping follows Linux md (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Members concatenated one after another (md "linear"); alias `concat`.
    Linear,
    /// Striping without redundancy.
    Raid0,
    /// n-way mirror.
    Raid1,
    /// Striped mirrors, md "near" layout with 2 copies.
    Raid10,
    /// Distributed parity, left-symmetric.
    Raid5,
    /// P+Q dual parity, left-symmetric.
    Raid6,
}

/// The text given for a level was none of the accepted names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseLevelError {
    /// What the user typed.
    pub text: String,
}

impl fmt::Display for ParseLevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown RAID level {:?}: expected one of linear, concat, 0, raid0, 1, raid1, 10, raid10, 5, raid5, 6, raid6",
            self.text
        )
    }
}

impl std::error::Error for ParseLevelError {}

impl FromStr for Level {
    type Err = ParseLevelError;

    fn from_str(text: &str) -> Result<Level, ParseLevelError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "linear" | "concat" => Ok(Level::Linear),
            "0" | "raid0" => Ok(Level::Raid0),
            "1" | "raid1" => Ok(Level::Raid1),
            "10" | "raid10" => Ok(Level::Raid10),
            "5" | "raid5" => Ok(Level::Raid5),
            "6" | "raid6" => Ok(Level::Raid6),
            _ => Err(ParseLevelError {
                text: text.to_string(),
            }),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Level {
    /// Every level, for tests and help texts.
    pub const ALL: [Level; 6] = [
        Level::Linear,
        Level::Raid0,
        Level::Raid1,
        Level::Raid10,
        Level::Raid5,
        Level::Raid6,
    ];

    /// Canonical name (`linear`, `raid0`, ...), as printed and accepted back by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Linear => "linear",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid10 => "raid10",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
        }
    }

    /// Fewest members an array of this level may have.
    pub fn min_members(self) -> usize {
        self.rules().min_members()
    }

    /// The fewest data bytes a member must have: one chunk (linear: one byte, members are
    /// used whole).
    pub fn member_bytes_min(self, chunk_bytes: u64) -> u64 {
        self.rules().member_bytes_min(chunk_bytes)
    }

    /// Most members that may be missing from an array of `member_count` members in the best
    /// case. For RAID 10 this is one per mirror pair; whether a particular set of missing
    /// members is survivable is `Geometry::survives`.
    pub fn max_missing(self, member_count: usize) -> usize {
        assert!(member_count >= self.min_members());
        self.rules().max_missing(member_count)
    }

    /// Parity members per stripe: 1 for RAID 5, 2 for RAID 6, 0 otherwise.
    pub fn parity_count(self) -> usize {
        self.rules().parity_count()
    }

    /// True for the levels whose stripes carry parity (RAID 5 and 6).
    pub fn has_parity(self) -> bool {
        self.parity_count() > 0
    }

    /// True for the levels that keep copies of every chunk (RAID 1 and 10).
    pub fn is_mirrored(self) -> bool {
        self.rules().is_mirrored()
    }

    /// True for the levels that can lose a member and keep their data (all but linear and
    /// RAID 0): they resync, rebuild and scrub.
    pub fn has_redundancy(self) -> bool {
        self.rules().max_missing(self.min_members()) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_parse() {
        let cases = [
            ("linear", Level::Linear),
            ("concat", Level::Linear),
            ("0", Level::Raid0),
            ("raid0", Level::Raid0),
            ("1", Level::Raid1),
            ("RAID1", Level::Raid1),
            ("10", Level::Raid10),
            ("raid10", Level::Raid10),
            ("5", Level::Raid5),
            ("raid5", Level::Raid5),
            ("6", Level::Raid6),
            ("raid6", Level::Raid6),
        ];
        for (text, level) in cases {
            assert_eq!(text.parse::<Level>(), Ok(level), "{text}");
        }
        for level in Level::ALL {
            assert_eq!(level.to_string().parse::<Level>(), Ok(level));
        }
        let err = "raid7".parse::<Level>().unwrap_err();
        assert!(err.to_string().contains("\"raid7\""), "{err}");
    }

    #[test]
    fn member_rules() {
        let mins: Vec<usize> = Level::ALL.iter().map(|l| l.min_members()).collect();
        assert_eq!(mins, [1, 2, 2, 2, 3, 4]);
        assert_eq!(Level::Raid1.max_missing(3), 2);
        assert_eq!(Level::Raid10.max_missing(5), 2);
        assert_eq!(Level::Raid6.max_missing(8), 2);
        assert_eq!(Level::Raid0.max_missing(8), 0);
    }
}
