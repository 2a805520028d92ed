//! One output file: creation with the schema and root attributes, chunk appends,
//! close and rename. Every HDF5 call of the program is in this file.
//!
//! Format choices (user-facing description in `docs/FORMAT.md`):
//! * libver bounds (latest, latest): superblock v3 and version-2 object headers,
//!   which SWMR append needs and which carry no time stamps once object time
//!   tracking is off (it is, for the root group and every dataset), so the bytes
//!   depend only on what is written.
//! * Datasets start with N = 0 and grow by `resize` before each chunk write, so no
//!   space is ever allocated past the final row count and nothing needs shrinking.
//! * Integer parameters are int64 attributes, real ones float64, names UTF-8
//!   variable-length strings, flags HDF5's bool enum (int8 FALSE=0/TRUE=1, read by
//!   h5py as `numpy.bool_`). `top_db` is omitted when it is none.

use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, Extents, File, H5Type, SimpleExtents};
use ndarray::ArrayView5;

use super::chunk::{ChunkBuf, MelBuf};
use super::{Dtype, Error};
use crate::mel::{MelNorm, MelScale, PadMode, Segmentation, Spec};

/// What goes into a file before its first row.
pub(super) struct Header<'a> {
    pub split: &'a str,
    pub label_names: &'a [String],
    pub spec: &'a Spec,
    pub dtype: Dtype,
    pub chunk_files: usize,
    pub extra_attrs: &'a [(String, String)],
}

/// An open `<split>.h5.partial` with its three datasets.
pub(super) struct SplitFile {
    partial: PathBuf,
    final_path: PathBuf,
    file: File,
    mel: Dataset,
    label: Dataset,
    path: Dataset,
    /// Rows written so far (the current N of every dataset).
    rows: usize,
}

/// Attaches the file and the action to an HDF5 error.
trait Context<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> Context<T> for hdf5::Result<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Hdf5 {
            file: file.to_path_buf(),
            action: action(),
            source,
        })
    }
}

impl SplitFile {
    /// Creates `<final_path>.partial` (replacing any left over) with empty datasets
    /// and every root attribute.
    pub(super) fn create(final_path: PathBuf, header: &Header<'_>) -> Result<Self, Error> {
        let mut partial = final_path.clone().into_os_string();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let p = partial.as_path();
        let file = File::with_options()
            .with_fapl(|fapl| fapl.libver_latest())
            .with_fcpl(|fcpl| fcpl.obj_track_times(false))
            .create(p)
            .ctx(p, || "create the file".into())?;
        write_attrs(&file, header).ctx(p, || "write the root attributes".into())?;

        let [n_long, n_short, n_mels, n_frames] = header.spec.row_shape();
        let c = header.chunk_files;
        let mel_shape = [
            Extent::resizable(0),
            Extent::fixed(n_long),
            Extent::fixed(n_short),
            Extent::fixed(n_mels),
            Extent::fixed(n_frames),
        ];
        let mel_builder = match header.dtype {
            Dtype::Float32 => file.new_dataset::<f32>(),
            Dtype::Float16 => file.new_dataset::<half::f16>(),
        };
        let mel = mel_builder
            .shape(SimpleExtents::from_vec(mel_shape.to_vec()))
            .chunk(vec![c, n_long, n_short, n_mels, n_frames])
            .obj_track_times(false)
            .create("mel")
            .ctx(p, || "create dataset `mel`".into())?;
        let label =
            create_1d::<i32>(&file, "label", c).ctx(p, || "create dataset `label`".into())?;
        let path = create_1d::<VarLenUnicode>(&file, "path", c)
            .ctx(p, || "create dataset `path`".into())?;
        Ok(SplitFile {
            partial,
            final_path,
            file,
            mel,
            label,
            path,
            rows: 0,
        })
    }

    pub(super) fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// Grows every dataset by `chunk.rows()` and writes the chunk's rows there.
    pub(super) fn append(&mut self, chunk: &ChunkBuf) -> Result<(), Error> {
        let p = self.partial.as_path();
        let (n, a, b, c, d) = chunk.shape();
        let (start, end) = (self.rows, self.rows + n);
        let what =
            |name: &'static str| move || format!("write rows {start}..{end} of dataset `{name}`");
        self.mel
            .resize((end, a, b, c, d))
            .ctx(p, || format!("grow dataset `mel` to {end} rows"))?;
        let sel = (start..end, .., .., .., ..);
        match chunk.mel() {
            MelBuf::F32(buf) => {
                let view = ArrayView5::from_shape(chunk.shape(), buf).expect("chunk shape");
                self.mel.write_slice(view, sel)
            }
            MelBuf::F16(buf) => {
                let view = ArrayView5::from_shape(chunk.shape(), buf).expect("chunk shape");
                self.mel.write_slice(view, sel)
            }
        }
        .ctx(p, what("mel"))?;
        self.label
            .resize(end)
            .ctx(p, || format!("grow dataset `label` to {end} rows"))?;
        self.label
            .write_slice(chunk.labels(), start..end)
            .ctx(p, what("label"))?;
        self.path
            .resize(end)
            .ctx(p, || format!("grow dataset `path` to {end} rows"))?;
        self.path
            .write_slice(chunk.paths(), start..end)
            .ctx(p, what("path"))?;
        self.rows = end;
        Ok(())
    }

    /// Closes the file and renames it to its final name.
    /// Returns (final path, rows, size in bytes).
    pub(super) fn close(self) -> Result<(PathBuf, usize, u64), Error> {
        let SplitFile {
            partial,
            final_path,
            file,
            mel,
            label,
            path,
            rows,
        } = self;
        // Every object must be closed for H5Fclose to really close the file.
        drop((mel, label, path));
        file.close().ctx(&partial, || "close the file".into())?;
        std::fs::rename(&partial, &final_path).map_err(|source| Error::Io {
            path: partial.clone(),
            action: "rename the finished file",
            source,
        })?;
        let bytes = std::fs::metadata(&final_path)
            .map_err(|source| Error::Io {
                path: final_path.clone(),
                action: "stat the finished file",
                source,
            })?
            .len();
        Ok((final_path, rows, bytes))
    }
}

/// A resizable (N,) dataset chunked by `chunk` rows, starting empty.
fn create_1d<T: H5Type>(file: &File, name: &str, chunk: usize) -> hdf5::Result<Dataset> {
    file.new_dataset::<T>()
        .shape(Extents::from(SimpleExtents::from_vec(vec![
            Extent::resizable(0),
        ])))
        .chunk(chunk)
        .obj_track_times(false)
        .create(name)
}

fn attr_str(file: &File, name: &str, value: &str) -> hdf5::Result<()> {
    let v: VarLenUnicode = value
        .parse()
        .map_err(|e| hdf5::Error::from(format!("attribute `{name}`: {e}")))?;
    file.new_attr::<VarLenUnicode>()
        .create(name)?
        .write_scalar(&v)
}

fn attr<T: H5Type>(file: &File, name: &str, value: T) -> hdf5::Result<()> {
    file.new_attr::<T>().create(name)?.write_scalar(&value)
}

fn attr_int(file: &File, name: &str, value: usize) -> hdf5::Result<()> {
    attr(file, name, i64::try_from(value).unwrap_or(i64::MAX))
}

/// Writes every root attribute. The destructuring is exhaustive on purpose: a new
/// [`Spec`] field does not compile until it is recorded here (and in FORMAT.md).
fn write_attrs(file: &File, h: &Header<'_>) -> hdf5::Result<()> {
    let names = h
        .label_names
        .iter()
        .map(|n| n.parse::<VarLenUnicode>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| hdf5::Error::from(format!("attribute `label_names`: {e}")))?;
    file.new_attr_builder()
        .with_data(names.as_slice())
        .create("label_names")?;
    attr_str(file, "melforge_version", crate::VERSION)?;
    attr_str(file, "split", h.split)?;

    let spec = h.spec;
    let Spec {
        sample_rate,
        clip_seconds,
        segmentation:
            Segmentation {
                enabled,
                long_window,
                long_hop,
                short_window,
                short_hop,
            },
        n_fft,
        hop_length,
        win_length,
        window,
        center,
        pad_mode,
        power,
        n_mels,
        fmin,
        fmax,
        mel_scale,
        norm,
        ref_value,
        amin,
        top_db,
    } = *spec;
    attr(file, "sample_rate", i64::from(sample_rate))?;
    attr(file, "clip_seconds", clip_seconds)?;
    attr_int(file, "clip_samples", spec.clip_samples())?;
    attr_int(file, "n_fft", n_fft)?;
    attr_int(file, "hop_length", hop_length)?;
    attr_int(file, "win_length", win_length)?;
    attr_str(file, "window", window.name())?;
    attr(file, "center", center)?;
    let pad_mode = match pad_mode {
        PadMode::Constant => "constant",
        PadMode::Reflect => "reflect",
    };
    attr_str(file, "pad_mode", pad_mode)?;
    attr(file, "power", power)?;
    attr_int(file, "n_mels", n_mels)?;
    attr(file, "fmin", fmin)?;
    attr(file, "fmax", fmax)?;
    let mel_scale = match mel_scale {
        MelScale::Slaney => "slaney",
        MelScale::Htk => "htk",
    };
    attr_str(file, "mel_scale", mel_scale)?;
    let norm = match norm {
        MelNorm::Slaney => "slaney",
        MelNorm::None => "none",
    };
    attr_str(file, "norm", norm)?;
    attr(file, "ref", ref_value)?;
    attr(file, "amin", amin)?;
    if let Some(top_db) = top_db {
        attr(file, "top_db", top_db)?;
    }
    attr(file, "segmentation_enabled", enabled)?;
    attr_int(file, "long_window", long_window)?;
    attr_int(file, "long_hop", long_hop)?;
    attr_int(file, "short_window", short_window)?;
    attr_int(file, "short_hop", short_hop)?;
    let [n_long, n_short, _, n_frames] = spec.row_shape();
    attr_int(file, "n_long", n_long)?;
    attr_int(file, "n_short", n_short)?;
    attr_int(file, "n_frames", n_frames)?;
    attr_str(file, "dtype", h.dtype.name())?;
    attr_int(file, "chunk_files", h.chunk_files)?;
    for (key, value) in h.extra_attrs {
        attr_str(file, key, value)?;
    }
    Ok(())
}
