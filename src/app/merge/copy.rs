//! `merge --copy`: one standalone file per split with the shards' rows copied
//! in shard order, every dataset of the shards ([`super::open::DATASETS`]),
//! chunked and resizable as a build makes them (see docs/FORMAT.md), so the
//! shard files can be deleted afterwards. Also the standalone datasets the
//! virtual layout falls back to (a dataset with nothing to map).

use std::ops::Range;
use std::path::Path;

use hdf5::types::{FloatSize, IntSize, TypeDescriptor as T, VarLenUnicode};
use hdf5::{Dataset, Extent, H5Type, Hyperslab, SimpleExtents, SliceOrIndex};
use ndarray::IxDyn;

use crate::app::interrupt::Stopped;

use super::attrs::Value;
use super::open::{Axis, Part};
use super::{Ctx, Error, create_split, offsets};

/// Bytes copied per read/write call: about 64 MiB, in whole chunks.
const BLOCK_BYTES: usize = 64 << 20;

/// Where a merged dataset goes: its file (at `out`), name and length.
struct Target<'a> {
    pub file: &'a hdf5::File,
    pub out: &'a Path,
    pub name: &'static str,
    pub total: usize,
}

/// Creates `target` empty-valued at its full length, with the first
/// shard's element type, row shape, chunks (`meta`/`line`: chunked by
/// the merged row count, as a build of the whole chunks them) and filters
/// (a compact `features`' Blosc chunks stay compact), resizable along the
/// rows as a build's.
fn create_like(dir: &Path, parts: &[Part], target: &Target<'_>) -> Result<Dataset, Error> {
    let like = parts[0].dataset(dir, target.name)?;
    let src = dir.join(&parts[0].name);
    let dtype = like
        .dtype()
        .ctx(&src, || format!("read the type of `{}`", target.name))?;
    let shape = like.shape();
    let mut extents = vec![Extent::resizable(target.total)];
    extents.extend(shape[1..].iter().map(|&d| Extent::fixed(d)));
    let mut chunk = like.chunk().unwrap_or_else(|| shape.clone());
    if matches!(target.name, "meta" | "line") {
        chunk[0] = crate::writer::meta::chunk_rows(target.total);
    }
    target
        .file
        .new_dataset_builder()
        .empty_as(dtype)
        .shape(SimpleExtents::from_vec(extents))
        .chunk(chunk)
        .set_filters(&like.filters())
        .obj_track_times(false)
        .create(target.name)
        .ctx(target.out, || format!("create dataset `{}`", target.name))
}

/// The selection of entries `r` along the first axis, whole rows.
fn rows_of(r: Range<usize>, row_shape: &[usize]) -> Hyperslab {
    let mut dims = vec![SliceOrIndex::from(r)];
    dims.extend(row_shape.iter().map(|&d| SliceOrIndex::from(0..d)));
    Hyperslab::from(dims)
}

/// Copies entries `from` of `src` to `at..` of `dst`, as `E`.
fn copy_block<E: H5Type>(
    src: &Dataset,
    dst: &Dataset,
    from: Range<usize>,
    at: usize,
) -> hdf5::Result<()> {
    let row_shape = &src.shape()[1..];
    let n = from.len();
    let block = src.read_slice::<E, _, IxDyn>(rows_of(from, row_shape))?;
    dst.write_slice(&block, rows_of(at..at + n, row_shape))
}

/// The element types melforge writes, each copied as itself.
#[derive(Clone, Copy)]
enum Element {
    F32,
    F16,
    I32,
    I64,
    U32,
    Str,
}

impl Element {
    fn of(desc: &T) -> Option<Element> {
        Some(match desc {
            T::Float(FloatSize::U4) => Element::F32,
            T::Float(FloatSize::U2) => Element::F16,
            T::Integer(IntSize::U4) => Element::I32,
            T::Integer(IntSize::U8) => Element::I64,
            T::Unsigned(IntSize::U4) => Element::U32,
            T::VarLenUnicode => Element::Str,
            _ => return None,
        })
    }

    /// Bytes an entry takes in memory while copied (a string: a guess at a
    /// long `meta` object, which bounds the block's memory).
    fn bytes(self) -> usize {
        match self {
            Element::F16 => 2,
            Element::F32 | Element::I32 | Element::U32 => 4,
            Element::I64 => 8,
            Element::Str => 4096,
        }
    }

    fn copy(self, src: &Dataset, dst: &Dataset, from: Range<usize>, at: usize) -> hdf5::Result<()> {
        match self {
            Element::F32 => copy_block::<f32>(src, dst, from, at),
            Element::F16 => copy_block::<half::f16>(src, dst, from, at),
            Element::I32 => copy_block::<i32>(src, dst, from, at),
            Element::I64 => copy_block::<i64>(src, dst, from, at),
            Element::U32 => copy_block::<u32>(src, dst, from, at),
            Element::Str => copy_block::<VarLenUnicode>(src, dst, from, at),
        }
    }
}

/// Entries per copy call: whole chunks, about [`BLOCK_BYTES`].
fn block_len(src: &Dataset, e: Element) -> usize {
    let shape = src.shape();
    let entry = shape[1..].iter().product::<usize>().max(1) * e.bytes();
    let chunk = src.chunk().map_or(1, |c| c[0].max(1));
    chunk * (BLOCK_BYTES / (chunk * entry).max(1)).max(1)
}

/// Copies dataset `target.name` of every shard, one after another, into
/// `dst` (a stop between blocks is [`Error::Interrupted`]; merge fills in
/// the counts).
fn copy_dataset(
    dir: &Path,
    parts: &[Part],
    (target, dst): (&Target<'_>, &Dataset),
    axis: Axis,
) -> Result<(), Error> {
    let mut at = 0;
    for part in parts {
        let src_path = dir.join(&part.name);
        let src = part.dataset(dir, target.name)?;
        let desc = src
            .dtype()
            .and_then(|t| t.to_descriptor())
            .ctx(&src_path, || format!("read the type of `{}`", target.name))?;
        let e = Element::of(&desc).ok_or_else(|| Error::BadShard {
            file: part.name.clone(),
            reason: format!(
                "dataset `{}` has a type melforge does not write ({desc:?})",
                target.name
            ),
        })?;
        let (n, step) = (part.len(axis), block_len(&src, e));
        let mut from = 0;
        while from < n {
            if let Some(stop) = Stopped::check(0, 0, "splits") {
                return Err(stop.into());
            }
            let to = (from + step).min(n);
            let what = || {
                format!(
                    "copy `{}` {from}..{to} into {}",
                    target.name,
                    target.out.display()
                )
            };
            e.copy(&src, dst, from..to, at).ctx(&src_path, what)?;
            at += to - from;
            from = to;
        }
    }
    Ok(())
}

/// Writes `name` (of `axis`) into `file` as a standalone dataset holding
/// every shard's entries.
pub(super) fn standalone(
    dir: &Path,
    parts: &[Part],
    (file, out): (&hdf5::File, &Path),
    (name, axis): (&'static str, Axis),
) -> Result<(), Error> {
    let target = Target {
        file,
        out,
        name,
        total: parts.iter().map(|p| p.len(axis)).sum(),
    };
    let dst = create_like(dir, parts, &target)?;
    if axis == Axis::Offsets {
        return offsets::write(dir, parts, &dst, out);
    }
    copy_dataset(dir, parts, (&target, &dst), axis)
}

/// Writes the standalone merged file of one split at `out`.
pub(super) fn write(
    dir: &Path,
    parts: &[Part],
    split_attrs: &[(String, Value)],
    out: &Path,
) -> Result<(), Error> {
    let file = create_split(out, split_attrs)?;
    for &d in &parts[0].datasets {
        standalone(dir, parts, (&file, out), d)?;
    }
    file.close().ctx(out, || "close the file".into())
}
