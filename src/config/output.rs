//! The `[output]` section: how the HDF5 dataset is stored (element type and
//! chunking). Raw keys → validated [`OutputConfig`]; defaults in
//! [`defaults::output`].

use serde::Deserialize;

use super::{Ctx, Error, defaults};
use crate::model::Dtype;

/// `[output]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// "float32" | "float16" (default [`defaults::output::DTYPE`]).
    pub dtype: Option<String>,
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

impl OutputConfig {
    /// Applies the defaults and validates.
    pub(super) fn from_raw(o: &RawOutput, cx: &Ctx) -> Result<OutputConfig, Error> {
        Ok(OutputConfig {
            dtype: cx.choice(
                "output.dtype",
                o.dtype.as_deref(),
                defaults::output::DTYPE,
                &[("float32", Dtype::Float32), ("float16", Dtype::Float16)],
            )?,
            chunk_files: cx.positive(
                "output.chunk_files",
                o.chunk_files,
                defaults::output::CHUNK_FILES,
            )?,
            lhotse: o.lhotse.unwrap_or(false),
        })
    }
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
