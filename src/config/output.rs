//! The `[output]` section: how the HDF5 dataset is stored (element type,
//! compact storage and chunking). Raw keys → validated [`OutputConfig`]; defaults in
//! [`defaults::output`].

use serde::Deserialize;

use super::features::Recipe;
use super::{Ctx, Error, defaults};
use crate::model::Dtype;

/// `[output]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// "float32" | "float16" (default [`defaults::output::DTYPE`]).
    pub dtype: Option<String>,
    /// "plain" | "compact" (default "plain"): compact stores float16 on a
    /// grid of `2^tick_power` in Blosc (bitshuffle + LZ4) chunks.
    pub storage: Option<String>,
    /// Compact storage's grid, as lilcom's `tick_power` (default
    /// [`defaults::output::tick_power`]).
    pub tick_power: Option<i64>,
    /// Rows per HDF5 chunk along N (default [`defaults::output::CHUNK_FILES`]).
    pub chunk_files: Option<usize>,
    /// Also write lhotse cuts whose features lhotse loads itself
    /// (`OUT/<split>.cuts.jsonl.gz`; default false). Kaldi recipes with
    /// `snip_edges = false` only (checked in `Config`, which sees both).
    pub lhotse: Option<bool>,
}

/// Validated output settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OutputConfig {
    pub dtype: Dtype,
    /// Rows per HDF5 chunk (≥ 1).
    pub chunk_files: usize,
    /// Write `OUT/<split>.cuts.jsonl.gz` beside each split file, with a
    /// `numpy_hdf5` view per row in it (docs/FORMAT.md, "lhotse cuts").
    pub lhotse: bool,
}

/// The range `output.tick_power` may take: a tick from 2^-12 (float16's
/// own spacing near 2) to 1.
const TICK_POWERS: std::ops::RangeInclusive<i64> = -12..=0;

impl OutputConfig {
    /// Applies the defaults (some of them `recipe`'s) and validates.
    pub(super) fn from_raw(
        o: &RawOutput,
        cx: &Ctx,
        recipe: &Recipe,
    ) -> Result<OutputConfig, Error> {
        let dtype = cx.choice(
            "output.dtype",
            o.dtype.as_deref(),
            defaults::output::DTYPE,
            &[("float32", Dtype::Float32), ("float16", Dtype::Float16)],
        )?;
        let compact = cx.choice(
            "output.storage",
            o.storage.as_deref(),
            false,
            &[("plain", false), ("compact", true)],
        )?;
        Ok(OutputConfig {
            dtype: match compact {
                true => compact_dtype(o, cx, recipe)?,
                false if o.tick_power.is_some() => {
                    return Err(cx.invalid(
                        "output.tick_power",
                        "set, but `output.storage` is not \"compact\": only compact storage \
                         rounds values to a grid",
                    ));
                }
                false => dtype,
            },
            chunk_files: cx.positive(
                "output.chunk_files",
                o.chunk_files,
                defaults::output::CHUNK_FILES,
            )?,
            lhotse: o.lhotse.unwrap_or(false),
        })
    }
}

/// Compact storage's [`Dtype`] for `recipe`, or why the keys refuse it.
fn compact_dtype(o: &RawOutput, cx: &Ctx, recipe: &Recipe) -> Result<Dtype, Error> {
    if o.dtype
        .as_deref()
        .is_some_and(|d| !d.eq_ignore_ascii_case("float16"))
    {
        return Err(cx.invalid(
            "output.dtype",
            format!(
                "\"{}\" with `output.storage = \"compact\"`, which stores float16 on its grid; \
                 leave `output.dtype` out",
                o.dtype.as_deref().unwrap_or_default()
            ),
        ));
    }
    if matches!(recipe, Recipe::Librosa) {
        return Err(cx.invalid(
            "output.storage",
            "\"compact\" with the librosa recipe, whose `mel` rows are stored plain; compact \
             storage is written for the frame recipes (\"kaldi-fbank\", \"lhotse-fbank\", \
             \"kaldi-mfcc\", \"whisper\")",
        ));
    }
    let p = o.tick_power.unwrap_or(defaults::output::tick_power(recipe));
    if !TICK_POWERS.contains(&p) {
        return Err(cx.invalid(
            "output.tick_power",
            format!(
                "{p}; expected {} to {}",
                TICK_POWERS.start(),
                TICK_POWERS.end()
            ),
        ));
    }
    Ok(Dtype::Compact {
        tick_power: i8::try_from(p).expect("within TICK_POWERS"),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::model::Dtype;

    #[test]
    fn dtype_and_chunk_files_are_read_and_zero_chunks_rejected() {
        let c = Config::parse("[output]\ndtype = \"float16\"\nchunk_files = 8\n", "t").unwrap();
        assert_eq!(c.output.dtype, Dtype::Float16);
        assert_eq!(c.output.chunk_files, 8);
        let e = Config::parse("[output]\nchunk_files = 0\n", "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.toml:2: invalid value for `output.chunk_files`"),
            "{e}"
        );
    }
}
