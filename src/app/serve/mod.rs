//! `melforge serve`: the drop-directory service.
//!
//! * [`journal`]: the exactly-once record (CRC'd JSON lines, group commit).
//! * [`watch`]: inotify on the drop tree, initial scan, rescan on overflow.
//! * [`service`]: the loop that owns the journal and the sink, feeds the stage
//!   graph (`crate::pipeline`, the same one `build` runs, GPU included) and
//!   answers the control socket and signals.
//! * [`status`]: the typed replies of `ctl status` and `ctl stats`.
//! * [`rebuild`]: re-ingest everything into new files, then swap them in.
pub mod journal;
pub mod rebuild;
pub mod service;
pub mod sidecar;
pub mod status;
pub mod watch;

pub use service::run;
