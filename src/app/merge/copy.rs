//! `merge --copy`: one standalone file per split with the shards' rows copied
//! in shard order, datasets chunked and resizable as a build makes them (see
//! docs/FORMAT.md), so the shard files can be deleted afterwards.

use std::path::Path;

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, H5Type, SimpleExtents};
use ndarray::{Ix5, s};

use crate::app::interrupt::Stopped;

use super::attrs::{self, Value};
use super::{Ctx, Error, Part, create_file};

/// Rows copied per read/write call: whole chunks, about 64 MiB of `mel`.
fn block_rows(chunk: usize, row_bytes: usize) -> usize {
    let chunks = (64 << 20) / (chunk * row_bytes).max(1);
    chunk * chunks.max(1)
}

fn create<T: H5Type>(
    file: &hdf5::File,
    out: &Path,
    name: &str,
    rows: usize,
    row_shape: &[usize],
    chunk: usize,
) -> Result<Dataset, Error> {
    let mut extents = vec![Extent::resizable(rows)];
    extents.extend(row_shape.iter().map(|&d| Extent::fixed(d)));
    let mut chunks = vec![chunk];
    chunks.extend_from_slice(row_shape);
    file.new_dataset::<T>()
        .shape(SimpleExtents::from_vec(extents))
        .chunk(chunks)
        .obj_track_times(false)
        .create(name)
        .ctx(out, || format!("create dataset `{name}`"))
}

fn copy_mel<T: H5Type + Clone>(
    src: &Dataset,
    dst: &Dataset,
    from: std::ops::Range<usize>,
    at: usize,
) -> hdf5::Result<()> {
    let block = src.read_slice::<T, _, Ix5>(s![from.clone(), .., .., .., ..])?;
    dst.write_slice(&block, s![at..at + from.len(), .., .., .., ..])
}

/// Writes the standalone merged file of one split at `out`.
pub(super) fn write(
    dir: &Path,
    parts: &[Part],
    split_attrs: &[(String, Value)],
    out: &Path,
) -> Result<(), Error> {
    let file = create_file(out)?;
    attrs::write_all(&file, split_attrs).ctx(out, || "write the root attributes".into())?;
    let total: usize = parts.iter().map(|p| p.rows).sum();
    let first = &parts[0];
    let first_path = dir.join(&first.name);
    let like = first
        .file
        .dataset("mel")
        .ctx(&first_path, || "open dataset `mel`".into())?;
    let row_shape = like.shape()[1..].to_vec();
    let half = like
        .dtype()
        .ctx(&first_path, || "read the type of `mel`".into())?
        .size()
        == 2;
    let chunk = match attrs::get(split_attrs, "chunk_files") {
        Some(Value::Int(c)) if *c >= 1 => *c as usize,
        _ => 64,
    };
    let mel = if half {
        create::<half::f16>(&file, out, "mel", total, &row_shape, chunk)?
    } else {
        create::<f32>(&file, out, "mel", total, &row_shape, chunk)?
    };
    let label = create::<i32>(&file, out, "label", total, &[], chunk)?;
    let path = create::<VarLenUnicode>(&file, out, "path", total, &[], chunk)?;
    let row_bytes = row_shape.iter().product::<usize>() * if half { 2 } else { 4 };
    let step = block_rows(chunk, row_bytes);
    let mut at = 0;
    for part in parts {
        let src = dir.join(&part.name);
        let open = |d: &str| {
            part.file
                .dataset(d)
                .ctx(&src, || format!("open dataset `{d}`"))
        };
        let (s_mel, s_label, s_path) = (open("mel")?, open("label")?, open("path")?);
        let mut from = 0;
        while from < part.rows {
            // A stop between blocks (merge() fills in the counts).
            if let Some(stop) = Stopped::check(0, 0, "splits") {
                return Err(stop.into());
            }
            let to = (from + step).min(part.rows);
            let what = || format!("copy rows {from}..{to} into {}", out.display());
            if half {
                copy_mel::<half::f16>(&s_mel, &mel, from..to, at)
            } else {
                copy_mel::<f32>(&s_mel, &mel, from..to, at)
            }
            .ctx(&src, what)?;
            let l = s_label.read_slice_1d::<i32, _>(from..to).ctx(&src, what)?;
            label.write_slice(&l, at..at + l.len()).ctx(out, what)?;
            let p = s_path
                .read_slice_1d::<VarLenUnicode, _>(from..to)
                .ctx(&src, what)?;
            path.write_slice(&p, at..at + p.len()).ctx(out, what)?;
            at += to - from;
            from = to;
        }
    }
    drop((mel, label, path));
    file.close().ctx(out, || "close the file".into())
}
