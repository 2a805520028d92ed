//! How a running `build` shows its progress: nothing, an indicatif bar on a
//! terminal, or machine-readable events (`--progress json`), one JSON object
//! per line on stderr, for the Python API and any orchestrator.
//!
//! A JSON event (every half second, once at the start and once at the end):
//!
//! ```json
//! {"event":"progress","files_done":1200,"files_total":20000,"rejected":3,
//!  "bytes_read":98304000,"elapsed_s":1.52,"files_per_s":789.5,"eta_s":23.8}
//! ```
//!
//! `files_done` counts rejected files too; `files_per_s` is the mean since the
//! start; `eta_s` is `null` until a file is done. The field set is a contract
//! (python/melforge/_build.py parses it; tests/it/progress.rs pins it): add
//! fields, never rename or remove one.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::runtime::telemetry::Telemetry;

/// Which progress display a build draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// None (not a terminal, or a caller that shows its own).
    #[default]
    None,
    /// An indicatif bar on stderr.
    Bar,
    /// One [`Event`] per line on stderr.
    Json,
}

/// One machine-readable progress event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// Always "progress".
    pub event: &'static str,
    pub files_done: u64,
    pub files_total: u64,
    pub rejected: u64,
    pub bytes_read: u64,
    pub elapsed_s: f64,
    pub files_per_s: f64,
    pub eta_s: Option<f64>,
}

impl Event {
    /// The event for `done` of `total` files after `elapsed`.
    pub fn new(done: u64, total: u64, rejected: u64, bytes_read: u64, elapsed: Duration) -> Event {
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let eta_s = (rate > 0.0).then(|| total.saturating_sub(done) as f64 / rate);
        Event {
            event: "progress",
            files_done: done,
            files_total: total,
            rejected,
            bytes_read,
            elapsed_s: secs,
            files_per_s: rate,
            eta_s,
        }
    }
}

/// Interval between JSON events.
const JSON_EVERY: Duration = Duration::from_millis(500);

/// The display of one running build; call [`Reporter::tick`] from the
/// supervising loop and [`Reporter::finish`] at the end.
pub struct Reporter {
    mode: Progress,
    total: u64,
    started: Instant,
    last_event: Option<Instant>,
    bar: Option<indicatif::ProgressBar>,
}

impl Reporter {
    pub fn start(mode: Progress, total: u64, started: Instant) -> Reporter {
        Reporter {
            mode,
            total,
            started,
            last_event: None,
            bar: (mode == Progress::Bar).then(|| bar(total)),
        }
    }

    /// How long the supervising loop may sleep between ticks.
    pub fn poll_interval(&self) -> Duration {
        match self.mode {
            Progress::None => Duration::from_millis(20),
            Progress::Bar | Progress::Json => Duration::from_millis(100),
        }
    }

    /// Updates the display from the published telemetry.
    pub fn tick(&mut self, t: &Telemetry) {
        match self.mode {
            Progress::None => {}
            Progress::Bar => {
                if let Some(b) = &self.bar {
                    b.set_position(t.files_done());
                }
            }
            Progress::Json => {
                if self.last_event.is_none_or(|l| l.elapsed() >= JSON_EVERY) {
                    self.emit(t);
                }
            }
        }
    }

    /// The final update: the bar is cleared, a last JSON event is written.
    pub fn finish(mut self, t: &Telemetry) {
        match self.mode {
            Progress::None => {}
            Progress::Bar => {
                if let Some(b) = self.bar.take() {
                    b.set_position(t.files_done());
                    b.finish_and_clear();
                }
            }
            Progress::Json => self.emit(t),
        }
    }

    fn emit(&mut self, t: &Telemetry) {
        self.last_event = Some(Instant::now());
        let e = Event::new(
            t.files_done(),
            self.total,
            t.files_rejected(),
            t.bytes_read(),
            self.started.elapsed(),
        );
        // One write per line, so lines never interleave with log lines; a
        // closed stderr is not worth failing the build for.
        if let Ok(mut line) = serde_json::to_vec(&e) {
            line.push(b'\n');
            let _ = std::io::stderr().lock().write_all(&line);
        }
    }
}

fn bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} files ({per_sec}, eta {eta})",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_has_rate_and_eta_once_files_are_done() {
        let e = Event::new(250, 1000, 2, 4096, Duration::from_secs(2));
        assert_eq!(e.files_per_s, 125.0);
        assert_eq!(e.eta_s, Some(6.0));
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "progress");
        assert_eq!(v["rejected"], 2);
    }

    #[test]
    fn event_has_no_eta_before_the_first_file() {
        let e = Event::new(0, 1000, 0, 0, Duration::from_millis(300));
        assert_eq!(e.eta_s, None);
        assert!(serde_json::to_value(&e).unwrap()["eta_s"].is_null());
    }
}
