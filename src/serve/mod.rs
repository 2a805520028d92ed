//! `melforge serve`: the drop-directory service.
//!
//! * [`config`]: the `[serve]` section.
//! * [`watch`]: inotify on the drop tree, initial scan, rescan on overflow.
pub mod config;
pub mod watch;
