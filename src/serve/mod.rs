//! `melforge serve`: the drop-directory service.
//!
//! * [`watch`]: inotify on the drop tree, initial scan, rescan on overflow.
pub mod watch;
