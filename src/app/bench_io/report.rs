//! The benchmark's result: one JSON document, or an aligned table.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{Comparison, PassResult, mode_name};

/// Where the numbers were taken.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Cores this process may run on.
    pub cores: usize,
    /// `uname`: system name, release, machine, e.g. "Linux 6.1.0 x86_64".
    pub kernel: String,
    pub hostname: String,
}

impl Machine {
    pub fn current() -> Machine {
        let (kernel, hostname) = uname().unwrap_or_else(|| ("unknown".into(), "unknown".into()));
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            hostname,
        }
    }
}

fn uname() -> Option<(String, String)> {
    let u = crate::runtime::sys::uname().ok()?;
    Some((
        format!("{} {} {}", u.sysname, u.release, u.machine),
        u.nodename,
    ))
}

/// Everything one `bench io` run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub dir: PathBuf,
    pub machine: Machine,
    /// Files every pass reads (after `--files`).
    pub corpus_files: usize,
    pub corpus_bytes: u64,
    /// Audio files (the default `input.extensions`) in the whole tree.
    pub corpus_total_files: usize,
    pub queue_depth: usize,
    /// `fio --version`, when `--compare-fio` found fio.
    pub fio_version: Option<String>,
    pub passes: Vec<PassResult>,
    pub comparisons: Vec<Comparison>,
    /// Sentences about what was skipped or could not be done.
    pub warnings: Vec<String>,
}

const MIB: f64 = 1024.0 * 1024.0;

impl Report {
    /// Writes the human-readable table.
    pub fn write_table(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            w,
            "bench io {}: {} files, {:.1} MiB; queue depth {}; {} cores; {}",
            self.dir.display(),
            self.corpus_files,
            self.corpus_bytes as f64 / MIB,
            self.queue_depth,
            self.machine.cores,
            self.machine.kernel
        )?;
        self.write_passes(w)?;
        self.write_notes(w)?;
        if let Some(v) = &self.fio_version {
            let fio_note = self
                .passes
                .iter()
                .find_map(|p| p.note.as_deref().filter(|_| p.command.is_some()));
            writeln!(
                w,
                "fio: {v}{}",
                fio_note.map_or(String::new(), |n| format!("; {n}"))
            )?;
        }
        for c in &self.comparisons {
            writeln!(
                w,
                "{} vs fio, {} {}: {:.0} vs {:.0} files/s, ratio {:.2}",
                c.engine.name(),
                c.cache.name(),
                mode_name(c.direct),
                c.files_per_s,
                c.fio_files_per_s,
                c.ratio
            )?;
        }
        for warning in &self.warnings {
            writeln!(w, "warning: {warning}")?;
        }
        Ok(())
    }

    /// One aligned line per pass (text columns left, numbers right).
    fn write_passes(&self, w: &mut impl Write) -> std::io::Result<()> {
        let header = [
            "cache",
            "mode",
            "engine",
            "qd",
            "files",
            "errors",
            "MiB",
            "elapsed_s",
            "files/s",
            "MiB/s",
            "p50_us",
            "p99_us",
            "max_us",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for p in &self.passes {
            let lat = |f: fn(&super::Latency) -> f64| {
                p.latency
                    .as_ref()
                    .map_or("-".into(), |l| format!("{:.0}", f(l)))
            };
            rows.push(vec![
                p.cache.name().into(),
                if p.direct { "direct" } else { "buffered" }.into(),
                p.engine.name().into(),
                p.queue_depth.to_string(),
                p.files.to_string(),
                p.errors.to_string(),
                format!("{:.1}", p.bytes as f64 / MIB),
                format!("{:.3}", p.elapsed_s),
                format!("{:.0}", p.files_per_s),
                format!("{:.1}", p.mib_per_s),
                lat(|l| l.p50_us),
                lat(|l| l.p99_us),
                lat(|l| l.max_us),
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                // Text columns left-aligned, numbers right-aligned.
                if c < 3 {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
                } else {
                    line.push_str(&format!("{cell:>w$}  ", w = widths[c]));
                }
            }
            writeln!(w, "{}", line.trim_end())?;
        }
        Ok(())
    }

    /// Per pass: files read buffered after O_DIRECT was refused, and the
    /// first error.
    fn write_notes(&self, w: &mut impl Write) -> std::io::Result<()> {
        for p in &self.passes {
            if p.buffered_fallbacks > 0 {
                writeln!(
                    w,
                    "note: {} {} {}: {} file(s) read buffered because O_DIRECT was refused.",
                    p.engine.name(),
                    p.cache.name(),
                    mode_name(p.direct),
                    p.buffered_fallbacks
                )?;
            }
            if let Some(e) = &p.first_error {
                writeln!(
                    w,
                    "note: {} {} {}: {} error(s), first: {e}",
                    p.engine.name(),
                    p.cache.name(),
                    mode_name(p.direct),
                    p.errors
                )?;
            }
        }
        Ok(())
    }
}
