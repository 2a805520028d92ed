//! [`PlanError`]: why an output plan, an append spec or a row cannot be
//! stored, one variant per case (docs/CONVENTIONS.md, "Error types": no
//! sentence carried as a bare `String`).

use hdf5::types::VarLenUnicode;

use crate::dsp::SpecError;

/// `value` as the variable-length UTF-8 string HDF5 stores, or why not (a
/// NUL byte): `what` names it in the refusal ("path", "metadata").
pub(crate) fn storable(what: &'static str, value: &str) -> Result<VarLenUnicode, PlanError> {
    value
        .parse()
        .map_err(|e: hdf5::types::StringError| PlanError::Unstorable {
            what,
            value: value.to_string(),
            why: e.to_string(),
        })
}

/// Why the writer refuses a plan, a spec or a value before touching a file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("chunk_files must be ≥ 1")]
    ChunkFiles,
    #[error("feature spec: {0}")]
    Spec(SpecError),
    #[error("recipe `{recipe}` has rows of 0 bins")]
    NoBins { recipe: String },
    #[error("`{key}` is not a usable attribute name")]
    AttrName { key: String },
    #[error("recipe parameter `{key}` is set twice")]
    ParamTwice { key: String },
    #[error("extra attribute `{key}` is a parameter of the recipe")]
    ParamAttr { key: String },
    #[error("extra attribute `{key}` is set twice")]
    AttrTwice { key: String },
    #[error("label_names must be sorted and distinct (`{before}` before `{after}`)")]
    LabelOrder { before: String, after: String },
    /// `what`: "string", "label", "path".
    #[error("{what} {value:?} contains a NUL byte")]
    Nul { what: &'static str, value: String },
    #[error("`{name}` is not usable as a split file name")]
    SplitName { name: String },
    #[error("split `{name}` appears twice")]
    SplitTwice { name: String },
    #[error("path index {index} is outside the table of {paths}")]
    PathIndex { index: usize, paths: usize },
    #[error("{path}: label {label} is outside -1..{n_labels}")]
    LabelIndex {
        path: String,
        label: i32,
        n_labels: usize,
    },
    #[error("label `{name}` appears twice")]
    LabelTwice { name: String },
    #[error("too many label names")]
    TooManyLabels,
    /// `what`: "path", "metadata"; `why`: HDF5's string type's words.
    #[error("{what} {value:?} cannot be stored: {why}")]
    Unstorable {
        what: &'static str,
        value: String,
        why: String,
    },
    #[error("a row of {frames} frames")]
    TooManyFrames { frames: usize },
    #[error("the split file's layout is not the configuration's")]
    LayoutMismatch,
    #[error("split `{split}` was not opened before its first row")]
    NotOpened { split: String },
    #[error("the append thread stopped: {why}")]
    AppendThread { why: String },
}
