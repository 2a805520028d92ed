//! SWMR appends for `serve`: one [`Appender`] per `<out>/<split>.h5`.
//!
//! The file has the build schema (`docs/FORMAT.md`: `mel`, `label`, `path`, every
//! root attribute) plus a growing 1-D string dataset `label_names`; the writer
//! holds it open in HDF5 single-writer/multiple-reader mode, so an h5py reader
//! opened with `swmr=True` sees new rows after `refresh()`.
//!
//! Invariants:
//! * **Rows in arrival order.** [`Appender::append`] returns the row index at once;
//!   rows are buffered and written as whole chunks, the last partial chunk at
//!   [`Appender::flush`].
//! * **Flush = visible and durable.** `flush` writes pending label names and rows,
//!   calls H5Fflush (SWMR orders the metadata writes so readers always see a
//!   consistent file), then `fdatasync`s the file. Rows below
//!   [`Appender::flushed_rows`] survive a kill -9 or a power cut; the journal
//!   (`crate::app::serve::journal`) records them only after this returns.
//! * **Label ids never change.** Names are only appended to `label_names`. The root
//!   attribute `label_names` cannot change while SWMR writing (attribute writes are
//!   not SWMR-safe), so it is rewritten whenever the file is opened or closed and is
//!   exact whenever no writer has the file open; the dataset is exact at every flush.
//! * **Open always recovers.** A writer killed in SWMR mode leaves the superblock's
//!   "open for write" flags set and a plain read-write open fails ("file is already
//!   open for write … use h5clear"). [`Appender::open`] sets HDF5's private fapl
//!   property `clear_status_flags` (what `h5clear -s` does) and then cuts every
//!   dataset to the row count the journal confirms: rows past it may be a torn,
//!   unflushed chunk, and their files are still in the drop directory, so they are
//!   re-ingested rather than trusted.
//!
//! Every `unsafe` block of the writer is here (the two raw calls `h5clear` makes).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, File, SimpleExtents};

use super::chunk::ChunkBuf;
use super::h5::{
    self, Context, Datasets, Header, create_file, vlen_strings, write_attrs, write_label_names_attr,
};
use super::{Dtype, Error};
use crate::dsp::Spec;

/// Rows per chunk of the `label_names` dataset.
const NAMES_CHUNK: usize = 64;

/// What an [`Appender`] needs to create or check `<out_dir>/<split>.h5`.
#[derive(Clone, Debug)]
pub struct AppendSpec {
    pub split: String,
    pub spec: Spec,
    pub dtype: Dtype,
    /// Rows per HDF5 chunk along N, ≥ 1.
    pub chunk_files: usize,
    /// Extra root attributes (UTF-8 strings), written when the file is created.
    pub extra_attrs: Vec<(String, String)>,
}

/// What [`Appender::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The file did not exist and was created.
    pub created: bool,
    /// Rows the file held (the longest of `mel`, `label`, `path`) before recovery.
    pub rows_found: usize,
    /// Rows cut because the journal did not confirm them.
    pub rows_dropped: usize,
}

/// An open `<split>.h5` in SWMR-write mode; see the module documentation.
pub struct Appender {
    path: PathBuf,
    file: File,
    ds: Datasets,
    names_ds: Dataset,
    label_names: Vec<String>,
    /// Names in `names_ds` (the rest are pending).
    names_written: usize,
    /// Names in the root attribute.
    names_in_attr: usize,
    /// Rows written to HDF5 (not necessarily flushed).
    rows_written: usize,
    /// Rows flushed and synced.
    rows_flushed: usize,
    chunk: ChunkBuf,
    row_len: usize,
    /// A plain descriptor of the same file, for `fdatasync`.
    sync: std::fs::File,
    failed: bool,
}

impl Appender {
    /// Opens `<out_dir>/<spec.split>.h5` for appending, creating it (with
    /// `label_names`) when missing, and starts SWMR writing.
    ///
    /// `confirmed_rows` is the row count the journal confirms: an existing file is
    /// cut to it (clearing the status flags a killed writer left behind); a file
    /// with fewer rows is an error, as is a missing file when `confirmed_rows > 0`.
    /// Names of `label_names` the file lacks are appended, so the file's list
    /// starts with its own names (ids never change) and then the new ones; the
    /// caller checks [`Appender::label_names`] if it needs ids to match.
    pub fn open(
        out_dir: &Path,
        spec: &AppendSpec,
        label_names: &[String],
        confirmed_rows: usize,
    ) -> Result<(Appender, OpenReport), Error> {
        validate(spec, label_names)?;
        let path = out_dir.join(format!("{}.h5", spec.split));
        let header = Header {
            split: &spec.split,
            label_names,
            spec: &spec.spec,
            dtype: spec.dtype,
            chunk_files: spec.chunk_files,
            extra_attrs: &spec.extra_attrs,
        };
        let exists = path.try_exists().map_err(|source| Error::Io {
            path: path.clone(),
            action: "look for the output file",
            source,
        })?;
        let (file, ds, names_ds, names, report) = if exists {
            open_existing(&path, &header, confirmed_rows)?
        } else {
            if confirmed_rows > 0 {
                return Err(Error::Recovery {
                    file: path,
                    reason: format!(
                        "the journal confirms {confirmed_rows} rows but the file is missing"
                    ),
                });
            }
            create_new(out_dir, &path, &header)?
        };
        let rows = report.rows_found - report.rows_dropped;
        let sync = std::fs::File::open(&path).map_err(|source| Error::Io {
            path: path.clone(),
            action: "open the output file for fsync",
            source,
        })?;
        let names_in_attr = names.len();
        let mut app = Appender {
            chunk: ChunkBuf::new(spec.dtype, spec.spec.row_shape(), spec.chunk_files),
            row_len: spec.spec.row_len(),
            path,
            file,
            ds,
            names_ds,
            names_written: names.len(),
            names_in_attr,
            label_names: names,
            rows_written: rows,
            rows_flushed: rows,
            sync,
            failed: false,
        };
        // New names go into the attribute too while SWMR is not yet on.
        for n in label_names {
            app.label_id(n)?;
        }
        app.write_names()?;
        app.rewrite_names_attr()?;
        let p = app.path.as_path();
        app.file.flush().ctx(p, || "flush the file".into())?;
        app.file
            .start_swmr()
            .ctx(p, || "start SWMR writing".into())?;
        app.sync_file()?;
        Ok((app, report))
    }

    /// The file being appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Label names, ids index this (including names not yet flushed).
    pub fn label_names(&self) -> &[String] {
        &self.label_names
    }

    /// The id of label `name`, appending it to `label_names` if new (written at the
    /// next flush; existing ids never change).
    pub fn label_id(&mut self, name: &str) -> Result<i32, Error> {
        if let Some(i) = self.label_names.iter().position(|n| n == name) {
            return Ok(i as i32);
        }
        if name.contains('\0') {
            return Err(Error::Plan(format!("label {name:?} contains a NUL byte")));
        }
        let id = i32::try_from(self.label_names.len())
            .map_err(|_| Error::Plan("too many label names".into()))?;
        self.label_names.push(name.to_string());
        Ok(id)
    }

    /// Appends one row (`spec.row_len()` values, layout as in
    /// [`super::DatasetWriter::submit`]) for the file at `rel_path` with label id
    /// `label` (-1 for none). Returns its row index. The row is visible to readers
    /// and durable after the next [`Appender::flush`].
    pub fn append(&mut self, rel_path: &str, label: i32, row: &[f32]) -> Result<usize, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        let n_labels = self.label_names.len();
        if label != -1 && usize::try_from(label).is_ok_and(|l| l >= n_labels) || label < -1 {
            return Err(Error::UnknownLabel {
                file: self.path.clone(),
                label,
                n_labels,
            });
        }
        let index = self.rows();
        if row.len() != self.row_len {
            return Err(Error::RowLength {
                split: self.path.display().to_string(),
                seq: index,
                got: row.len(),
                expected: self.row_len,
            });
        }
        if rel_path.contains('\0') {
            return Err(Error::Plan(format!(
                "path {rel_path:?} contains a NUL byte"
            )));
        }
        self.chunk.push(row, label, rel_path)?;
        if self.chunk.is_full() {
            self.guard(|a| a.write_pending())?;
        }
        Ok(index)
    }

    /// Rows appended so far (written, buffered or flushed).
    pub fn rows(&self) -> usize {
        self.rows_written + self.chunk.rows()
    }

    /// Rows that readers see and that survive a crash.
    pub fn flushed_rows(&self) -> usize {
        self.rows_flushed
    }

    /// Rows appended since the last flush.
    pub fn pending_rows(&self) -> usize {
        self.rows() - self.rows_flushed
    }

    /// Writes pending names and rows, flushes HDF5 (SWMR readers see them after
    /// `refresh()`) and syncs the file to disk. Returns [`Appender::flushed_rows`].
    pub fn flush(&mut self) -> Result<usize, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        if self.pending_rows() == 0 && self.names_written == self.label_names.len() {
            return Ok(self.rows_flushed);
        }
        self.guard(|a| {
            a.write_names()?;
            a.write_pending()?;
            a.file.flush().ctx(&a.path, || "flush the file".into())?;
            a.sync_file()
        })?;
        self.rows_flushed = self.rows_written;
        Ok(self.rows_flushed)
    }

    /// Flushes, closes the file and, when names were added while SWMR writing,
    /// reopens it briefly to bring the root attribute `label_names` up to date.
    /// Returns the row count.
    pub fn close(mut self) -> Result<usize, Error> {
        let rows = self.flush()?;
        let Appender {
            path,
            file,
            ds,
            names_ds,
            label_names,
            names_in_attr,
            ..
        } = self;
        drop((ds, names_ds));
        file.close().ctx(&path, || "close the file".into())?;
        if names_in_attr != label_names.len() {
            let file = open_rw(&path, false).ctx(&path, || "reopen the file".into())?;
            replace_names_attr(&file, &label_names)
                .ctx(&path, || "rewrite attribute `label_names`".into())?;
            file.close().ctx(&path, || "close the file".into())?;
        }
        Ok(rows)
    }

    /// Runs `f`, marking the appender failed if it errs.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        let r = f(self);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn write_pending(&mut self) -> Result<(), Error> {
        if self.chunk.rows() > 0 {
            self.ds
                .write_rows(&self.path, self.rows_written, &self.chunk)?;
            self.rows_written += self.chunk.rows();
            self.chunk.clear();
        }
        Ok(())
    }

    fn write_names(&mut self) -> Result<(), Error> {
        let (start, end) = (self.names_written, self.label_names.len());
        if start == end {
            return Ok(());
        }
        let p = self.path.as_path();
        let new = vlen_strings("label names", &self.label_names[start..])
            .ctx(p, || "encode label names".into())?;
        self.names_ds
            .resize(end)
            .ctx(p, || format!("grow dataset `label_names` to {end}"))?;
        self.names_ds
            .write_slice(&new, start..end)
            .ctx(p, || "write dataset `label_names`".into())?;
        self.names_written = end;
        Ok(())
    }

    fn rewrite_names_attr(&mut self) -> Result<(), Error> {
        replace_names_attr(&self.file, &self.label_names)
            .ctx(&self.path, || "rewrite attribute `label_names`".into())?;
        self.names_in_attr = self.label_names.len();
        Ok(())
    }

    fn sync_file(&self) -> Result<(), Error> {
        self.sync.sync_data().map_err(|source| Error::Io {
            path: self.path.clone(),
            action: "sync the output file",
            source,
        })
    }
}

fn validate(spec: &AppendSpec, label_names: &[String]) -> Result<(), Error> {
    let name = &spec.split;
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(Error::Plan(format!(
            "`{name}` is not usable as a split file name"
        )));
    }
    if spec.chunk_files == 0 {
        return Err(Error::Plan("chunk_files must be ≥ 1".into()));
    }
    if let Err(e) = spec.spec.validate() {
        return Err(Error::Plan(format!("feature spec: {e}")));
    }
    for (i, n) in label_names.iter().enumerate() {
        if label_names[..i].contains(n) {
            return Err(Error::Plan(format!("label `{n}` appears twice")));
        }
    }
    Ok(())
}

type Opened = (File, Datasets, Dataset, Vec<String>, OpenReport);

fn create_new(out_dir: &Path, p: &Path, header: &Header<'_>) -> Result<Opened, Error> {
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Io {
        path: out_dir.to_path_buf(),
        action: "create the output directory",
        source,
    })?;
    let file = create_file(p)?;
    write_attrs(&file, header).ctx(p, || "write the root attributes".into())?;
    let ds = Datasets::create(&file, p, header)?;
    let names_ds = create_names_ds(&file, &[]).ctx(p, || "create dataset `label_names`".into())?;
    // The directory entry must be durable before the journal names rows in it.
    sync_dir(out_dir)?;
    let report = OpenReport {
        created: true,
        ..OpenReport::default()
    };
    Ok((file, ds, names_ds, Vec::new(), report))
}

fn open_existing(p: &Path, header: &Header<'_>, confirmed: usize) -> Result<Opened, Error> {
    let file = open_rw(p, true).ctx(p, || "open the file for appending".into())?;
    let ds = Datasets::open(&file, p)?;
    check_compatible(&file, &ds, p, header)?;
    let lens = [ds.mel.shape()[0], ds.label.size(), ds.path.size()];
    let found = lens.into_iter().max().unwrap_or(0);
    let shortest = lens.into_iter().min().unwrap_or(0);
    if shortest < confirmed {
        return Err(Error::Recovery {
            file: p.to_path_buf(),
            reason: format!(
                "the journal confirms {confirmed} rows but the file has only {shortest} \
                 (mel, label, path: {lens:?})"
            ),
        });
    }
    if found != confirmed {
        tracing::warn!(
            "Cutting {} from {found} to {confirmed} rows: rows past the journal were never confirmed.",
            p.display()
        );
        ds.resize(p, confirmed)?;
    }
    let (names_ds, names) = if file.link_exists("label_names") {
        let d = file
            .dataset("label_names")
            .ctx(p, || "open dataset `label_names`".into())?;
        let names = d
            .read_raw::<VarLenUnicode>()
            .ctx(p, || "read dataset `label_names`".into())?;
        (d, names.iter().map(|n| n.as_str().to_string()).collect())
    } else {
        // A build file: the attribute is the list; add the dataset.
        let names: Vec<String> = file
            .attr("label_names")
            .and_then(|a| a.read_raw::<VarLenUnicode>())
            .ctx(p, || "read attribute `label_names`".into())?
            .iter()
            .map(|n| n.as_str().to_string())
            .collect();
        let d = create_names_ds(&file, &names).ctx(p, || "create dataset `label_names`".into())?;
        (d, names)
    };
    let report = OpenReport {
        created: false,
        rows_found: found,
        rows_dropped: found - confirmed,
    };
    Ok((file, ds, names_ds, names, report))
}

/// The resizable `label_names` dataset holding `names`.
fn create_names_ds(file: &File, names: &[String]) -> hdf5::Result<Dataset> {
    let d = file
        .new_dataset::<VarLenUnicode>()
        .shape(SimpleExtents::from_vec(vec![Extent::resizable(
            names.len(),
        )]))
        .chunk(NAMES_CHUNK)
        .obj_track_times(false)
        .create("label_names")?;
    if !names.is_empty() {
        d.write_raw(&vlen_strings("label names", names)?)?;
    }
    Ok(d)
}

fn replace_names_attr(file: &File, names: &[String]) -> hdf5::Result<()> {
    if file.attr_names()?.iter().any(|n| n == "label_names") {
        file.delete_attr("label_names")?;
    }
    write_label_names_attr(file, names)
}

/// Refuses a file whose rows were computed with other parameters.
fn check_compatible(file: &File, ds: &Datasets, p: &Path, h: &Header<'_>) -> Result<(), Error> {
    let bad = |reason: String| {
        Err(Error::Incompatible {
            file: p.to_path_buf(),
            reason,
        })
    };
    let row_shape = h.spec.row_shape();
    let shape = ds.mel.shape();
    if shape.len() != 5 || shape[1..] != row_shape {
        return bad(format!(
            "mel has shape {shape:?}, this configuration makes rows of {row_shape:?}"
        ));
    }
    let dtype_ok = match h.dtype {
        Dtype::Float32 => ds.mel.dtype().is_ok_and(|t| t.is::<f32>()),
        Dtype::Float16 => ds.mel.dtype().is_ok_and(|t| t.is::<half::f16>()),
    };
    if !dtype_ok {
        return bad(format!("mel is not {}", h.dtype.name()));
    }
    // Compare every root attribute a fresh file would get (parameters and split),
    // by writing them into an in-memory file and reading both back as text.
    let expected = h5::attrs_as_text(h).ctx(p, || "render the expected attributes".into())?;
    for (name, want) in expected {
        let informational = ["label_names", "melforge_version", "chunk_files"];
        if informational.contains(&name.as_str()) || h.extra_attrs.iter().any(|(k, _)| *k == name) {
            continue;
        }
        let got = h5::attr_text(file, &name).ctx(p, || format!("read attribute `{name}`"))?;
        if got.as_deref() != Some(want.as_str()) {
            return bad(format!(
                "attribute `{name}` is {}, this configuration has {want}",
                got.as_deref().unwrap_or("absent")
            ));
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            action: "sync the directory",
            source,
        })
}

/// Opens `p` read-write with libver (latest, latest). With `clear_flags`, sets the
/// private fapl property `clear_status_flags` first, as `h5clear -s` does, so a
/// file whose SWMR writer was killed opens again.
fn open_rw(p: &Path, clear_flags: bool) -> hdf5::Result<File> {
    let fapl = hdf5::plist::FileAccess::build().libver_latest().finish()?;
    let name = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| hdf5::Error::from("file name contains a NUL byte"))?;
    hdf5::sync::sync(|| {
        if clear_flags {
            raw::set_clear_status_flags(fapl.id())?;
        }
        raw::open_rdwr(&name, fapl.id())
    })
}

/// The raw HDF5 calls the high-level crate does not offer, each behind a thin
/// `Result`-returning wrapper. Callers hold the HDF5 lock (`hdf5::sync::sync`).
mod raw {
    use std::ffi::CStr;

    use hdf5::File;
    use hdf5_sys::h5::hbool_t;
    use hdf5_sys::h5f::{H5F_ACC_RDWR, H5Fopen};
    use hdf5_sys::h5i::hid_t;
    use hdf5_sys::h5p::H5Pset;

    /// Name of the private file-access property `h5clear -s` sets (H5Fprivate.h,
    /// `H5F_ACS_CLEAR_STATUS_FLAGS_NAME`; present in HDF5 1.10.0 and later).
    const CLEAR_STATUS_FLAGS: &CStr = c"clear_status_flags";

    pub(super) fn set_clear_status_flags(fapl: hid_t) -> hdf5::Result<()> {
        let mut on: hbool_t = 1;
        // SAFETY: `fapl` is a live file-access property list (owned by the caller);
        // the property is registered in every fapl with the size of an hbool_t, and
        // H5Pset copies that many bytes from the pointer, which is valid for them.
        let r = unsafe { H5Pset(fapl, CLEAR_STATUS_FLAGS.as_ptr(), (&raw mut on).cast()) };
        hdf5::h5check(r).map(|_| ())
    }

    pub(super) fn open_rdwr(name: &CStr, fapl: hid_t) -> hdf5::Result<File> {
        // SAFETY: `name` is a NUL-terminated string and `fapl` a live property list,
        // both outliving the call.
        let id = hdf5::h5check(unsafe { H5Fopen(name.as_ptr(), H5F_ACC_RDWR, fapl) })?;
        // SAFETY: `id` is a file id just returned by H5Fopen, owned by nobody else.
        unsafe { hdf5::from_id::<File>(id) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row shape [2, 3, 4, 5].
    fn spec() -> AppendSpec {
        AppendSpec {
            split: "train".into(),
            spec: crate::writer::tests::tiny_spec(),
            dtype: Dtype::Float32,
            chunk_files: 4,
            extra_attrs: vec![("watch_dir".into(), "/drop".into())],
        }
    }

    fn row(i: usize) -> Vec<f32> {
        (0..120)
            .map(|k| -80.0 + i as f32 + k as f32 * 0.01)
            .collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn strings(d: &Dataset) -> Vec<String> {
        d.read_raw::<VarLenUnicode>()
            .unwrap()
            .iter()
            .map(|s| s.as_str().to_string())
            .collect()
    }

    fn attr_names_of(f: &File) -> Vec<String> {
        f.attr("label_names")
            .unwrap()
            .read_raw::<VarLenUnicode>()
            .unwrap()
            .iter()
            .map(|s| s.as_str().to_string())
            .collect()
    }

    #[test]
    fn round_trip_with_label_growth() {
        let d = tempfile::tempdir().unwrap();
        let (mut a, rep) = Appender::open(d.path(), &spec(), &names(&["leak"]), 0).unwrap();
        assert!(rep.created);
        for i in 0..6 {
            assert_eq!(
                a.append(&format!("train/leak/f{i}.wav"), 0, &row(i))
                    .unwrap(),
                i
            );
        }
        assert_eq!(a.label_id("noleak").unwrap(), 1);
        assert_eq!(a.label_id("leak").unwrap(), 0);
        assert_eq!(a.append("train/noleak/g.wav", 1, &row(6)).unwrap(), 6);
        assert_eq!(a.append("nolabel.wav", -1, &row(7)).unwrap(), 7);
        assert!(matches!(
            a.append("x.wav", 2, &row(0)),
            Err(Error::UnknownLabel { label: 2, .. })
        ));
        assert!(matches!(
            a.append("x.wav", 0, &row(0)[..5]),
            Err(Error::RowLength { .. })
        ));
        // One whole chunk went out when it filled; the rest waits for flush.
        assert_eq!(a.flushed_rows(), 0);
        assert_eq!(a.flush().unwrap(), 8);
        assert_eq!(a.pending_rows(), 0);
        assert_eq!(a.close().unwrap(), 8);

        let f = File::open(d.path().join("train.h5")).unwrap();
        let mel = f.dataset("mel").unwrap();
        assert_eq!(mel.shape(), [8, 2, 3, 4, 5]);
        assert_eq!(mel.chunk(), Some(vec![4, 2, 3, 4, 5]));
        let v = mel.read_raw::<f32>().unwrap();
        for i in 0..8 {
            assert_eq!(v[i * 120..(i + 1) * 120], row(i)[..], "row {i}");
        }
        let labels = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
        assert_eq!(labels, [0, 0, 0, 0, 0, 0, 1, -1]);
        let paths = strings(&f.dataset("path").unwrap());
        assert_eq!(paths[6], "train/noleak/g.wav");
        assert_eq!(
            strings(&f.dataset("label_names").unwrap()),
            ["leak", "noleak"]
        );
        // Rewritten at close.
        assert_eq!(attr_names_of(&f), ["leak", "noleak"]);
        // The same attributes a build writes.
        let text = |n: &str| h5::attr_text(&f, n).unwrap().unwrap();
        assert_eq!(text("split"), "train");
        assert_eq!(text("n_long"), "2");
        assert_eq!(text("dtype"), "float32");
        assert_eq!(text("watch_dir"), "/drop");
        assert_eq!(text("melforge_version"), crate::VERSION);
    }

    #[test]
    fn reopen_cuts_unconfirmed_rows_and_keeps_ids() {
        let d = tempfile::tempdir().unwrap();
        let (mut a, _) = Appender::open(d.path(), &spec(), &names(&["a", "b"]), 0).unwrap();
        for i in 0..9 {
            a.append(&format!("f{i}.wav"), (i % 2) as i32, &row(i))
                .unwrap();
        }
        a.flush().unwrap();
        drop(a);
        // The journal confirmed 5 rows; a new label list order must not move ids.
        let (mut a, rep) = Appender::open(d.path(), &spec(), &names(&["c", "b"]), 5).unwrap();
        assert_eq!(
            rep,
            OpenReport {
                created: false,
                rows_found: 9,
                rows_dropped: 4
            }
        );
        assert_eq!(a.label_names(), ["a", "b", "c"]);
        assert_eq!(a.rows(), 5);
        assert_eq!(a.append("new.wav", 2, &row(50)).unwrap(), 5);
        a.close().unwrap();
        let f = File::open(d.path().join("train.h5")).unwrap();
        assert_eq!(f.dataset("mel").unwrap().shape()[0], 6);
        let paths = strings(&f.dataset("path").unwrap());
        assert_eq!(
            paths,
            ["f0.wav", "f1.wav", "f2.wav", "f3.wav", "f4.wav", "new.wav"]
        );
        let v = f.dataset("mel").unwrap().read_raw::<f32>().unwrap();
        assert_eq!(v[5 * 120..], row(50)[..]);
        assert_eq!(attr_names_of(&f), ["a", "b", "c"]);
    }

    #[test]
    fn recovery_refuses_what_it_cannot_trust() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            Appender::open(d.path(), &spec(), &[], 3),
            Err(Error::Recovery { .. })
        ));
        let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
        a.append("x.wav", -1, &row(0)).unwrap();
        a.close().unwrap();
        assert!(matches!(
            Appender::open(d.path(), &spec(), &[], 2),
            Err(Error::Recovery { .. })
        ));
        let mut other = spec();
        other.spec.n_mels = 3;
        assert!(matches!(
            Appender::open(d.path(), &other, &[], 1),
            Err(Error::Incompatible { .. })
        ));
        let mut other = spec();
        other.spec.fmin = 1.0;
        let e = Appender::open(d.path(), &other, &[], 1).err().unwrap();
        assert!(e.to_string().contains("fmin"), "{e}");
        let mut other = spec();
        other.dtype = Dtype::Float16;
        assert!(matches!(
            Appender::open(d.path(), &other, &[], 1),
            Err(Error::Incompatible { .. })
        ));
        // The right setup still opens.
        let (a, _) = Appender::open(d.path(), &spec(), &[], 1).unwrap();
        assert_eq!(a.rows(), 1);
    }

    #[test]
    fn appends_to_a_build_file() {
        let d = tempfile::tempdir().unwrap();
        let s = spec();
        let plan = super::super::OutputPlan {
            out_dir: d.path().to_path_buf(),
            splits: vec![super::super::SplitPlan {
                name: "train".into(),
                files: (0..3)
                    .map(|i| super::super::PlannedFile {
                        rel_path: format!("train/x/{i}.wav"),
                        label: 0,
                    })
                    .collect(),
            }],
            label_names: names(&["x"]),
            spec: s.spec.clone(),
            dtype: s.dtype,
            chunk_files: s.chunk_files,
            extra_attrs: vec![],
        };
        let mut w = super::super::DatasetWriter::create(plan).unwrap();
        for i in 0..3 {
            w.submit(0, i, Some(row(i))).unwrap();
        }
        w.finish().unwrap();
        let (mut a, rep) = Appender::open(d.path(), &s, &names(&["y"]), 3).unwrap();
        assert_eq!(rep.rows_dropped, 0);
        assert_eq!(a.label_names(), ["x", "y"]);
        assert_eq!(a.append("train/y/3.wav", 1, &row(3)).unwrap(), 3);
        a.close().unwrap();
        let f = File::open(d.path().join("train.h5")).unwrap();
        assert_eq!(strings(&f.dataset("label_names").unwrap()), ["x", "y"]);
        assert_eq!(
            f.dataset("label").unwrap().read_raw::<i32>().unwrap(),
            [0, 0, 0, 1]
        );
    }

    /// An h5py reader opened with `swmr=True` sees rows (and a new label name)
    /// appear after `refresh()` while the writer keeps the file open.
    #[test]
    fn h5py_swmr_reader_sees_new_rows() {
        use std::io::{BufRead, BufReader, Write};
        use std::process::{Command, Stdio};
        let probe = Command::new("python3")
            .args(["-c", "import h5py"])
            .stderr(Stdio::null())
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            println!("skipped: python3 with h5py is not available");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (mut a, _) = Appender::open(d.path(), &spec(), &names(&["a"]), 0).unwrap();
        for i in 0..3 {
            a.append(&format!("a/{i}.wav"), 0, &row(i)).unwrap();
        }
        a.flush().unwrap();
        let script = r#"
import sys, h5py
f = h5py.File(sys.argv[1], "r", libver="latest", swmr=True)
ds = [f["mel"], f["label"], f["path"], f["label_names"]]
print(f["mel"].shape[0], flush=True)
sys.stdin.readline()
for d in ds:
    d.refresh()
n = min(f["mel"].shape[0], f["label"].shape[0], f["path"].shape[0])
names = [s.decode() for s in f["label_names"][:]]
print(n, f["path"].asstr()[n - 1], names[f["label"][n - 1]], float(f["mel"][n - 1].flat[0]), flush=True)
"#;
        let mut child = Command::new("python3")
            .args(["-c", script])
            .arg(a.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "3");
        let b = a.label_id("b").unwrap();
        for i in 3..10 {
            a.append(&format!("b/{i}.wav"), b, &row(i)).unwrap();
        }
        a.flush().unwrap();
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(
            line.trim(),
            format!("10 b/9.wav b {:?}", f64::from(row(9)[0]))
        );
        a.close().unwrap();
    }
}
