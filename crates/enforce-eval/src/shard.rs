//! `--shard I/N`: which part of the dataset one run of a sharded eval takes. Parts are
//! 0-based, as a Kubernetes indexed Job's `JOB_COMPLETION_INDEX`, so a pod passes its index
//! unchanged. Case `c` (its position in the whole dataset, from 0) belongs to part `c mod N`:
//! round robin rather than contiguous blocks, because datasets are often grouped by topic or
//! difficulty, and dealing the cases out spreads the slow ones over every part (the parts'
//! sizes differ by at most one case).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Part `index` of `count` (0 ≤ index < count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    /// How many parts the dataset is split into.
    pub count: u32,
}

impl Shard {
    /// The whole dataset: part 0 of 1.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether the case at `position` (0-based, in the whole dataset) is in this part.
    pub fn holds(self, position: usize) -> bool {
        position % self.count as usize == self.index as usize
    }

    /// `None` for the whole dataset, so an unsharded run's summary names no shard.
    pub fn part(self) -> Option<Shard> {
        (self.count > 1).then_some(self)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let number = |part: &str, what: &str| {
            part.trim().parse::<u32>().map_err(|_| {
                format!(
                    "`{text}`: the {what} `{part}` is not a whole number (expected I/N, e.g. 0/4)"
                )
            })
        };
        let (index, count) = text.split_once('/').ok_or_else(|| {
            format!("`{text}`: expected I/N, e.g. 0/4 (part I of N, counted from 0)")
        })?;
        let (index, count) = (number(index, "part")?, number(count, "count")?);
        if count == 0 {
            return Err(format!("`{text}`: the count must be at least 1"));
        }
        if index >= count {
            return Err(format!(
                "`{text}`: parts are counted from 0 (as JOB_COMPLETION_INDEX), so part {index} \
                 of {count} does not exist; the last is {}/{count}",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_zero_based_and_deal_the_cases_out_round_robin() {
        let shard: Shard = "1/3".parse().expect("valid");
        assert_eq!(shard, Shard { index: 1, count: 3 });
        assert_eq!(shard.to_string(), "1/3");
        let held: Vec<usize> = (0..8).filter(|&c| shard.holds(c)).collect();
        assert_eq!(held, [1, 4, 7]);
        // Every case in exactly one part.
        for case in 0..20 {
            let parts = (0..3).filter(|&i| Shard { index: i, count: 3 }.holds(case));
            assert_eq!(parts.count(), 1, "case {case}");
        }
        assert!((0..5).all(|c| Shard::WHOLE.holds(c)));
        assert_eq!("0/1".parse::<Shard>().map(Shard::part), Ok(None));
        assert_eq!(shard.part(), Some(shard));
    }

    #[test]
    fn impossible_parts_and_junk_are_refused_with_the_reason() {
        for (text, words) in [
            ("3/2", "counted from 0"),
            ("2/2", "the last is 1/2"),
            ("0/0", "at least 1"),
            ("junk", "expected I/N"),
            ("1", "expected I/N"),
            ("a/2", "`a` is not a whole number"),
            ("1/-2", "`-2` is not a whole number"),
            ("", "expected I/N"),
        ] {
            let err = text.parse::<Shard>().expect_err(text);
            assert!(err.contains(words), "{text}: {err}");
        }
    }
}
