//! What every stage runs on: the rings between them ([`ring`]), the reorder
//! bound of an in-order consumer ([`window`]), thread
//! placement ([`pin`]), typed counters ([`telemetry`]), the process's
//! start-up clock ([`clock`]), durable file-system changes ([`durable`]) and the raw system
//! calls the rest of the program reaches only through safe wrappers ([`sys`]).

pub mod clock;
/// fsyncs of files and directories, durable moves.
pub mod durable;
pub mod pin;
pub mod ring;
/// Raw libc calls (signals, poll, flock, SO_PEERCRED, mmap, fadvise, …) as
/// safe `io::Result` wrappers; the io_uring engine and CUDA FFI keep theirs.
pub mod sys;
pub mod telemetry;
pub mod window;
