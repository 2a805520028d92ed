//! Tests of the SWMR appender: round trips, label growth, recovery (cutting
//! unconfirmed rows, refusing what cannot be trusted), appending to a build
//! file, and an h5py SWMR reader seeing new rows.

use crate::frames::RowLayout;
use hdf5::types::VarLenUnicode;

use super::*;
use crate::writer::h5;

/// Row shape [2, 3, 4, 5].
pub(super) fn spec() -> AppendSpec {
    AppendSpec {
        split: "train".into(),
        layout: RowLayout::Fixed(crate::writer::tests::tiny_spec()),
        dtype: Dtype::Float32,
        chunk_files: 4,
        extra_attrs: vec![("watch_dir".into(), "/drop".into())],
    }
}

pub(super) fn row(i: usize) -> Vec<f32> {
    (0..120)
        .map(|k| -80.0 + i as f32 + k as f32 * 0.01)
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Column `name` of `f`, either layout (`writer::strings::read`).
pub(super) fn strings(f: &File, name: &str) -> Vec<String> {
    crate::writer::strings::read(f, name).unwrap()
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
    let paths = strings(&f, "path");
    assert_eq!(paths[6], "train/noleak/g.wav");
    assert_eq!(strings(&f, "label_names"), ["leak", "noleak"]);
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
            rows_dropped: 4,
            labels_in_use: 2,
        }
    );
    assert_eq!(a.label_names(), ["a", "b", "c"]);
    assert_eq!(a.rows(), 5);
    assert_eq!(a.append("new.wav", 2, &row(50)).unwrap(), 5);
    a.close().unwrap();
    let f = File::open(d.path().join("train.h5")).unwrap();
    assert_eq!(f.dataset("mel").unwrap().shape()[0], 6);
    let paths = strings(&f, "path");
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
    other.layout.spec_mut().n_mels = 3;
    assert!(matches!(
        Appender::open(d.path(), &other, &[], 1),
        Err(Error::Incompatible { .. })
    ));
    let mut other = spec();
    other.layout.spec_mut().fmin = 1.0;
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
    let mut paths = crate::plan::PathTable::default();
    let plan = super::super::OutputPlan {
        out_dir: d.path().to_path_buf(),
        splits: vec![super::super::SplitPlan {
            name: "train".into(),
            files: (0..3)
                .map(|i| super::super::PlannedFile {
                    path: paths.push(&format!("train/x/{i}.wav")),
                    label: 0,
                })
                .collect(),
        }],
        paths: std::sync::Arc::new(paths),
        label_names: names(&["x"]),
        layout: s.layout.clone(),
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
    assert_eq!(strings(&f, "label_names"), ["x", "y"]);
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
ds = [f[k] for k in ("mel", "label", "path_utf8", "path_end", "label_names_utf8", "label_names_end")]
def column(name):
    end = f[name + "_end"][:]
    data = f[name + "_utf8"][: end[-1] if len(end) else 0].tobytes()
    return [data[s:e].decode() for s, e in zip([0, *end[:-1]], end)]
print(f["mel"].shape[0], flush=True)
sys.stdin.readline()
for d in ds:
    d.refresh()
n = min(f["mel"].shape[0], f["label"].shape[0], f["path_end"].shape[0])
names = column("label_names")
print(n, column("path")[n - 1], names[f["label"][n - 1]], float(f["mel"][n - 1].flat[0]), flush=True)
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

#[test]
fn label_ids_agree_across_splits_after_a_crash_before_the_first_commit() {
    // Regression: two splits whose rows, flushed but never committed, added
    // labels in different orders kept those orders after the restart
    // (TESTING [L0,L3,L2,L1], VALIDATION [L0,L1,L3,L2]).
    let d = tempfile::tempdir().unwrap();
    for (split, order) in [
        ("TESTING", ["L0", "L3", "L2", "L1"]),
        ("VALIDATION", ["L0", "L1", "L3", "L2"]),
    ] {
        let spec = AppendSpec {
            split: split.into(),
            ..spec()
        };
        let (mut a, _) = Appender::open(d.path(), &spec, &[], 0).unwrap();
        for (i, l) in order.iter().enumerate() {
            let id = a.label_id(l).unwrap();
            a.append(&format!("{split}/{l}/f.wav"), id, &row(i))
                .unwrap();
        }
        a.flush().unwrap();
        drop(a); // killed: the journal never confirmed a row
    }
    let cfg = crate::config::Config {
        spec: crate::writer::tests::tiny_spec(),
        ..crate::config::Config::default()
    };
    let layout = crate::recipes::build(&cfg).unwrap().layout().clone();
    let mut sink = splits::Splits::new(d.path(), (&cfg, layout), Path::new("/drop"));
    let dest = |split: &str, label: &str| splits::Dest {
        rel: format!("{split}/{label}/g.wav"),
        split: split.into(),
        label: Some(label.into()),
        meta: None,
    };
    // After the restart the rows arrive in yet another order.
    for (split, label) in [
        ("VALIDATION", "L1"),
        ("TESTING", "L2"),
        ("VALIDATION", "L3"),
        ("TESTING", "L0"),
    ] {
        sink.open(split, 0).unwrap();
        sink.append(&dest(split, label), &row(0), None).unwrap();
    }
    sink.close_all().unwrap();
    let read = |split: &str| {
        let f = File::open(d.path().join(format!("{split}.h5"))).unwrap();
        let names = strings(&f, "label_names");
        assert_eq!(attr_names_of(&f), names, "{split}");
        let ids = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
        let labels: Vec<String> = ids.iter().map(|&i| names[i as usize].clone()).collect();
        (names, labels)
    };
    let (t_names, t_labels) = read("TESTING");
    let (v_names, v_labels) = read("VALIDATION");
    assert_eq!(t_names, v_names, "label ids differ between splits");
    assert_eq!(t_labels, ["L2", "L0"]);
    assert_eq!(v_labels, ["L1", "L3"]);
}

#[test]
fn names_in_use_by_committed_rows_keep_their_ids_on_reopen() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for (i, l) in ["b", "a", "c"].iter().enumerate() {
        let id = a.label_id(l).unwrap();
        a.append(&format!("train/{l}/f.wav"), id, &row(i)).unwrap();
    }
    a.flush().unwrap();
    drop(a);
    // Two rows confirmed: "b" and "a" are in use, "c" is not.
    let (a, rep) = Appender::open(d.path(), &spec(), &names(&["b", "a", "z"]), 2).unwrap();
    assert_eq!(rep.labels_in_use, 2);
    assert_eq!(a.label_names(), names(&["b", "a", "z"]));
    drop(a);
    // A table that conflicts with the names in use leaves them alone.
    let (a, _) = Appender::open(d.path(), &spec(), &names(&["a", "b"]), 2).unwrap();
    assert_eq!(a.label_names(), names(&["b", "a", "z"]));
}

#[test]
fn rows_round_trip_across_partial_flushes_and_direct_whole_chunks() {
    // Chunks of 4: flushes after rows 1 and 3 (partial chunks, completed by
    // later rows through `write_slice`), then 13 more rows: row 3 closes the
    // first chunk, whole chunks 4..8, 8..12, 12..16 go by direct chunk writes
    // (the buffer is back on a chunk boundary), 16..18 stay a partial chunk.
    for dtype in [Dtype::Float32, Dtype::Float16] {
        let d = tempfile::tempdir().unwrap();
        let sp = AppendSpec { dtype, ..spec() };
        let (mut a, _) = Appender::open(d.path(), &sp, &names(&["leak"]), 0).unwrap();
        let mut n = 0;
        for flush_after in [1, 2, 13, 2] {
            for _ in 0..flush_after {
                assert_eq!(a.append(&format!("f{n}.wav"), 0, &row(n)).unwrap(), n);
                n += 1;
            }
            assert_eq!(a.flush().unwrap(), n);
        }
        assert_eq!(a.close().unwrap(), 18);
        let f = File::open(d.path().join("train.h5")).unwrap();
        let mel = f.dataset("mel").unwrap();
        assert_eq!(mel.shape(), [18, 2, 3, 4, 5]);
        let values: Vec<f32> = match dtype {
            Dtype::Float32 => mel.read_raw::<f32>().unwrap(),
            Dtype::Float16 | Dtype::Compact { .. } => mel
                .read_raw::<half::f16>()
                .unwrap()
                .iter()
                .map(|v| v.to_f32())
                .collect(),
        };
        for i in 0..18 {
            let want: Vec<f32> = match dtype {
                Dtype::Float32 => row(i),
                Dtype::Float16 | Dtype::Compact { .. } => row(i)
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_f32())
                    .collect(),
            };
            assert_eq!(
                values[i * 120..(i + 1) * 120],
                want[..],
                "{dtype:?} row {i}"
            );
        }
        let paths = strings(&f, "path");
        assert_eq!(paths[17], "f17.wav");
    }
}

/// Memory per split stays bounded however many rows it gets: the split file
/// is open with the metadata cache capped and every dataset's chunk cache at
/// [`recover::CHUNK_CACHE`] (HDF5's defaults grew with the rows: 4 MiB of
/// heap collections per file, ~1.7 MiB of written chunks).
#[test]
fn split_files_are_open_with_bounded_caches() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &names(&["leak"]), 0).unwrap();
    for i in 0..9 {
        a.append(&format!("train/leak/f{i}.wav"), 0, &row(i))
            .unwrap();
    }
    a.flush().unwrap();
    let mdc = a.file.access_plist().unwrap().mdc_config();
    assert_eq!(mdc.max_size, 1 << 20);
    let store::Store::Mel { ds, .. } = &a.store else {
        panic!("a librosa spec makes a mel store")
    };
    let columns: Vec<hdf5::Dataset> = [
        "path_utf8",
        "path_end",
        "label_names_utf8",
        "label_names_end",
    ]
    .iter()
    .map(|n| a.file.dataset(n).unwrap())
    .collect();
    for ds in [&ds.mel, &ds.label].into_iter().chain(&columns) {
        let c = ds.access_plist().unwrap().chunk_cache();
        assert_eq!((c.nslots, c.nbytes), recover::CHUNK_CACHE, "{}", ds.name());
    }
    // Releasing HDF5's free lists mid-run leaves the appender working.
    release_free_lists();
    a.append("train/leak/f9.wav", 0, &row(9)).unwrap();
    assert_eq!(a.close().unwrap(), 10);
}

/// Pages of `f` in the page cache, or why that cannot be told here.
fn cached_pages(f: &std::fs::File) -> Result<u64, String> {
    use std::os::fd::AsFd;
    crate::runtime::sys::cachestat(f.as_fd())
        .map(|c| c.nr_cache)
        .map_err(|e| format!("cachestat unusable ({e})"))
}

/// Whether `fadvise(DONTNEED)` drops clean pages of a file in `dir` (not on
/// tmpfs, whose pages are the file itself).
fn page_cache_droppable(dir: &Path) -> Result<(), String> {
    use std::io::Write;
    let p = dir.join("probe");
    let mut f = std::fs::File::create(&p).map_err(|e| e.to_string())?;
    f.write_all(&vec![7u8; 1 << 20])
        .map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    let before = cached_pages(&f)?;
    crate::runtime::sys::fadvise_dontneed(std::os::fd::AsFd::as_fd(&f))
        .map_err(|e| e.to_string())?;
    let after = cached_pages(&f)?;
    std::fs::remove_file(&p).map_err(|e| e.to_string())?;
    if before == 0 || after > 0 {
        return Err(format!(
            "{} keeps clean pages cached after DONTNEED ({before} → {after}), e.g. tmpfs",
            dir.display()
        ));
    }
    Ok(())
}

/// A flush drops the whole `mel` chunks synced by the previous flush from the
/// page cache (on disk and never written again: the next rows reuse their
/// pages) and keeps the rows since, which SWMR readers are about to read;
/// every row reads back intact. Without the drop every page stays cached.
#[test]
fn a_flush_drops_the_chunks_synced_before_it_from_the_page_cache() {
    let d = tempfile::tempdir().unwrap();
    if let Err(why) = page_cache_droppable(d.path()) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let sp = AppendSpec {
        layout: RowLayout::Fixed(crate::dsp::Spec::default()),
        chunk_files: 64,
        ..spec()
    };
    let row_len = sp.layout.spec().row_len();
    let big_row = |i: usize| -> Vec<f32> { (0..row_len).map(|k| (i * 7 + k) as f32).collect() };
    let (mut a, _) = Appender::open(d.path(), &sp, &names(&["leak"]), 0).unwrap();
    let per_flush = 150;
    let mut n = 0;
    for _ in 0..4 {
        for _ in 0..per_flush {
            a.append(&format!("f{n:05}.wav"), 0, &big_row(n)).unwrap();
            n += 1;
        }
        a.flush().unwrap();
    }
    let f = std::fs::File::open(a.path()).unwrap();
    let file_pages = f.metadata().unwrap().len().div_ceil(4096);
    let cached = cached_pages(&f).unwrap();
    let last_flush_pages = (per_flush * row_len * 4) as u64 / 4096;
    // The last flush's rows (and up to a chunk before them, written whole
    // when it filled), plus metadata.
    assert!(
        cached <= last_flush_pages + (64 * row_len * 4) as u64 / 4096 + 64,
        "{cached} of {file_pages} pages cached after 4 flushes of {last_flush_pages}"
    );
    assert!(
        cached >= last_flush_pages * 9 / 10,
        "the last flush's rows left the cache: {cached} pages cached"
    );
    assert_eq!(a.close().unwrap(), n);
    let h = File::open(d.path().join("train.h5")).unwrap();
    let values = h.dataset("mel").unwrap().read_raw::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(
            values[i * row_len..(i + 1) * row_len],
            big_row(i)[..],
            "row {i}"
        );
    }
}
