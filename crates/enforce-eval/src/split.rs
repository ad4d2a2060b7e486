//! `--split K/N`: a train/test split of the dataset's cases, so that the arm `auto` is
//! measured on cases it did not learn from. The case at position `c` (0-based, in the whole
//! dataset) learns when `c mod N < K` and is measured otherwise: round robin, as shards deal
//! cases out, so that a dataset grouped by topic or difficulty gives both sides of each.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// K of every N cases learn (0 < K < N); the others are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Split {
    /// K: the cases of each N that learn.
    pub learn: u32,
    /// N.
    pub of: u32,
}

/// Which side of a [`Split`] an eval runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Side {
    /// The learning cases: the arms whose statistics `auto` chooses by.
    Learn,
    /// The other cases: every arm, `auto` included, measured.
    Measure,
}

/// One side of a split: the cases an eval takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SplitSide {
    /// The split.
    pub split: Split,
    /// The side taken.
    pub side: Side,
}

impl Split {
    /// Whether the case at `position` learns.
    pub fn learns(self, position: usize) -> bool {
        (position % self.of as usize) < (self.learn as usize)
    }
}

impl SplitSide {
    /// Whether the case at `position` is on this side.
    pub fn holds(self, position: usize) -> bool {
        self.split.learns(position) == (self.side == Side::Learn)
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.learn, self.of)
    }
}

impl FromStr for Split {
    type Err = String;

    fn from_str(text: &str) -> Result<Split, String> {
        let expected = "expected K/N, e.g. 1/2 (K of every N cases learn, 0 < K < N)";
        let (learn, of) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}`: {expected}"))?;
        let number = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{text}`: `{part}` is not a whole number; {expected}"))
        };
        let (learn, of) = (number(learn)?, number(of)?);
        if learn == 0 || learn >= of {
            return Err(format!("`{text}`: {expected}; both sides need cases"));
        }
        Ok(Split { learn, of })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sides_deal_the_cases_out_and_never_share_one() {
        let split: Split = "2/3".parse().expect("valid");
        assert_eq!(split.to_string(), "2/3");
        let on = |side| {
            let side = SplitSide { split, side };
            (0..7).filter(|&c| side.holds(c)).collect::<Vec<_>>()
        };
        assert_eq!(on(Side::Learn), [0, 1, 3, 4, 6]);
        assert_eq!(on(Side::Measure), [2, 5]);
        for bad in ["0/2", "2/2", "3/2", "1", "a/2"] {
            assert!(bad.parse::<Split>().is_err(), "{bad}");
        }
    }
}
