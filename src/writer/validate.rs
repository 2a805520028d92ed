//! Checks of an [`OutputPlan`] before any file is created: names usable as
//! file names and attributes, labels and paths in range, no NUL bytes.

use super::attrs::{FRAME_ATTRS, RESERVED_ATTRS};
use super::{Error, OutputPlan, PlanError};
use crate::frames::{FrameLayout, RowLayout};

pub(super) fn validate(plan: &OutputPlan) -> Result<(), Error> {
    let bad = |e: PlanError| Err(Error::Plan(e));
    if plan.chunk_files == 0 {
        return bad(PlanError::ChunkFiles);
    }
    match &plan.layout {
        RowLayout::Fixed(spec) => {
            if let Err(e) = spec.validate() {
                return bad(PlanError::Spec(e));
            }
        }
        RowLayout::Frames(l) => validate_layout(l)?,
    }
    for w in plan.label_names.windows(2) {
        if w[0] >= w[1] {
            return bad(PlanError::LabelOrder {
                before: w[0].clone(),
                after: w[1].clone(),
            });
        }
    }
    validate_splits(plan)?;
    for name in plan
        .label_names
        .iter()
        .chain(plan.extra_attrs.iter().map(|(_, v)| v))
    {
        if name.contains('\0') {
            return bad(PlanError::Nul {
                what: "string",
                value: name.clone(),
            });
        }
    }
    let params = plan
        .layout
        .frames()
        .into_iter()
        .flat_map(|l| l.params.iter().map(|(k, _)| k));
    for key in params {
        if plan.extra_attrs.iter().any(|(k, _)| k == key) {
            return bad(PlanError::ParamAttr { key: key.clone() });
        }
    }
    for (i, (key, _)) in plan.extra_attrs.iter().enumerate() {
        if key.is_empty() || key.contains('\0') || key == "." {
            return bad(PlanError::AttrName { key: key.clone() });
        }
        if RESERVED_ATTRS.contains(&key.as_str())
            || plan.extra_attrs[..i].iter().any(|(k, _)| k == key)
        {
            return bad(PlanError::AttrTwice { key: key.clone() });
        }
    }
    Ok(())
}

/// Each split's name is a usable, distinct file name and each of its rows
/// names a path of the table and a label of the list (or -1).
fn validate_splits(plan: &OutputPlan) -> Result<(), Error> {
    let bad = |e: PlanError| Err(Error::Plan(e));
    let n_labels = plan.label_names.len();
    for (i, split) in plan.splits.iter().enumerate() {
        let name = &split.name;
        if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
            return bad(PlanError::SplitName { name: name.clone() });
        }
        if plan.splits[..i].iter().any(|s| &s.name == name) {
            return bad(PlanError::SplitTwice { name: name.clone() });
        }
        for f in &split.files {
            if f.path as usize >= plan.paths.len() {
                return bad(PlanError::PathIndex {
                    index: f.path as usize,
                    paths: plan.paths.len(),
                });
            }
            let rel_path = plan.paths.get(f.path);
            let known = usize::try_from(f.label).is_ok_and(|l| l < n_labels);
            if f.label != -1 && !known {
                return bad(PlanError::LabelIndex {
                    path: rel_path.to_string(),
                    label: f.label,
                    n_labels,
                });
            }
            if rel_path.contains('\0') {
                return bad(PlanError::Nul {
                    what: "path",
                    value: rel_path.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// A variable-length layout the writer can store: bins ≥ 1, parameter names
/// usable as attributes and not the writer's own.
pub(crate) fn validate_layout(l: &FrameLayout) -> Result<(), PlanError> {
    if l.bins == 0 {
        return Err(PlanError::NoBins {
            recipe: l.recipe.clone(),
        });
    }
    for (i, (key, _)) in l.params.iter().enumerate() {
        if key.is_empty() || key.contains('\0') || key == "." {
            return Err(PlanError::AttrName { key: key.clone() });
        }
        if FRAME_ATTRS.contains(&key.as_str()) || l.params[..i].iter().any(|(k, _)| k == key) {
            return Err(PlanError::ParamTwice { key: key.clone() });
        }
    }
    Ok(())
}
