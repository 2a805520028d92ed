//! The process's start-up clock: one `Instant` taken as `main` begins
//! ([`mark_process_start`]), against which start-up steps are reported
//! (`build --json`'s `startup_s`: how long after process start the first read
//! was submitted). A library caller that never marks it gets the instant of
//! the first question instead.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Instant> = OnceLock::new();

/// Records now as the process's start (first call wins); `main` calls it
/// before anything else.
pub fn mark_process_start() {
    START.get_or_init(Instant::now);
}

/// The instant [`mark_process_start`] recorded (or now, on the first call
/// when it was never made).
pub fn process_start() -> Instant {
    *START.get_or_init(Instant::now)
}
