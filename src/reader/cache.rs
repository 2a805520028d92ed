//! `io.direct = "auto"`: read O_DIRECT unless the inputs are already in the
//! page cache.
//!
//! O_DIRECT is right for inputs on the disk: the bytes go straight into the
//! registered arena, with no copy and no page-cache churn. For inputs that are
//! already cached it reads the disk again for bytes that are in memory, and
//! on a machine where the output is written to the same disk the two compete:
//! a warm 20k-clip build on the 2-core VM ran 1.2× slower O_DIRECT than through
//! the page cache (docs/BENCHMARKS.md, issue 12).
//!
//! The choice is made once per build, before the readers start, from a sample
//! of the inputs. It cannot be made per file inside the ring without I/O: a
//! buffered `RWF_NOWAIT` read that misses still starts readahead, so a cold
//! file would be read twice. `cachestat(2)` (Linux 6.5) counts a file's cached
//! pages without touching them; on an older kernel the build reads O_DIRECT and
//! says why.

use std::os::fd::AsFd;
use std::path::PathBuf;

use crate::config::Direct;
use crate::runtime::sys;

/// Inputs sampled (spread evenly over the build's list).
pub const SAMPLE: usize = 64;

/// Share of the sampled bytes that must be cached to read through the page
/// cache: a build that would take most of its files from the disk is better
/// off with O_DIRECT for all of them.
pub const CACHED_SHARE: f64 = 0.9;

/// The read mode a run reads with, and the sentence that says why: what the
/// run found out, beside its `Config` (which never changes after
/// validation). `pipeline::Pipeline::start_reading` takes it; build logs and
/// reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadMode {
    /// Open with O_DIRECT.
    pub direct: bool,
    pub reason: String,
    /// Mean size of the sampled inputs, when `auto` sampled some: what the
    /// read arena is sized by (`pipeline::arena_bytes`) instead of a guess.
    pub typical_bytes: Option<u64>,
    /// Most of the inputs are compressed (an extension other than `.wav`),
    /// so every file is decoded on the host whichever backend computes:
    /// what `auto` weighs (`compute::for_recipe`). From the names alone.
    pub compressed: bool,
    /// `auto` found the sampled inputs in the page cache: each read is a copy
    /// that completes as it is submitted, so few files need be in flight
    /// (`pipeline::arena_bytes`).
    pub cached: bool,
}

/// What a sample found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Residency {
    /// Files sampled (those that could be opened and asked).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Their bytes in the page cache (whole pages, capped at each file's size).
    pub cached: u64,
}

impl Residency {
    /// The cached share of the sampled bytes (1 for an empty sample).
    pub fn share(&self) -> f64 {
        if self.bytes == 0 {
            1.0
        } else {
            self.cached as f64 / self.bytes as f64
        }
    }
}

/// How many of a file's bytes are in the page cache (`cachestat`).
/// Only a regular file is opened (a FIFO would block the open).
pub fn cached_bytes(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    let (f, meta) = super::open_regular(path).map_err(std::io::Error::other)?;
    let size = meta.len();
    let cs = sys::cachestat(f.as_fd())?;
    Ok((size, cs.nr_cache.saturating_mul(sys::page_size()).min(size)))
}

/// Samples up to [`SAMPLE`] of `n` inputs (`path(i)` is input `i`), evenly
/// spread. Files that cannot be opened or stat'ed are skipped (the readers
/// will report them); an unsupported `cachestat` ends the sample with the
/// error.
pub fn sample(n: usize, path: impl Fn(usize) -> PathBuf) -> std::io::Result<Residency> {
    let k = n.min(SAMPLE);
    let mut r = Residency::default();
    for j in 0..k {
        let i = j * n / k;
        match cached_bytes(&path(i)) {
            Ok((size, cached)) => {
                r.files += 1;
                r.bytes += size;
                r.cached += cached;
            }
            // ENOSYS is `Unsupported`.
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Err(e),
            Err(_) => {}
        }
    }
    Ok(r)
}

/// Resolves `io.direct` for a build over `n` inputs.
pub fn choose(mode: Direct, n: usize, path: impl Fn(usize) -> PathBuf) -> ReadMode {
    let compressed = mostly_compressed(n, &path);
    let mode = match mode {
        Direct::Always => ReadMode {
            direct: true,
            reason: "io.direct = true".into(),
            typical_bytes: None,
            compressed: false,
            cached: false,
        },
        Direct::Never => ReadMode {
            direct: false,
            reason: "io.direct = false".into(),
            typical_bytes: None,
            compressed: false,
            cached: false,
        },
        Direct::Auto => decide(sample(n, path)),
    };
    ReadMode { compressed, ..mode }
}

/// Whether more than half of up to [`SAMPLE`] of `n` inputs, evenly spread,
/// have an extension other than `.wav` (any case).
fn mostly_compressed(n: usize, path: &impl Fn(usize) -> PathBuf) -> bool {
    let k = n.min(SAMPLE);
    let other = (0..k)
        .filter(|j| {
            let p = path(j * n / k);
            !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("wav"))
        })
        .count();
    2 * other > k
}

/// Resolves `io.direct` where there is no list of inputs to sample (serve,
/// which reads files as they arrive; a spill's own reads): `auto` reads
/// O_DIRECT.
pub fn unsampled(mode: Direct) -> ReadMode {
    match mode {
        Direct::Auto => ReadMode {
            direct: true,
            reason: "io.direct = auto: no list of inputs to sample (files are read as they \
                     come), so O_DIRECT"
                .into(),
            typical_bytes: None,
            compressed: false,
            cached: false,
        },
        other => choose(other, 0, |_| PathBuf::new()),
    }
}

/// The `auto` rule over a sample's outcome.
pub fn decide(sampled: std::io::Result<Residency>) -> ReadMode {
    match sampled {
        Err(e) => ReadMode {
            direct: true,
            reason: format!(
                "io.direct = auto: cannot tell what is in the page cache ({e}; cachestat \
                 needs Linux 6.5), so O_DIRECT"
            ),
            typical_bytes: None,
            compressed: false,
            cached: false,
        },
        Ok(r) => {
            let share = r.share();
            let cached = share >= CACHED_SHARE;
            ReadMode {
                typical_bytes: (r.files > 0).then(|| r.bytes / r.files as u64),
                compressed: false,
                cached,
                direct: !cached,
                reason: format!(
                    "io.direct = auto: {:.0}% of {} sampled inputs ({} bytes) are in the page \
                     cache, so {}",
                    share * 100.0,
                    r.files,
                    r.bytes,
                    if cached {
                        "reading through it"
                    } else {
                        "O_DIRECT"
                    }
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn inputs_are_compressed_when_most_names_are_not_wav() {
        let of = |names: &[&str]| {
            let paths: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
            choose(Direct::Always, paths.len(), |i| paths[i].clone()).compressed
        };
        assert!(!of(&["a.wav", "b.WAV", "c.flac"]));
        assert!(of(&["a.flac", "b.mp3", "c.wav"]));
        assert!(of(&["a.opus", "noext"]));
        assert!(!of(&[]));
        assert!(!unsampled(Direct::Auto).compressed);
    }

    fn drop_from_cache(path: &std::path::Path) {
        let f = std::fs::File::open(path).unwrap();
        f.sync_all().unwrap();
        sys::fadvise_dontneed(f.as_fd()).unwrap();
    }

    /// Whether `path` is on tmpfs, whose pages cannot be dropped.
    fn on_tmpfs(path: &std::path::Path) -> bool {
        std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" tmpfs "))
            .any(|l| path.starts_with(l.split(' ').nth(1).unwrap()))
    }

    fn cachestat_works() -> bool {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        match sys::cachestat(f.as_fd()) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("skipping: cachestat unusable here ({e})");
                false
            }
        }
    }

    #[test]
    fn a_file_just_written_is_cached_and_a_dropped_one_is_not() {
        if !cachestat_works() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop(f);
        let (size, cached) = cached_bytes(&path).unwrap();
        assert_eq!((size, cached), (1 << 20, 1 << 20));
        drop_from_cache(&path);
        let (_, cached) = cached_bytes(&path).unwrap();
        // tmpfs cannot drop: there the file stays cached.
        if !on_tmpfs(dir.path()) {
            assert!(
                cached < 1 << 19,
                "{cached} bytes still cached after DONTNEED"
            );
        }
    }

    #[test]
    fn auto_reads_cached_inputs_through_the_cache_and_cold_ones_direct() {
        if !cachestat_works() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..10)
            .map(|i| {
                let p = dir.path().join(format!("{i}.bin"));
                std::fs::write(&p, vec![1u8; 64 << 10]).unwrap();
                p
            })
            .collect();
        let warm = choose(Direct::Auto, paths.len(), |i| paths[i].clone());
        assert!(!warm.direct, "{}", warm.reason);
        assert!(
            warm.reason.contains("100% of 10 sampled"),
            "{}",
            warm.reason
        );
        for p in &paths {
            drop_from_cache(p);
        }
        let cold = choose(Direct::Auto, paths.len(), |i| paths[i].clone());
        if !on_tmpfs(dir.path()) {
            assert!(cold.direct, "{}", cold.reason);
        }
        assert!(choose(Direct::Always, 10, |i| paths[i].clone()).direct);
        assert!(!choose(Direct::Never, 10, |i| paths[i].clone()).direct);
    }

    #[test]
    fn the_sample_is_spread_over_the_whole_list_and_skips_missing_files() {
        let seen = std::sync::Mutex::new(Vec::new());
        let r = sample(1000, |i| {
            seen.lock().unwrap().push(i);
            PathBuf::from(format!("/nonexistent/melforge/{i}"))
        })
        .unwrap();
        assert_eq!(r, Residency::default());
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), SAMPLE);
        assert_eq!(seen[0], 0);
        assert_eq!(*seen.last().unwrap(), (SAMPLE - 1) * 1000 / SAMPLE);
    }

    #[test]
    fn the_rule_needs_most_bytes_cached_and_falls_back_to_direct_on_error() {
        let r = |cached| Residency {
            files: 4,
            bytes: 100,
            cached,
        };
        assert!(!decide(Ok(r(90))).direct);
        assert!(decide(Ok(r(89))).direct);
        let e = std::io::Error::from_raw_os_error(libc::ENOSYS);
        let m = decide(Err(e));
        assert!(m.direct);
        assert!(m.reason.contains("6.5"), "{}", m.reason);
    }
}
