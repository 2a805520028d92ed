//! Input patterns as the corpora's own tools write them: brace ranges
//! (`train-{000000..000127}.tar`, WebDataset's and NeMo's shard lists),
//! brace lists (`{train,dev}.tar`) and shell globs (`data/train-*.parquet`,
//! Hugging Face's layout).
//!
//! melforge expands a pattern itself, because the shell does not expand a
//! quoted one and WebDataset users quote theirs. The rules:
//!
//! * `{A..B}` with A and B decimal: every number from A to B inclusive,
//!   counting down when B < A, each padded with zeros to the width of the
//!   wider endpoint when either endpoint has a leading zero (WebDataset's
//!   `braceexpand` does the same);
//! * `{a,b,c}`: each alternative, in the order written; braces nest;
//! * after the braces, a name with `*`, `?` or `[` is a glob (the `glob`
//!   crate's syntax), whose matches are taken in sorted path order, and a
//!   glob that matches nothing is an error;
//! * NeMo's `_OP_` and `_CL_` stand for `{` and `}` (its configs cannot
//!   hold braces).
//!
//! Brace expansions keep their order (shard 0 first); the result may name
//! files that do not exist, which the planner reports per file. A pattern
//! that expands to more than [`MAX_PATHS`] names is refused before it is
//! expanded, so a typo cannot exhaust memory.

use std::path::PathBuf;

/// The most paths one pattern may expand to.
pub const MAX_PATHS: usize = 10_000_000;

/// Why a pattern cannot be expanded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("pattern `{pattern}`: {why}")]
    Syntax { pattern: String, why: String },
    #[error("pattern `{pattern}` expands to more than {MAX_PATHS} paths")]
    TooMany { pattern: String },
    #[error("pattern `{pattern}` matches no file")]
    NoMatch { pattern: String },
}

/// Whether `s` is a pattern at all (braces or glob characters).
pub fn is_pattern(s: &str) -> bool {
    let s = nemo_braces(s);
    s.contains('{') || has_glob(&s)
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn nemo_braces(s: &str) -> String {
    s.replace("_OP_", "{").replace("_CL_", "}")
}

/// Every path `pattern` names, in order: brace expansions as written, each
/// glob's matches sorted.
pub fn expand(pattern: &str) -> Result<Vec<PathBuf>, Error> {
    let text = nemo_braces(pattern);
    let syntax = |why: String| Error::Syntax {
        pattern: pattern.to_string(),
        why,
    };
    let names = braces(&text).map_err(syntax)?;
    if names.len() > MAX_PATHS {
        return Err(Error::TooMany {
            pattern: pattern.to_string(),
        });
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if !has_glob(&name) {
            out.push(PathBuf::from(name));
            continue;
        }
        let paths = glob::glob(&name).map_err(|e| syntax(e.to_string()))?;
        let mut found: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
        if found.is_empty() {
            return Err(Error::NoMatch {
                pattern: pattern.to_string(),
            });
        }
        found.sort();
        out.extend(found);
        if out.len() > MAX_PATHS {
            return Err(Error::TooMany {
                pattern: pattern.to_string(),
            });
        }
    }
    Ok(out)
}

/// The brace expansion of `s` (no braces: `s` itself).
fn braces(s: &str) -> Result<Vec<String>, String> {
    let Some(open) = s.find('{') else {
        if s.contains('}') {
            return Err("a `}` without its `{`".into());
        }
        return Ok(vec![s.to_string()]);
    };
    let close = matching(s, open)?;
    let (head, body, tail) = (&s[..open], &s[open + 1..close], &s[close + 1..]);
    let alternatives = match range(body)? {
        Some(r) => r,
        None => {
            let mut alts = Vec::new();
            for part in split_top(body) {
                alts.extend(braces(part)?);
            }
            alts
        }
    };
    let tails = braces(tail)?;
    let n = alternatives.len().saturating_mul(tails.len());
    if n > MAX_PATHS {
        return Err(format!("it expands to more than {MAX_PATHS} paths"));
    }
    let mut out = Vec::with_capacity(n);
    for a in &alternatives {
        for t in &tails {
            out.push(format!("{head}{a}{t}"));
        }
    }
    Ok(out)
}

/// The index of the `}` that closes the `{` at `open`.
fn matching(s: &str, open: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices().skip_while(|&(i, _)| i < open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(format!(
        "the `{{` at character {} is never closed",
        open + 1
    ))
}

/// `body` split at its top-level commas.
fn split_top(body: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0usize, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&body[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[from..]);
    parts
}

/// `A..B` as its numbers, zero-padded as written; None when `body` is not
/// a numeric range.
fn range(body: &str) -> Result<Option<Vec<String>>, String> {
    let Some((a, b)) = body.split_once("..") else {
        return Ok(None);
    };
    let numeric = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
    if !numeric(a) || !numeric(b) {
        return Ok(None);
    }
    let parse = |x: &str| {
        x.parse::<u64>()
            .map_err(|_| format!("`{x}` in `{{{body}}}` is too large"))
    };
    let (lo, hi) = (parse(a)?, parse(b)?);
    let count = lo.abs_diff(hi).saturating_add(1);
    if count > MAX_PATHS as u64 {
        return Err(format!("`{{{body}}}` names more than {MAX_PATHS} numbers"));
    }
    let padded = (a.len() > 1 && a.starts_with('0')) || (b.len() > 1 && b.starts_with('0'));
    let width = if padded { a.len().max(b.len()) } else { 0 };
    let numbers: Vec<u64> = if lo <= hi {
        (lo..=hi).collect()
    } else {
        (hi..=lo).rev().collect()
    };
    Ok(Some(
        numbers
            .into_iter()
            .map(|n| format!("{n:0width$}"))
            .collect(),
    ))
}

/// The split a pattern names when none is given: its file name with the
/// brace groups and extensions taken off, then the separators (`-`, `_`,
/// `.`) and shard digits at its end (`train-{000000..000127}.tar` →
/// `train`, `data/train-00000-of-00004.parquet` → `train`). None when
/// nothing is left.
pub fn split_of(pattern: &str) -> Option<String> {
    let text = nemo_braces(pattern);
    let name = text.rsplit('/').next().unwrap_or(&text);
    // Brace groups out, at any depth.
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    // Extensions out: the name up to its first dot.
    let stem = plain.split('.').next().unwrap_or_default();
    // Hugging Face's `-00000-of-00004` and WebDataset's `-000000`, globs.
    let mut s = stem.trim_end_matches(['*', '?']).to_string();
    if let Some(i) = s.find("-of-") {
        s.truncate(i);
    }
    let s = s.trim_end_matches(|c: char| c.is_ascii_digit() || "-_.*?".contains(c));
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &str) -> Vec<String> {
        expand(p)
            .unwrap()
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn ranges_keep_their_padding_and_order() {
        assert_eq!(
            names("d/train-{000000..000002}.tar"),
            [
                "d/train-000000.tar",
                "d/train-000001.tar",
                "d/train-000002.tar"
            ]
        );
        assert_eq!(names("a{9..11}"), ["a9", "a10", "a11"]);
        assert_eq!(names("a{3..1}"), ["a3", "a2", "a1"]);
        assert_eq!(names("a{08..10}"), ["a08", "a09", "a10"]);
    }

    #[test]
    fn lists_nest_and_multiply() {
        assert_eq!(
            names("{train,dev{1,2}}-{0..1}.tar"),
            [
                "train-0.tar",
                "train-1.tar",
                "dev1-0.tar",
                "dev1-1.tar",
                "dev2-0.tar",
                "dev2-1.tar"
            ]
        );
    }

    #[test]
    fn nemo_spells_braces_as_op_and_cl() {
        assert_eq!(
            names("audio__OP_0..2_CL_.tar"),
            ["audio_0.tar", "audio_1.tar", "audio_2.tar"]
        );
        assert!(is_pattern("audio__OP_0..2_CL_.tar"));
        assert!(!is_pattern("audio_0.tar"));
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        assert!(matches!(expand("a{0..2"), Err(Error::Syntax { .. })));
        assert!(matches!(expand("a}"), Err(Error::Syntax { .. })));
        assert!(matches!(
            expand("x{0..99999999999}"),
            Err(Error::Syntax { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let p = format!("{}/none-*.parquet", dir.path().display());
        assert_eq!(expand(&p), Err(Error::NoMatch { pattern: p.clone() }));
    }

    #[test]
    fn globs_are_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["b-1.parquet", "a-2.parquet", "a-1.parquet", "c.txt"] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        let got = expand(&format!("{}/*.parquet", dir.path().display())).unwrap();
        let got: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(got, ["a-1.parquet", "a-2.parquet", "b-1.parquet"]);
    }

    #[test]
    fn splits_are_the_stems_without_shard_numbers() {
        assert_eq!(
            split_of("data/train-{000000..000127}.tar").as_deref(),
            Some("train")
        );
        assert_eq!(split_of("train-000003.tar.gz").as_deref(), Some("train"));
        assert_eq!(
            split_of("data/dev-00000-of-00004.parquet").as_deref(),
            Some("dev")
        );
        assert_eq!(split_of("data/test-*.parquet").as_deref(), Some("test"));
        assert_eq!(split_of("audio__OP_0..7_CL_.tar").as_deref(), Some("audio"));
        assert_eq!(split_of("{000..009}.tar"), None);
    }
}
