//! `melforge bench write`: the writer alone, in rows/s, on any machine the
//! binary runs on (the GPU box has no cargo for `cargo bench --bench
//! writer`), beside h5py's `write_direct_chunk` of the same rows
//! (`scripts/bench-writer-h5py.py`, which `gpu-bench` runs next to it).
//!
//! `rows` synthetic rows of the reference shape (79 × 3 × 32 × 1), already in
//! memory, one split, `chunk_files` rows per chunk, written as a build writes
//! them: create, submit in seq order, finish (the file fsynced and renamed
//! into place). Each run writes a fresh file in `dir`; the previous one is
//! deleted and the rows are made before the timer starts. Three ways, in
//! turn, `repeat` times each:
//! * `direct`: the writer (`H5Dwrite_chunk` of whole `mel` chunks);
//! * `slice`: the reference it replaced (`write_slice` per chunk);
//! * `pwrite`: the same bytes written into a new file in chunk-sized `pwrite`
//!   calls and fsynced, no HDF5 — the floor whatever writes them, on this
//!   file system.
//!
//! `benches/writer.rs` takes its rows and plan from here.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::dsp::Spec;
use crate::plan::PathTable;
use crate::writer::{ChunkWrite, DatasetWriter, Dtype, Error, OutputPlan, PlannedFile, SplitPlan};

/// Arguments of `melforge bench write`.
#[derive(Clone, Debug, clap::Args)]
pub struct WriteArgs {
    /// Directory the files are written in (the file system measured);
    /// default /dev/shm (the writer's own cost, no disk), else the system
    /// temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Rows per file.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub rows: u64,
    /// Element type of `mel`: float32 or float16.
    #[arg(long, default_value = "float32", value_parser = ["float32", "float16"])]
    pub dtype: String,
    /// Rows per chunk (`output.chunk_files`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub chunk_files: u64,
    /// Runs of each way; the report gives the median and the best.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeat: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One way of writing the rows, measured.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// `direct`, `slice` or `pwrite`.
    pub way: &'static str,
    pub median_rows_per_s: f64,
    pub best_rows_per_s: f64,
    pub median_ms: f64,
    /// `mel` bytes per second at the median (MiB/s).
    pub median_mib_per_s: f64,
}

/// What `bench write` measured.
#[derive(Clone, Debug, Serialize)]
pub struct WriteReport {
    pub dir: PathBuf,
    pub rows: u64,
    pub dtype: &'static str,
    pub chunk_files: u64,
    /// Bytes of one row of `mel`.
    pub row_bytes: usize,
    pub repeat: u64,
    pub figures: Vec<Figure>,
}

impl WriteReport {
    /// The figure for `way`.
    pub fn figure(&self, way: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.way == way)
    }
}

impl std::fmt::Display for WriteReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} {} rows of {} bytes, {} per chunk, into {} ({} runs each):",
            self.rows,
            self.dtype,
            self.row_bytes,
            self.chunk_files,
            self.dir.display(),
            self.repeat
        )?;
        let slice = self.figure("slice").map(|s| s.median_rows_per_s);
        for fig in &self.figures {
            write!(
                f,
                "  {:<6} {:>10.0} rows/s median ({:.0} best), {:.1} ms, {:.0} MiB/s",
                fig.way,
                fig.median_rows_per_s,
                fig.best_rows_per_s,
                fig.median_ms,
                fig.median_mib_per_s
            )?;
            if let Some(s) = slice.filter(|s| *s > 0.0) {
                write!(f, "  ({:.2}× slice)", fig.median_rows_per_s / s)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The one-split plan the bench writes: `rows` files alternating between two
/// labels, paths as a build records them.
pub fn plan(out_dir: &Path, dtype: Dtype, rows: usize, chunk_files: usize) -> OutputPlan {
    let mut paths = PathTable::default();
    let files = (0..rows)
        .map(|i| PlannedFile {
            path: paths.push(&format!(
                "train/{}/clip{i:06}.wav",
                ["leak", "noleak"][i % 2]
            )),
            label: (i % 2) as i32,
        })
        .collect();
    OutputPlan {
        out_dir: out_dir.to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits: vec![SplitPlan {
            name: "train".into(),
            files,
        }],
        label_names: vec!["leak".into(), "noleak".into()],
        layout: crate::frames::RowLayout::Fixed(Spec::default()),
        dtype,
        chunk_files,
        extra_attrs: vec![],
    }
}

/// `n` synthetic dB-like rows of `row_len` values (the values do not matter
/// to the writer).
pub fn rows(n: usize, row_len: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|r| {
            (0..row_len)
                .map(|i| -80.0 + ((r * 31 + i * 7) % 800) as f32 * 0.1)
                .collect()
        })
        .collect()
}

/// Writes `rows` through a [`DatasetWriter`] the way `how` says; the time
/// from create to finish.
pub fn write_once(
    plan: OutputPlan,
    rows: Vec<Vec<f32>>,
    how: ChunkWrite,
) -> Result<Duration, Error> {
    let t = Instant::now();
    let mut w = DatasetWriter::create_with(plan, |s| format!("{s}.h5"), how)?;
    for (seq, row) in rows.into_iter().enumerate() {
        w.submit(0, seq, Some(row))?;
    }
    w.finish()?;
    Ok(t.elapsed())
}

/// The floor: `bytes` into a new file at `path` in `chunk`-sized `pwrite`
/// calls, then fsynced (as the writer's finish does).
fn pwrite_once(path: &Path, bytes: usize, chunk: usize) -> std::io::Result<Duration> {
    let buf: Vec<u8> = (0..chunk).map(|i| (i * 31 % 251) as u8).collect();
    let t = Instant::now();
    let f = std::fs::File::create(path)?;
    let mut at = 0;
    while at < bytes {
        let n = chunk.min(bytes - at);
        f.write_all_at(&buf[..n], at as u64)?;
        at += n;
    }
    f.sync_all()?;
    Ok(t.elapsed())
}

/// Where the files go when `--dir` is not given: /dev/shm, else the system
/// temporary directory.
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Runs the benchmark and returns its report.
pub fn run(args: &WriteArgs) -> anyhow::Result<WriteReport> {
    use anyhow::Context;
    let dtype = match args.dtype.as_str() {
        "float16" => Dtype::Float16,
        _ => Dtype::Float32,
    };
    let base = args.dir.clone().unwrap_or_else(default_dir);
    let root = tempfile::Builder::new()
        .prefix("melforge-bench-write-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot make a folder in {}", base.display()))?;
    let (n, chunk_files) = (args.rows as usize, args.chunk_files as usize);
    let spec = Spec::default();
    let row_bytes = spec.row_len() * dtype.size();
    let mut times: Vec<(&'static str, Vec<Duration>)> = vec![
        ("direct", Vec::new()),
        ("slice", Vec::new()),
        ("pwrite", Vec::new()),
    ];
    let floor = root.path().join("floor.bin");
    for _ in 0..args.repeat {
        for (way, t) in &mut times {
            let out = root.path().join(*way);
            // Outside the timer: freeing the last run's pages.
            let _ = std::fs::remove_file(out.join("train.h5"));
            let _ = std::fs::remove_file(&floor);
            let took = match *way {
                "pwrite" => pwrite_once(&floor, n * row_bytes, chunk_files * row_bytes)
                    .with_context(|| format!("cannot write {}", floor.display()))?,
                w => {
                    let how = if w == "direct" {
                        ChunkWrite::Direct
                    } else {
                        ChunkWrite::Slice
                    };
                    let rows = rows(n, spec.row_len());
                    write_once(plan(&out, dtype, n, chunk_files), rows, how)
                        .with_context(|| format!("the {w} writer failed"))?
                }
            };
            t.push(took);
        }
    }
    let figures = times
        .into_iter()
        .map(|(way, mut t)| {
            t.sort();
            let median = t[t.len() / 2].as_secs_f64();
            let best = t[0].as_secs_f64();
            Figure {
                way,
                median_rows_per_s: n as f64 / median,
                best_rows_per_s: n as f64 / best,
                median_ms: median * 1e3,
                median_mib_per_s: (n * row_bytes) as f64 / median / (1 << 20) as f64,
            }
        })
        .collect();
    Ok(WriteReport {
        dir: base,
        rows: args.rows,
        dtype: dtype.name(),
        chunk_files: args.chunk_files,
        row_bytes,
        repeat: args.repeat,
        figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench writes what a build writes: a file with every row, in both
    /// chunk paths (a partial last chunk included), and reports each way.
    #[test]
    fn writes_every_row_and_reports_each_way() {
        let d = tempfile::tempdir().unwrap();
        let row_len = Spec::default().row_len();
        for how in [ChunkWrite::Direct, ChunkWrite::Slice] {
            let out = d.path().join(format!("{how:?}"));
            let took = write_once(plan(&out, Dtype::Float32, 130, 64), rows(130, row_len), how);
            assert!(took.is_ok(), "{took:?}");
            let f = hdf5::File::open(out.join("train.h5")).unwrap();
            let mel = f.dataset("mel").unwrap();
            assert_eq!(mel.shape(), [130, 79, 3, 32, 1]);
            let last: Vec<f32> = mel
                .read_slice::<f32, _, ndarray::Ix4>((129, .., .., .., ..))
                .unwrap()
                .iter()
                .copied()
                .collect();
            assert_eq!(last, rows(130, row_len)[129]);
            assert_eq!(
                f.dataset("label").unwrap().read_raw::<i32>().unwrap()[129],
                1
            );
        }
        let r = run(&WriteArgs {
            dir: Some(d.path().to_path_buf()),
            rows: 70,
            dtype: "float16".into(),
            chunk_files: 64,
            repeat: 2,
            json: false,
        })
        .unwrap();
        assert_eq!(
            (r.rows, r.dtype, r.row_bytes),
            (70, "float16", 79 * 3 * 32 * 2)
        );
        let ways: Vec<&str> = r.figures.iter().map(|f| f.way).collect();
        assert_eq!(ways, ["direct", "slice", "pwrite"]);
        assert!(
            r.figures
                .iter()
                .all(|f| f.best_rows_per_s >= f.median_rows_per_s)
        );
        assert!(r.to_string().contains("× slice"));
        // Its own folder is gone afterwards.
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("melforge-bench-write-")
            })
            .collect();
        assert!(left.is_empty());
    }
}
