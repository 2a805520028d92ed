//! The configured recipe as the stages take it: `None` for librosa (the
//! `dsp::Plan` path, fixed rows), or the shared [`FrameRecipe`] of a
//! variable-length recipe, whose [`FrameLayout`] the writers record.
//!
//! This is the one place that maps the configuration's recipe onto the
//! row protocol of `crate::frames`; the pipeline hands the recipe to the
//! compute stage (`compute::Wiring::frames`), `build` and serve's sink hand
//! its layout to the writers.

use std::sync::Arc;

use crate::config::Config;
use crate::frames::{FrameLayout, FrameRecipe};

/// The variable-length recipe `cfg` asks for; None for librosa.
pub fn frame_recipe(cfg: &Config) -> Option<Arc<dyn FrameRecipe>> {
    let _ = cfg;
    None
}

/// The layout of [`frame_recipe`]'s rows; None for librosa.
pub fn frame_layout(cfg: &Config) -> Option<FrameLayout> {
    frame_recipe(cfg).map(|r| r.layout().clone())
}
