//! `melforge serve`: the drop-directory service.
//!
//! * [`journal`]: the exactly-once record (CRC'd JSON lines, group commit).
//! * [`watch`]: inotify on the drop tree, initial scan, rescan on overflow.
//! * [`ingest`]: the long-lived reader and CPU workers.
//! * [`service`]: the loop that owns the journal and the SWMR appenders and
//!   answers the control socket and signals.
//! * [`rebuild`]: re-ingest everything into new files, then swap them in.
pub mod ingest;
pub mod journal;
pub mod rebuild;
pub mod service;
pub mod watch;

pub use service::run;
