//! One output file: creation with the schema and root attributes, chunk appends,
//! close and rename. Every HDF5 call of the build path is in this file; the
//! schema pieces ([`create_file`], [`Datasets`], [`write_attrs`]) are shared with
//! the SWMR appender of `serve` (`super::append`), which adds only the calls
//! SWMR needs.
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

use super::chunk::{ChunkBuf, ChunkOrder, MelBuf};
use super::direct::MelChunks;
use super::{ChunkWrite, Dtype, Error};
use crate::dsp::{MelNorm, MelScale, PadMode, Segmentation, Spec};
use crate::frames::RowLayout;

/// What goes into a file before its first row.
pub(super) struct Header<'a> {
    pub split: &'a str,
    pub label_names: &'a [String],
    /// librosa's fixed rows (`mel` and the `Spec`'s attributes), or rows of
    /// their own length (`features` and the recipe's attributes).
    pub layout: &'a RowLayout,
    pub dtype: Dtype,
    pub chunk_files: usize,
    pub extra_attrs: &'a [(String, String)],
}

/// An open `<split>.h5.partial` with its three datasets.
pub(super) struct SplitFile {
    partial: PathBuf,
    final_path: PathBuf,
    file: File,
    ds: Datasets,
    /// Rows written so far (the current N of every dataset).
    rows: usize,
    /// Checks the chunks come in row order, short only at the end.
    order: ChunkOrder,
    /// Direct writes of `mel` (None: `write_slice`, the reference path).
    mel_chunks: Option<MelChunks>,
    /// Keeps the file's written pages out of the page cache (see [`Drain`]).
    drain: Drain,
}

/// Writes back and drops the output's pages as the file grows: a build writes
/// gigabytes nobody reads right away, and letting them pile up in the page
/// cache evicts what is useful (the input tree), and on a VM each new page
/// cache page is a first touch of guest memory: at 200k reference clips (6 GB
/// out) the `pwrite` copies took a third of the CPU. Every
/// [`Drain::EVERY`] bytes appended, writeback of the file is started
/// (asynchronously) and the pages already written back by the previous round
/// are dropped (`POSIX_FADV_DONTNEED` skips dirty pages). Best effort: a
/// failure only loses the hint.
struct Drain {
    /// A second descriptor of the same file (the hints act on its pages).
    fd: Option<std::fs::File>,
    since: u64,
}

impl Drain {
    const EVERY: u64 = 64 << 20;

    fn new(path: &Path) -> Drain {
        Drain {
            fd: std::fs::File::open(path).ok(),
            since: 0,
        }
    }

    fn wrote(&mut self, bytes: u64) {
        use std::os::fd::AsFd;
        self.since += bytes;
        let Some(f) = &self.fd else { return };
        if self.since < Self::EVERY {
            return;
        }
        self.since = 0;
        let _ = crate::runtime::sys::fadvise_dontneed(f.as_fd());
        let _ = crate::runtime::sys::start_writeback(f.as_fd());
    }
}

/// Who makes a new file's `path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PathColumn {
    /// A variable-length string dataset `path`, written with the rows (`build`).
    Vlen,
    /// The caller (`serve`'s appender: a `writer::strings` column).
    Caller,
}

/// The per-row datasets of a split file.
pub(super) struct Datasets {
    pub mel: Dataset,
    pub label: Dataset,
    /// The variable-length `path` of a build file (and of a serve file from
    /// before `writer::strings`, until the appender converts it); None in a
    /// serve file, whose paths are a `writer::strings` column the appender
    /// writes itself.
    pub path: Option<Dataset>,
}

/// Attaches the file and the action to an HDF5 error.
pub(super) trait Context<T> {
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
    pub(super) fn create(
        final_path: PathBuf,
        header: &Header<'_>,
        spec: &Spec,
        how: ChunkWrite,
    ) -> Result<Self, Error> {
        let mut partial = final_path.clone().into_os_string();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let p = partial.as_path();
        let file = create_file(p)?;
        write_attrs(&file, header).ctx(p, || "write the root attributes".into())?;
        let ds = Datasets::create(&file, p, header, spec, PathColumn::Vlen)?;
        let mel_chunks = match how {
            ChunkWrite::Direct => MelChunks::new(&ds.mel, header.chunk_files, spec.row_len(), true),
            ChunkWrite::Slice => None,
        };
        Ok(SplitFile {
            mel_chunks,
            drain: Drain::new(p),
            partial,
            final_path,
            file,
            ds,
            rows: 0,
            order: ChunkOrder::default(),
        })
    }

    pub(super) fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// The name the file gets once finished.
    pub(super) fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Grows every dataset by `chunk.rows()` and writes the chunk's rows there
    /// (a whole chunk, or the file's last rows). Leaves `chunk` to be cleared.
    pub(super) fn append(&mut self, chunk: &mut ChunkBuf) -> Result<(), Error> {
        let bytes = chunk.bytes() as u64;
        self.order.take(self.rows, chunk.rows(), chunk.is_full());
        self.ds
            .write_rows(&self.partial, self.rows, chunk, self.mel_chunks.as_mut())?;
        self.rows += chunk.rows();
        self.drain.wrote(bytes);
        Ok(())
    }

    /// Closes the file and renames it to its final name.
    /// Returns (final path, rows, size in bytes).
    /// The open file (to add datasets before [`SplitFile::close`]).
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    pub(super) fn close(self) -> Result<(PathBuf, usize, u64), Error> {
        let SplitFile {
            partial,
            final_path,
            file,
            ds,
            rows,
            mel_chunks,
            drain,
            order: _,
        } = self;
        drop(drain);
        // What closing `mel` would flush from its chunk cache, first.
        if let Some(mut m) = mel_chunks {
            m.flush(&ds.mel)
                .ctx(&partial, || "write the last chunks of dataset `mel`".into())?;
        }
        // Every object must be closed for H5Fclose to really close the file.
        drop(ds);
        file.close().ctx(&partial, || "close the file".into())?;
        let bytes = finish_file(&partial, &final_path)?;
        Ok((final_path, rows, bytes))
    }
}

/// Syncs the closed `partial` and renames it to `final_path`; its size.
pub(super) fn finish_file(partial: &Path, final_path: &Path) -> Result<u64, Error> {
    // Durable before it gets its final name (power loss: docs/OPERATIONS.md).
    crate::runtime::durable::sync_file(partial).map_err(|source| Error::Io {
        path: partial.to_path_buf(),
        action: "sync the finished file",
        source,
    })?;
    std::fs::rename(partial, final_path).map_err(|source| Error::Io {
        path: partial.to_path_buf(),
        action: "rename the finished file",
        source,
    })?;
    Ok(std::fs::metadata(final_path)
        .map_err(|source| Error::Io {
            path: final_path.to_path_buf(),
            action: "stat the finished file",
            source,
        })?
        .len())
}

/// A metadata cache capped at `max_bytes` for one output file. HDF5's
/// default lets it grow to 32 MiB per open file, which a long run fills (chunk
/// index, the global heap of the `path` strings): a build's RSS grew with its
/// size (134 MB at 200k clips, three splits) and serve's ~90 B per appended
/// row. Rows are appended in order, so the working set is the tail of each
/// structure: a few MiB are plenty.
pub(crate) fn metadata_cache(max_bytes: usize) -> hdf5::plist::file_access::MetadataCacheConfig {
    hdf5::plist::file_access::MetadataCacheConfig {
        initial_size: max_bytes / 2,
        min_size: max_bytes / 4,
        max_size: max_bytes,
        max_increment: max_bytes / 4,
        ..Default::default()
    }
}

/// Metadata cache of a split file being built.
const BUILD_METADATA_CACHE_BYTES: usize = 2 << 20;

/// Creates (truncating) a file with libver bounds (latest, latest), object
/// time tracking off and a bounded metadata cache, written through the
/// build's driver (`lent`: chunk bytes copied into the file off the writer
/// thread; `sec2` where this HDF5 cannot register it).
pub(super) fn create_file(p: &Path) -> Result<File, Error> {
    create_lent(p).ctx(p, || "create the file".into())
}

fn create_lent(p: &Path) -> hdf5::Result<File> {
    use std::os::unix::ffi::OsStrExt;
    let fapl = hdf5::plist::FileAccess::build()
        .libver_latest()
        .mdc_config(&metadata_cache(BUILD_METADATA_CACHE_BYTES))
        .finish()?;
    let fcpl = hdf5::plist::FileCreate::build()
        .obj_track_times(false)
        .finish()?;
    let name = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| hdf5::Error::from("file name contains a NUL byte"))?;
    hdf5::sync::sync(|| {
        super::lent::use_in(fapl.id())?;
        // SAFETY: `name` is NUL-terminated and both property lists are live
        // for the call.
        let id = hdf5::h5check(unsafe {
            hdf5_sys::h5f::H5Fcreate(
                name.as_ptr(),
                hdf5_sys::h5f::H5F_ACC_TRUNC,
                fcpl.id(),
                fapl.id(),
            )
        })?;
        // SAFETY: `id` is a file id just returned by H5Fcreate, owned by nobody else.
        unsafe { hdf5::from_id::<File>(id) }
    })
}

impl Datasets {
    /// Creates `mel` (rows of `spec`), `label` and (with
    /// [`PathColumn::Vlen`]) `path` with N = 0, chunked by `chunk_files` rows.
    pub(super) fn create(
        file: &File,
        p: &Path,
        header: &Header<'_>,
        spec: &Spec,
        paths: PathColumn,
    ) -> Result<Self, Error> {
        let [n_long, n_short, n_mels, n_frames] = spec.row_shape();
        let c = header.chunk_files;
        let mel_shape = [
            Extent::resizable(0),
            Extent::fixed(n_long),
            Extent::fixed(n_short),
            Extent::fixed(n_mels),
            Extent::fixed(n_frames),
        ];
        let mel_builder = match header.dtype.is_f16() {
            false => file.new_dataset::<f32>(),
            true => file.new_dataset::<half::f16>(),
        };
        let mel = mel_builder
            .shape(SimpleExtents::from_vec(mel_shape.to_vec()))
            .chunk(vec![c, n_long, n_short, n_mels, n_frames])
            .obj_track_times(false)
            .create("mel")
            .ctx(p, || "create dataset `mel`".into())?;
        let label =
            create_1d::<i32>(file, "label", c).ctx(p, || "create dataset `label`".into())?;
        let path = match paths {
            PathColumn::Vlen => Some(
                create_1d::<VarLenUnicode>(file, "path", c)
                    .ctx(p, || "create dataset `path`".into())?,
            ),
            PathColumn::Caller => None,
        };
        Ok(Datasets { mel, label, path })
    }

    /// Opens the datasets of an existing file (`path` when it is there).
    pub(super) fn open(file: &File, p: &Path) -> Result<Self, Error> {
        let open = |name: &'static str| {
            file.dataset(name)
                .ctx(p, || format!("open dataset `{name}`"))
        };
        Ok(Datasets {
            mel: open("mel")?,
            label: open("label")?,
            path: match file.link_exists("path") {
                true => Some(open("path")?),
                false => None,
            },
        })
    }

    /// Sets N of every dataset to `rows` (growing or shrinking).
    pub(super) fn resize(&self, p: &Path, rows: usize) -> Result<(), Error> {
        let mut mel_shape = self.mel.shape();
        mel_shape[0] = rows;
        self.mel
            .resize(mel_shape)
            .ctx(p, || format!("resize dataset `mel` to {rows} rows"))?;
        self.label
            .resize(rows)
            .ctx(p, || format!("resize dataset `label` to {rows} rows"))?;
        match &self.path {
            Some(path) => path
                .resize(rows)
                .ctx(p, || format!("resize dataset `path` to {rows} rows")),
            None => Ok(()),
        }
    }

    /// Grows every dataset to `start + chunk.rows()` rows and writes the chunk's
    /// rows at `start..`, one call per dataset (`mel`, `label`, then `path`
    /// where the file has it).
    ///
    /// With `direct`, `mel` goes by a direct chunk write, which takes the mel
    /// values out of `chunk`: the caller passes it only when `start` is a
    /// chunk boundary and the rows fill the chunk or are the dataset's last.
    pub(super) fn write_rows(
        &self,
        p: &Path,
        start: usize,
        chunk: &mut ChunkBuf,
        direct: Option<&mut MelChunks>,
    ) -> Result<(), Error> {
        let (n, a, b, c, d) = chunk.shape();
        let end = start + n;
        let what =
            |name: &'static str| move || format!("write rows {start}..{end} of dataset `{name}`");
        self.mel
            .resize((end, a, b, c, d))
            .ctx(p, || format!("grow dataset `mel` to {end} rows"))?;
        if let Some(direct) = direct {
            let mel = chunk.take_mel(direct.spare());
            direct.put(&self.mel, start, mel).ctx(p, what("mel"))?;
        } else {
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
        }
        self.label
            .resize(end)
            .ctx(p, || format!("grow dataset `label` to {end} rows"))?;
        self.label
            .write_slice(chunk.labels(), start..end)
            .ctx(p, what("label"))?;
        let Some(path) = &self.path else {
            return Ok(());
        };
        path.resize(end)
            .ctx(p, || format!("grow dataset `path` to {end} rows"))?;
        path.write_slice(chunk.paths(), start..end)
            .ctx(p, what("path"))
    }
}

/// A resizable (N,) dataset chunked by `chunk` rows, starting empty.
pub(super) fn create_1d<T: H5Type>(file: &File, name: &str, chunk: usize) -> hdf5::Result<Dataset> {
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

/// Parses names into HDF5 variable-length strings (fails on a NUL byte).
pub(super) fn vlen_strings(what: &str, names: &[String]) -> hdf5::Result<Vec<VarLenUnicode>> {
    names
        .iter()
        .map(|n| n.parse::<VarLenUnicode>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| hdf5::Error::from(format!("{what}: {e}")))
}

/// Creates the root attribute `label_names` (1-D array of strings); the caller
/// deletes an existing one first.
pub(super) fn write_label_names_attr(file: &File, names: &[String]) -> hdf5::Result<()> {
    let names = vlen_strings("attribute `label_names`", names)?;
    file.new_attr_builder()
        .with_data(names.as_slice())
        .create("label_names")?;
    Ok(())
}

/// Writes every root attribute: the file's own, the spec's
/// ([`write_spec_attrs`]: its destructuring is exhaustive on purpose, so a
/// new [`Spec`] field does not compile until it is recorded there and in
/// FORMAT.md), then the output's.
pub(super) fn write_attrs(file: &File, h: &Header<'_>) -> hdf5::Result<()> {
    write_label_names_attr(file, h.label_names)?;
    attr_str(file, "melforge_version", crate::VERSION)?;
    attr_str(file, "split", h.split)?;
    let spec = match h.layout {
        RowLayout::Frames(l) => return write_frame_attrs(file, h, l),
        RowLayout::Fixed(spec) => spec,
    };
    write_spec_attrs(file, spec)?;
    attr_str(file, "dtype", h.dtype.name())?;
    attr_int(file, "chunk_files", h.chunk_files)?;
    for (key, value) in h.extra_attrs {
        attr_str(file, key, value)?;
    }
    Ok(())
}

/// The [`Spec`]'s attributes, in the order files have always had them.
fn write_spec_attrs(file: &File, spec: &Spec) -> hdf5::Result<()> {
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
    Ok(())
}

/// The root attributes of a variable-length file after the common three:
/// the layout, the recipe and its parameters, the row shape, the storage.
fn write_frame_attrs(
    file: &File,
    h: &Header<'_>,
    l: &crate::frames::FrameLayout,
) -> hdf5::Result<()> {
    use crate::frames::Param;
    attr_str(file, "layout", crate::frames::LAYOUT_NAME)?;
    attr(file, "layout_version", crate::frames::LAYOUT_VERSION)?;
    attr_str(file, "recipe", &l.recipe)?;
    attr(file, "sample_rate", i64::from(l.sample_rate))?;
    attr_int(file, "n_bins", l.bins)?;
    attr(file, "frame_step_seconds", l.frame_step_seconds)?;
    if let Some(n) = l.max_samples {
        attr_int(file, "max_samples", n)?;
    }
    if let Some(n) = l.padded_frames {
        attr_int(file, "padded_frames", n)?;
    }
    for (name, value) in &l.params {
        match value {
            Param::Int(v) => attr(file, name, *v)?,
            Param::Float(v) => attr(file, name, *v)?,
            Param::Bool(v) => attr(file, name, *v)?,
            Param::Str(v) => attr_str(file, name, v)?,
        }
    }
    attr_str(file, "dtype", h.dtype.name())?;
    if let Some(p) = h.dtype.tick_power() {
        attr_str(file, "storage", super::compact::STORAGE)?;
        attr(file, "tick_power", i64::from(p))?;
    }
    attr_int(
        file,
        "chunk_frames",
        super::compact::chunk_frames(l, h.dtype),
    )?;
    attr_int(file, "chunk_files", h.chunk_files)?;
    for (key, value) in h.extra_attrs {
        attr_str(file, key, value)?;
    }
    Ok(())
}

/// Every root attribute [`write_attrs`] gives a file with header `h`, as
/// (name, [`attr_text`]) pairs: written into an in-memory file (core driver, no
/// backing store) and read back, so the comparison sees exactly what a new file
/// would hold.
pub(super) fn attrs_as_text(h: &Header<'_>) -> hdf5::Result<Vec<(String, String)>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "melforge-attrs-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let file = File::with_options()
        .with_fapl(|fapl| fapl.libver_latest().core_filebacked(false))
        .create(&name)?;
    write_attrs(&file, h)?;
    let mut out = Vec::new();
    for n in file.attr_names()? {
        if let Some(text) = attr_text(&file, &n)? {
            out.push((n, text));
        }
    }
    Ok(out)
}

/// A scalar root attribute rendered as text (integers, reals with `{:?}`, bools,
/// strings), `None` when absent. Arrays and other types render as `"<other>"`.
pub(super) fn attr_text(file: &File, name: &str) -> hdf5::Result<Option<String>> {
    use hdf5::types::TypeDescriptor as T;
    if !file.attr_names()?.iter().any(|n| n == name) {
        return Ok(None);
    }
    let a = file.attr(name)?;
    if !a.is_scalar() {
        return Ok(Some("<array>".into()));
    }
    let text = match a.dtype()?.to_descriptor()? {
        T::Integer(_) | T::Unsigned(_) => a.read_scalar::<i64>()?.to_string(),
        T::Float(_) => format!("{:?}", a.read_scalar::<f64>()?),
        T::Boolean => a.read_scalar::<bool>()?.to_string(),
        T::VarLenUnicode => a.read_scalar::<VarLenUnicode>()?.as_str().to_string(),
        _ => "<other>".into(),
    };
    Ok(Some(text))
}
