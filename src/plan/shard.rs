//! The share rule of `build --shard K/N` and the names of shard files.
//!
//! **Share rule.** Every split's files are taken in the sorted order a
//! single-node build gives them (their `seq`); shard K of N gets the contiguous
//! range `floor(n·K/N) .. floor(n·(K+1)/N)` of each split's n files. So every
//! shard holds a slice of every split (balanced to within one file per split),
//! and concatenating the shards' rows in K order gives exactly the row order of
//! a single-node build: `merge` needs no sort, only an offset per shard. A split
//! with fewer files than N leaves some shards with no file of it; those shards
//! still write the split's file, with zero rows, so every shard has every split.
//!
//! Every shard walks the WHOLE tree, so the split list and the label table
//! (label ids) are the same in every shard.
//!
//! **Manifests.** The same rule over each manifest's lines: of a manifest's
//! n lines (all of them: blank and bad lines too, so each line and its
//! rejection belong to one shard), shard K plans the contiguous block
//! `floor(n·K/N) .. floor(n·(K+1)/N)` (0-based), rows in line order.
//! Concatenating the shards again gives the rows of a single build in
//! manifest line order. Every shard reads every manifest (to count its
//! lines), so every shard has every split.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use super::Plan;

/// The root attribute of a shard file that names its shard (`"K/N"`); merge
/// checks it against the file name and leaves it out of the merged file.
pub const SHARD_ATTR: &str = "shard";

/// Shard `index` of `count` (0 ≤ index < count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// Why a `--shard` value is not usable.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// `given` is the argument as written.
    #[error("`{given}` is not of the form K/N (e.g. 0/4)")]
    Form { given: String },
    #[error("`{index}/0`: N must be at least 1")]
    ZeroCount { index: usize },
    #[error("`{index}/{count}`: K must be below N (shards are numbered 0 to N-1)")]
    OutOfRange { index: usize, count: usize },
}

/// A decimal number without sign, spaces or leading zeros (so one shard has
/// exactly one spelling, in arguments and in file names).
fn canonical_number(s: &str) -> Option<usize> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if ok { s.parse().ok() } else { None }
}

impl FromStr for Shard {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Shard, ParseError> {
        let form = || ParseError::Form {
            given: s.to_string(),
        };
        let (k, n) = s.split_once('/').ok_or_else(form)?;
        let index = canonical_number(k).ok_or_else(form)?;
        let count = canonical_number(n).ok_or_else(form)?;
        if count == 0 {
            return Err(ParseError::ZeroCount { index });
        }
        if index >= count {
            return Err(ParseError::OutOfRange { index, count });
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The seqs of a split of `n_files` files that this shard builds.
    pub fn range(self, n_files: usize) -> Range<usize> {
        let at = |k: usize| ((n_files as u128 * k as u128) / self.count as u128) as usize;
        at(self.index)..at(self.index + 1)
    }

    /// This shard's part of a whole-tree plan: the same splits and label table,
    /// the jobs in [`Shard::range`] of each split, renumbered from seq 0.
    pub fn apply(self, plan: &Plan) -> Plan {
        let mut jobs = Vec::new();
        for split in 0..plan.splits.len() {
            let all: Vec<_> = plan.split_jobs(split).collect();
            for (seq, j) in all[self.range(all.len())].iter().enumerate() {
                let mut j = **j;
                j.seq = seq as u32;
                jobs.push(j);
            }
        }
        Plan {
            input: plan.input.clone(),
            bases: plan.bases.clone(),
            paths: std::sync::Arc::clone(&plan.paths),
            targets: plan.targets.clone(),
            splits: plan.splits.clone(),
            label_names: plan.label_names.clone(),
            jobs,
            warnings: plan.warnings.clone(),
            skipped_non_wav: plan.skipped_non_wav,
        }
    }

    /// `<split>.shard-K-of-N.h5`
    pub fn split_file_name(self, split: &str) -> String {
        format!("{split}{}.h5", self.infix())
    }

    /// `<split>.shard-K-of-N.jsonl`: a manifest split's written-back lines.
    pub fn manifest_file_name(self, split: &str) -> String {
        format!("{split}{}.jsonl", self.infix())
    }

    /// `rejected.shard-K-of-N.jsonl`
    pub fn rejected_file_name(self) -> String {
        format!("rejected{}.jsonl", self.infix())
    }

    /// `.shard-K-of-N`: what a shard's file names add.
    pub fn infix(self) -> String {
        format!(".shard-{}-of-{}", self.index, self.count)
    }
}

/// What a file name in an output directory is, for `merge`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardFile {
    /// `<split>.shard-K-of-N.h5`
    Split { split: String, shard: Shard },
    /// `rejected.shard-K-of-N.jsonl`
    Rejected(Shard),
    /// `<split>.shard-K-of-N.jsonl`: a manifest written back.
    Manifest { split: String, shard: Shard },
}

impl ShardFile {
    pub fn shard(&self) -> Shard {
        match self {
            ShardFile::Split { shard, .. }
            | ShardFile::Rejected(shard)
            | ShardFile::Manifest { shard, .. } => *shard,
        }
    }
}

/// Parses a shard file name; `None` for anything else (including
/// non-canonical numbers such as `01`, which merge reports separately).
pub fn parse_file_name(name: &str) -> Option<ShardFile> {
    let (stem, is_h5) = if let Some(s) = name.strip_suffix(".h5") {
        (s, true)
    } else {
        (name.strip_suffix(".jsonl")?, false)
    };
    let (base, tail) = stem.rsplit_once(".shard-")?;
    let (k, n) = tail.split_once("-of-")?;
    let shard = Shard {
        index: canonical_number(k)?,
        count: canonical_number(n)?,
    };
    if shard.count == 0 || shard.index >= shard.count || base.is_empty() {
        return None;
    }
    match (is_h5, base) {
        (true, split) => Some(ShardFile::Split {
            split: split.to_string(),
            shard,
        }),
        (false, "rejected") => Some(ShardFile::Rejected(shard)),
        (false, split) => Some(ShardFile::Manifest {
            split: split.to_string(),
            shard,
        }),
    }
}

/// Whether a name looks like a shard file at all (`.shard-` before `.h5` or
/// `.jsonl`), so merge can refuse a misspelt one rather than ignore it.
pub fn looks_like_shard_file(name: &str) -> bool {
    (name.ends_with(".h5") || name.ends_with(".jsonl")) && name.contains(".shard-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k_of_n_and_refuses_bad_forms() {
        assert_eq!("2/4".parse(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!("0/1".parse(), Ok(Shard { index: 0, count: 1 }));
        for bad in ["", "3", "a/4", "1/", "/4", "01/4", "1/04", "-1/4", "1 /4"] {
            assert!(
                matches!(bad.parse::<Shard>(), Err(ParseError::Form { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            "0/0".parse::<Shard>(),
            Err(ParseError::ZeroCount { index: 0 })
        );
        assert_eq!(
            "4/4".parse::<Shard>().unwrap_err().to_string(),
            "`4/4`: K must be below N (shards are numbered 0 to N-1)"
        );
    }

    #[test]
    fn ranges_cover_every_file_once_in_order() {
        for n_files in [0usize, 1, 2, 3, 7, 10, 101] {
            for count in 1..=6 {
                let mut next = 0;
                for index in 0..count {
                    let r = Shard { index, count }.range(n_files);
                    assert_eq!(r.start, next, "n={n_files} N={count} K={index}");
                    assert!(r.len() <= n_files.div_ceil(count));
                    next = r.end;
                }
                assert_eq!(next, n_files);
            }
        }
    }

    #[test]
    fn file_names_round_trip() {
        let s = Shard {
            index: 3,
            count: 12,
        };
        assert_eq!(s.split_file_name("TRAINING"), "TRAINING.shard-3-of-12.h5");
        assert_eq!(s.rejected_file_name(), "rejected.shard-3-of-12.jsonl");
        assert_eq!(
            parse_file_name("a.b.shard-3-of-12.h5"),
            Some(ShardFile::Split {
                split: "a.b".into(),
                shard: s
            })
        );
        assert_eq!(
            parse_file_name("rejected.shard-3-of-12.jsonl"),
            Some(ShardFile::Rejected(s))
        );
        for other in [
            "TRAINING.h5",
            "x.shard-03-of-12.h5",
            "x.shard-12-of-12.h5",
            "x.shard-1-of-2.h5.partial",
            ".shard-1-of-2.h5",
        ] {
            assert_eq!(parse_file_name(other), None, "{other}");
        }
        assert_eq!(s.manifest_file_name("train"), "train.shard-3-of-12.jsonl");
        assert_eq!(
            parse_file_name("train.shard-3-of-12.jsonl"),
            Some(ShardFile::Manifest {
                split: "train".into(),
                shard: s
            })
        );
        assert!(looks_like_shard_file("x.shard-03-of-12.h5"));
        assert!(!looks_like_shard_file("TRAINING.h5"));
    }
}
