//! The statistics beside a split file `<name>.h5`: WeNet's `global_cmvn`
//! JSON as `<name>.global_cmvn` and ESPnet's `feats_stats.npz` as
//! `<name>.feats_stats.npz`, each written to `<file>.partial`, synced and
//! renamed, as the split files are.
//!
//! The `.npz` is a zip of `.npy` files, written here: entries are stored
//! (not deflated), which `numpy.load` reads, and the whole format is the
//! three fixed headers below. No zip crate is in the tree, and `npyz`'s
//! `npz` feature would pull one in for what is about 80 lines.

use std::io;
use std::path::{Path, PathBuf};

use super::Stats;

/// The names of the two files beside the split file `h5` (`train.h5` →
/// `train.global_cmvn`, `train.feats_stats.npz`; a shard's
/// `train.shard-0-of-2.h5` → `train.shard-0-of-2.global_cmvn`, …).
pub fn names(h5: &Path) -> [PathBuf; 2] {
    let stem = match h5.extension() {
        Some(e) if e == "h5" => h5.with_extension(""),
        _ => h5.to_path_buf(),
    };
    let with = |suffix: &str| {
        let mut s = stem.clone().into_os_string();
        s.push(suffix);
        PathBuf::from(s)
    };
    [with(".global_cmvn"), with(".feats_stats.npz")]
}

/// `p` with `.partial` appended: where a file is written before its rename.
pub fn partial(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// WeNet's `global_cmvn`: `{"mean_stat": [per-bin sum], "var_stat":
/// [per-bin sum of squares], "frame_num": frames}`, as its
/// `tools/compute_cmvn_stats.py` writes it. Numbers are written so that
/// they read back as the same f64.
pub fn global_cmvn_json(s: &Stats) -> String {
    let list = |v: &[f64]| serde_json::to_string(v).unwrap_or_default();
    format!(
        "{{\"mean_stat\": {}, \"var_stat\": {}, \"frame_num\": {}}}",
        list(&s.sum),
        list(&s.sum_square),
        s.frames
    )
}

/// One `.npy` (version 1.0) of little-endian `descr` values of `shape`.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' to a multiple of 64.
    let total = (10 + header.len() + 1).div_ceil(64) * 64;
    while 10 + header.len() + 1 < total {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(total + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// ESPnet's `feats_stats.npz`: `count` (int64 scalar), `sum` and
/// `sum_square` (float64, (bins,)), as its `collect_stats` saves them.
pub fn feats_stats_npz(s: &Stats) -> Vec<u8> {
    let f64s = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let shape = format!("({},)", s.bins());
    let count = i64::try_from(s.frames).unwrap_or(i64::MAX);
    zip_stored(&[
        ("count.npy", npy("<i8", "()", &count.to_le_bytes())),
        ("sum.npy", npy("<f8", &shape, &f64s(&s.sum))),
        ("sum_square.npy", npy("<f8", &shape, &f64s(&s.sum_square))),
    ])
}

/// A zip archive of `entries`, each stored uncompressed, dated 1980-01-01
/// (the bytes depend only on the contents).
fn zip_stored(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    const DATE: u16 = 0x21; // 1980-01-01 in MS-DOS form
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = CRC.checksum(data);
        let size = data.len() as u32;
        let fields = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes()); // version needed: 2.0
            v.extend_from_slice(&0u16.to_le_bytes()); // flags
            v.extend_from_slice(&0u16.to_le_bytes()); // method: stored
            v.extend_from_slice(&0u16.to_le_bytes()); // time
            v.extend_from_slice(&DATE.to_le_bytes());
            v.extend_from_slice(&crc.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes()); // compressed
            v.extend_from_slice(&size.to_le_bytes()); // uncompressed
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra field length
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        fields(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        fields(&mut central);
        central.extend_from_slice(&[0; 6]); // comment length, disk, internal attrs
        central.extend_from_slice(&0u32.to_le_bytes()); // external attrs
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let (at, len, n) = (out.len() as u32, central.len() as u32, entries.len() as u16);
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // this disk, the directory's disk
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // comment length
    out
}

/// The two files for the split file `h5`, written to their `.partial`
/// names and synced, not yet renamed: [`Pending::commit`] renames them,
/// dropping it removes them.
pub fn prepare(h5: &Path, s: &Stats) -> io::Result<Pending> {
    let finals = names(h5);
    let mut pending = Pending {
        files: Vec::with_capacity(2),
    };
    let contents = [global_cmvn_json(s).into_bytes(), feats_stats_npz(s)];
    for (f, bytes) in finals.iter().zip(contents) {
        let p = partial(f);
        pending.files.push((p.clone(), f.clone()));
        std::fs::write(&p, bytes)?;
        crate::runtime::durable::sync_file(&p)?;
    }
    Ok(pending)
}

/// Statistics files written and synced under their `.partial` names.
#[derive(Debug)]
pub struct Pending {
    files: Vec<(PathBuf, PathBuf)>,
}

impl Pending {
    /// Renames every file to its final name.
    pub fn commit(mut self) -> io::Result<()> {
        while let Some((p, f)) = self.files.first().cloned() {
            std::fs::rename(&p, &f)?;
            self.files.remove(0);
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        for (p, _) in &self.files {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    path = %p.display(),
                    error = %e,
                    "Cannot delete an unfinished statistics file."
                ),
            }
        }
    }
}

/// Writes both files for `h5` at once (merge), atomically each.
pub fn write(h5: &Path, s: &Stats) -> io::Result<()> {
    prepare(h5, s)?.commit()
}

/// Removes the statistics files of `h5` (a split file that no longer has
/// them, e.g. one `serve` appends to); missing files are fine.
pub fn remove(h5: &Path) -> io::Result<()> {
    for f in names(h5) {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Split files and the statistics files beside them (what a stopped
/// command discards).
pub fn with_beside(split_files: Vec<PathBuf>) -> Vec<PathBuf> {
    let beside: Vec<PathBuf> = split_files.iter().flat_map(|p| names(p)).collect();
    split_files.into_iter().chain(beside).collect()
}
