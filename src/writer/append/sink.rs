//! serve's sink, [`AppendSink`]: the one [`Sink`] of the append path. It is
//! what the serve loop holds and delivers to; every HDF5 call runs on a
//! thread of its own named `append`, which owns the split files
//! ([`Splits`]), so the loop thread stays free for the watch, the journal
//! and the stage graph. The handle does what a sink answers for (the split
//! is open, the row's length, the row's index) before the row leaves the
//! loop; the thread only writes.
//!
//! Why a thread: at 10,000 files/s on the 2-core dev VM, writing rows into
//! HDF5 (the copy into the chunk buffer, the `pwrite` of each whole chunk,
//! the heap of path strings) and the flushes were 55 % of the loop thread's
//! time (`perf`, docs/BENCHMARKS.md "serve's appends on their own thread").
//! Why one: every HDF5 call takes the library's one global lock, so a second
//! append thread could not write at the same time as the first.
//!
//! What the loop relies on:
//! * **Same order, same indices.** Commands run in the order they are sent.
//!   A row's index is known at once: the handle counts rows per split from
//!   the count the split's open reported, as [`super::Appender::append`] does.
//! * **Flush is a barrier.** [`AppendSink::flush`] returns once every row
//!   sent before it is written, flushed and synced: [`AppendSink::flush`]'s
//!   promise, so the journal may commit those rows afterwards.
//!   [`AppendSink::start_flush`] asks for the same barrier without waiting
//!   (the loop goes on taking rows, which the flush does not cover), and
//!   [`AppendSink::flushed`] says when it has answered: the `fdatasync` of
//!   a split file took 4–10 ms per flush on the dev VM, a time the loop spent
//!   blocked while the stage graph's outcome ring filled.
//! * **Errors are deferred, never lost.** A row that fails on the thread (a
//!   full disk, EIO) marks the thread failed: later rows are dropped and the
//!   next call that waits for the thread (flush, open, close) returns the
//!   error. serve then degrades, which forgets every row since the last
//!   commit, so learning of the error a flush later changes nothing that
//!   counts (those rows were never confirmed).
//! * **Bounded.** At most [`QUEUE`] rows wait for the thread; a loop that
//!   outruns the disk blocks on the send, and the stage graph behind it
//!   waits for its outcome ring to drain.
//! * **Teardown joins.** Dropping the handle ends the thread and waits for it,
//!   so the next sink never opens a file this one still holds.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use super::splits::{Dest, Splits};
use crate::config::Config;
use crate::frames::RowLayout;
use crate::model::Refusal;
use crate::runtime::telemetry::{Local, Stage, Telemetry};
use crate::writer::{Error, Placed, RowPieces, Sink, Streamed};

/// Rows (and other commands) that may wait for the append thread: with the
/// default row shape about 7.8 MB, four chunks of the default 64 rows.
pub const QUEUE: usize = 256;

/// The append thread's answer to a row in pieces.
type PieceReply = Result<Result<usize, Refusal>, Error>;

/// What the loop asks of the append thread.
enum Cmd {
    Open {
        split: String,
        confirmed: usize,
    },
    Append {
        /// Boxed: the command stays small with the row's sums beside it.
        dest: Box<Dest>,
        row: Vec<f32>,
        /// The row's CMVN sums from its worker (None: summed there).
        stats: Option<crate::cmvn::RowStats>,
    },
    /// Answered on its own channel: the row's index, or why it was refused.
    AppendPieces {
        dest: Dest,
        row: Box<dyn RowPieces>,
    },
    Flush,
    CloseAll,
    AbandonAll,
}

/// The serve loop's handle on the append thread; see the module documentation.
pub struct AppendSink {
    tx: Option<SyncSender<Cmd>>,
    replies: Receiver<Result<usize, Error>>,
    /// The answers to [`Cmd::AppendPieces`].
    piece_replies: Receiver<PieceReply>,
    /// Row buffers the thread is done with, for [`Sink::write`]'s `recycle`.
    back: Arc<ArrayQueue<Vec<f32>>>,
    thread: Option<JoinHandle<()>>,
    /// Rows per open split, as the loop has sent them (written or not).
    rows: HashMap<String, usize>,
    /// The fixed row length of the librosa layout; `None` under a frame
    /// recipe, whose rows keep their own length (the store checks them).
    row_len: Option<usize>,
    /// A [`AppendSink::start_flush`] not yet answered.
    flush_pending: bool,
    /// Its answer, when a later call had to take it off the reply channel.
    flush_answer: Option<Result<(), Error>>,
}

impl AppendSink {
    /// Starts the thread with [`Splits::new`]'s split table; its write time is
    /// charged to [`Stage::Write`] in `telemetry`.
    /// `layout` is the recipe's, as the caller built it once for the
    /// splits and the row checks (serve: its pipeline's recipe).
    pub fn new(
        output_dir: &Path,
        (cfg, layout): (&Config, RowLayout),
        input: &Path,
        telemetry: Arc<Telemetry>,
    ) -> Result<AppendSink, Error> {
        let row_len = match &layout {
            RowLayout::Fixed(spec) => Some(spec.row_len()),
            RowLayout::Frames(_) => None,
        };
        let splits = Splits::new(output_dir, (cfg, layout), input);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let (reply_tx, replies) = mpsc::sync_channel(1);
        let (piece_tx, piece_replies) = mpsc::sync_channel(1);
        let back = Arc::new(ArrayQueue::new(QUEUE));
        let thread_back = Arc::clone(&back);
        let thread = std::thread::Builder::new()
            .name("append".into())
            .spawn(move || {
                let replies = (&reply_tx, &piece_tx);
                serve_commands(splits, &rx, replies, &thread_back, &telemetry)
            })
            .map_err(|source| Error::Io {
                path: output_dir.to_path_buf(),
                action: "start the append thread for",
                source,
            })?;
        Ok(AppendSink {
            tx: Some(tx),
            replies,
            piece_replies,
            back,
            thread: Some(thread),
            rows: HashMap::new(),
            row_len,
            flush_pending: false,
            flush_answer: None,
        })
    }

    /// [`AppendSink::open`] on the thread, unless `split` is open already.
    pub fn open(&mut self, split: &str, confirmed: usize) -> Result<(), Error> {
        if self.rows.contains_key(split) {
            return Ok(());
        }
        let rows = self.call(Cmd::Open {
            split: split.to_string(),
            confirmed,
        })?;
        self.rows.insert(split.to_string(), rows);
        Ok(())
    }

    /// [`AppendSink::flush`] of every row sent so far (after the answer of
    /// a flush started earlier, whose error it returns first).
    pub fn flush(&mut self) -> Result<(), Error> {
        self.start_flush()?;
        self.wait_flushed().unwrap_or(Ok(()))
    }

    /// Asks for [`AppendSink::flush`] of every row sent so far without
    /// waiting; [`AppendSink::flushed`] gives the answer. At most one is
    /// outstanding: a second waits for the first.
    pub fn start_flush(&mut self) -> Result<(), Error> {
        if let Some(earlier) = self.wait_flushed() {
            earlier?;
        }
        self.send(Cmd::Flush)?;
        self.flush_pending = true;
        Ok(())
    }

    /// The answer of the flush [`AppendSink::start_flush`] asked for, once
    /// it has come (`None`: none asked for, or not yet answered).
    pub fn flushed(&mut self) -> Option<Result<(), Error>> {
        if let Some(a) = self.flush_answer.take() {
            return Some(a);
        }
        if !self.flush_pending {
            return None;
        }
        match self.replies.try_recv() {
            Ok(r) => {
                self.flush_pending = false;
                Some(r.map(drop))
            }
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                self.flush_pending = false;
                Some(Err(self.stopped()))
            }
        }
    }

    /// Waits for the answer of a started flush (`None`: none outstanding).
    pub fn wait_flushed(&mut self) -> Option<Result<(), Error>> {
        if let Some(a) = self.flush_answer.take() {
            return Some(a);
        }
        if !std::mem::take(&mut self.flush_pending) {
            return None;
        }
        Some(match self.replies.recv() {
            Ok(r) => r.map(drop),
            Err(_) => Err(self.stopped()),
        })
    }

    /// [`AppendSink::close_all`]; a thread that failed abandons the files
    /// instead and returns its error.
    pub fn close_all(&mut self) -> Result<(), Error> {
        self.rows.clear();
        self.call(Cmd::CloseAll).map(drop)
    }

    /// [`AppendSink::abandon_all`]; clears a failure, and the answer of a
    /// started flush, so the handle can open the files again.
    pub fn abandon_all(&mut self) {
        self.rows.clear();
        let _forgotten = self.wait_flushed();
        if let Err(e) = self.call(Cmd::AbandonAll) {
            tracing::warn!(error = %e, "The append thread could not abandon its files.");
        }
    }

    /// Rows per split (sent, not necessarily written or flushed).
    pub fn rows(&self) -> BTreeMap<String, usize> {
        self.rows.iter().map(|(s, n)| (s.clone(), *n)).collect()
    }

    fn send(&mut self, cmd: Cmd) -> Result<(), Error> {
        let sent = self.tx.as_ref().map(|tx| tx.send(cmd));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.stopped()),
        }
    }

    /// Sends `cmd` and waits for its answer (keeping a started flush's
    /// answer, which comes first, for [`AppendSink::flushed`]).
    ///
    /// The thread answers a failure with its cause once, then with
    /// [`Error::Failed`]. When the kept flush answer took the cause, this
    /// call returns the cause and leaves `Failed` for the flush: the caller
    /// acts on this call's error, and "failed earlier" would hide why (a
    /// full disk seen by serve as a bare failure; `it::serve::faults` found
    /// it in one CI run of several).
    fn call(&mut self, cmd: Cmd) -> Result<usize, Error> {
        self.send(cmd)?;
        if self.flush_pending {
            self.flush_answer = self.wait_flushed();
        }
        let r = match self.replies.recv() {
            Ok(r) => r,
            Err(_) => Err(self.stopped()),
        };
        if matches!(r, Err(Error::Failed))
            && let Some(Err(cause)) = self.flush_answer.take_if(|a| a.is_err())
        {
            self.flush_answer = Some(Err(Error::Failed));
            return Err(cause);
        }
        r
    }

    /// The error for a thread that is gone (it panicked): joins it for the
    /// panic's message.
    fn stopped(&mut self) -> Error {
        self.tx = None;
        let why = match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into()),
            _ => "it had stopped".into(),
        };
        crate::writer::PlanError::AppendThread { why }.into()
    }
}

impl Drop for AppendSink {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!(
                "The append thread panicked; its files are recovered at the next open."
            );
        }
    }
}

impl Sink for AppendSink {
    type File = Dest;

    fn write(
        &mut self,
        file: &Dest,
        row: Vec<f32>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error> {
        self.write_with_stats(file, row, None, recycle)
    }

    /// The row and its CMVN sums go to the append thread, which adds them
    /// to the split's statistics (`writer::append::cmvn`).
    fn write_with_stats(
        &mut self,
        file: &Dest,
        row: Vec<f32>,
        stats: Option<crate::cmvn::RowStats>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error> {
        let Some(&index) = self.rows.get(&file.split) else {
            return Err(super::splits::not_opened(&file.split));
        };
        if let Some(expected) = self.row_len
            && row.len() != expected
        {
            return Err(Error::RowLength {
                split: file.split.clone(),
                seq: index,
                got: row.len(),
                expected,
            });
        }
        self.send(Cmd::Append {
            dest: Box::new(file.clone()),
            row,
            stats,
        })?;
        *self.rows.get_mut(&file.split).expect("checked above") += 1;
        while let Some(r) = self.back.pop() {
            recycle.push(r);
        }
        Ok(Placed::At { index })
    }

    /// Waits for the append thread to write the whole row (serve's loop is
    /// held meanwhile: a row in pieces is a recording too long to read
    /// whole, computed while it is appended).
    fn write_pieces(
        &mut self,
        file: &Dest,
        row: Box<dyn RowPieces>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Streamed, Error> {
        let Some(&index) = self.rows.get(&file.split) else {
            return Err(super::splits::not_opened(&file.split));
        };
        if self.row_len.is_some() {
            return Err(Error::PiecesOfFixedRow {
                split: file.split.clone(),
                seq: index,
            });
        }
        self.send(Cmd::AppendPieces {
            dest: file.clone(),
            row,
        })?;
        let reply = match self.piece_replies.recv() {
            Ok(r) => r?,
            Err(_) => return Err(self.stopped()),
        };
        while let Some(r) = self.back.pop() {
            recycle.push(r);
        }
        match reply {
            Ok(_) => {
                *self.rows.get_mut(&file.split).expect("checked above") += 1;
                Ok(Streamed::Written(Placed::At { index }))
            }
            Err(refusal) => Ok(Streamed::Refused(refusal)),
        }
    }

    fn skip(&mut self, _file: &Dest, _recycle: &mut Vec<Vec<f32>>) -> Result<(), Error> {
        // Rows are in arrival order: a rejected file leaves no gap to close.
        Ok(())
    }
}

/// The append thread: runs commands until the handle is dropped.
fn serve_commands(
    mut sink: Splits,
    rx: &Receiver<Cmd>,
    (replies, piece_replies): (&SyncSender<Result<usize, Error>>, &SyncSender<PieceReply>),
    back: &ArrayQueue<Vec<f32>>,
    telemetry: &Telemetry,
) {
    let mut local = Local::serial(telemetry, "append");
    // `Some` once a row failed: the error, until a waiting call takes it.
    let mut failure: Option<Option<Error>> = None;
    for cmd in rx {
        let reply = match cmd {
            Cmd::Append { dest, row, stats } => {
                if failure.is_some() {
                    let _full = back.push(row);
                    continue;
                }
                let r = local.time(Stage::Write, || sink.append(&dest, &row, stats));
                let _full = back.push(row);
                if let Err(e) = r {
                    failure = Some(Some(e));
                }
                continue;
            }
            Cmd::AppendPieces { dest, mut row } => {
                let r = taken(&mut failure).and_then(|()| {
                    let mut piece = back.pop().unwrap_or_default();
                    let r = local.time(Stage::Write, || {
                        sink.append_pieces(&dest, row.as_mut(), &mut piece)
                    });
                    let _full = back.push(piece);
                    r
                });
                if piece_replies.send(r).is_err() {
                    break;
                }
                continue;
            }
            Cmd::Open { split, confirmed } => taken(&mut failure).and_then(|()| {
                sink.open(&split, confirmed)?;
                Ok(sink.rows().get(&split).copied().unwrap_or(confirmed))
            }),
            Cmd::Flush => taken(&mut failure).and_then(|()| {
                local.time(Stage::Write, || sink.flush())?;
                local.publish(telemetry);
                Ok(0)
            }),
            Cmd::CloseAll => match taken(&mut failure) {
                Ok(()) => sink.close_all().map(|()| 0),
                Err(e) => {
                    // Rows after the failure were never written: nothing of
                    // this run's last rows is worth a flush.
                    sink.abandon_all();
                    failure = None;
                    Err(e)
                }
            },
            Cmd::AbandonAll => {
                sink.abandon_all();
                failure = None;
                Ok(0)
            }
        };
        if replies.send(reply).is_err() {
            break;
        }
    }
    local.publish(telemetry);
}

/// `Ok` when no row failed; else the failure (the first time it is asked
/// for) or [`Error::Failed`] (after that).
fn taken(failure: &mut Option<Option<Error>>) -> Result<(), Error> {
    match failure {
        None => Ok(()),
        Some(e) => Err(e.take().unwrap_or(Error::Failed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(i: usize, rel: String) -> Dest {
        Dest {
            rel,
            split: "TRAINING".into(),
            label: Some(
                if i.is_multiple_of(2) {
                    "LEAK"
                } else {
                    "NOLEAK"
                }
                .into(),
            ),
            meta: None,
        }
    }

    fn row(cfg: &Config, i: usize) -> Vec<f32> {
        (0..cfg.spec.row_len())
            .map(|k| -80.0 + (i * 7 + k % 13) as f32 * 0.5)
            .collect()
    }

    /// Sends row `i` of the test data for the TRAINING file `rel`; where
    /// the handle placed it.
    fn put(t: &mut AppendSink, cfg: &Config, i: usize, rel: String) -> Placed {
        t.write(&dest(i, rel), row(cfg, i), &mut Vec::new())
            .unwrap()
    }

    fn start(out: &Path, cfg: &Config) -> AppendSink {
        let layout = crate::recipes::build(cfg).unwrap().layout().clone();
        AppendSink::new(out, (cfg, layout), Path::new("/drop"), Arc::default()).unwrap()
    }

    fn rows_of(path: &Path) -> (Vec<f32>, Vec<String>, Vec<i32>) {
        let f = hdf5::File::open(path).unwrap();
        let mel = f.dataset("mel").unwrap().read_raw::<f32>().unwrap();
        let paths = super::super::tests::strings(&f, "path");
        let labels = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
        (mel, paths, labels)
    }

    /// Indices come back at once and match the file; the flush is a barrier
    /// (every row sent before it is in the file after it); row buffers come
    /// back for reuse.
    #[test]
    fn rows_sent_to_the_thread_land_at_the_indices_it_returned() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut t = start(d.path(), &cfg);
        t.open("TRAINING", 0).unwrap();
        let n = 3 * cfg.output.chunk_files + 5;
        let mut recycled = Vec::new();
        for i in 0..n {
            let rel = format!("TRAINING/f{i}.wav");
            let placed = t.write(&dest(i, rel), row(&cfg, i), &mut recycled);
            assert_eq!(placed.unwrap(), Placed::At { index: i });
        }
        t.flush().unwrap();
        assert_eq!(t.rows()["TRAINING"], n);
        // The thread took every row before the flush answered.
        t.write(
            &dest(n, "TRAINING/last.wav".into()),
            row(&cfg, n),
            &mut recycled,
        )
        .unwrap();
        assert!(
            recycled.len() >= n,
            "only {} of {n} row buffers came back",
            recycled.len()
        );
        t.close_all().unwrap();
        drop(t);

        let (mel, paths, labels) = rows_of(&d.path().join("TRAINING.h5"));
        let want: Vec<f32> = (0..=n).flat_map(|i| row(&cfg, i)).collect();
        assert_eq!(mel, want);
        assert_eq!(paths.len(), n + 1);
        assert_eq!(paths[7], "TRAINING/f7.wav");
        assert_eq!(paths[n], "TRAINING/last.wav");
        assert_eq!(&labels[..4], &[0, 1, 0, 1]);
    }

    /// A row the thread cannot write (here a path with a NUL byte) fails the
    /// thread: the next flush says why, later rows are dropped, nothing after
    /// the last good flush is trusted, and after `abandon_all` the split
    /// reopens at the confirmed count.
    #[test]
    fn a_row_that_fails_on_the_thread_is_reported_at_the_next_flush() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut t = start(d.path(), &cfg);
        t.open("TRAINING", 0).unwrap();
        for i in 0..10 {
            put(&mut t, &cfg, i, format!("TRAINING/f{i}.wav"));
        }
        t.flush().unwrap();
        for i in 10..13 {
            put(&mut t, &cfg, i, format!("TRAINING/f{i}.wav"));
        }
        // Accepted by the handle: only the appender checks paths.
        put(&mut t, &cfg, 13, "TRAINING/bad\0.wav".into());
        put(&mut t, &cfg, 14, "TRAINING/f14.wav".into());
        let err = t.flush().unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
        assert!(matches!(t.flush(), Err(Error::Failed)));
        assert!(matches!(t.open("VALIDATION", 0), Err(Error::Failed)));

        t.abandon_all();
        assert!(t.rows().is_empty());
        t.open("TRAINING", 10).unwrap();
        assert_eq!(t.rows()["TRAINING"], 10);
        let placed = put(&mut t, &cfg, 10, "TRAINING/again.wav".into());
        assert_eq!(placed, Placed::At { index: 10 });
        t.close_all().unwrap();
        drop(t);

        let (mel, paths, _) = rows_of(&d.path().join("TRAINING.h5"));
        assert_eq!(paths.len(), 11);
        assert_eq!(paths[10], "TRAINING/again.wav");
        assert_eq!(mel.len(), 11 * cfg.spec.row_len());
    }

    /// A started flush answers through `flushed` even when a later call
    /// (here a new split's open) took its answer off the channel first; a
    /// failure before it comes back as its answer; `flush` waits for it.
    #[test]
    fn a_started_flush_answers_once_whatever_call_comes_next() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut t = start(d.path(), &cfg);
        assert!(t.flushed().is_none(), "no flush was started");
        t.open("TRAINING", 0).unwrap();
        put(&mut t, &cfg, 0, "TRAINING/a.wav".into());
        t.start_flush().unwrap();
        t.open("VALIDATION", 0).unwrap();
        assert!(matches!(t.flushed(), Some(Ok(()))));
        assert!(t.flushed().is_none(), "answered twice");

        put(&mut t, &cfg, 1, "TRAINING/b\0.wav".into());
        t.start_flush().unwrap();
        let answer = loop {
            if let Some(a) = t.flushed() {
                break a;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert!(answer.unwrap_err().to_string().contains("NUL"));
        t.start_flush().unwrap();
        assert!(matches!(t.flush(), Err(Error::Failed)));
        t.abandon_all();
        assert!(t.flushed().is_none(), "abandon_all forgets a started flush");
        t.open("TRAINING", 1).unwrap();
        assert_eq!(t.rows()["TRAINING"], 1);
    }

    /// A call that comes after a started flush took a failure's cause (the
    /// flush is answered first) returns that cause, not "failed earlier":
    /// serve degrades on the call's error and reports it.
    #[test]
    fn a_call_after_a_started_flush_returns_the_failures_cause() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut t = start(d.path(), &cfg);
        t.open("TRAINING", 0).unwrap();
        put(&mut t, &cfg, 0, "TRAINING/b\0.wav".into());
        t.start_flush().unwrap();
        let err = t.open("VALIDATION", 0).unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
        assert!(matches!(t.flushed(), Some(Err(Error::Failed))));
        t.abandon_all();
        t.open("TRAINING", 0).unwrap();
        assert_eq!(t.rows()["TRAINING"], 0);
    }

    /// Closing a failed thread does not flush the rows after the failure; it
    /// abandons the files and returns the error.
    #[test]
    fn close_all_after_a_failed_row_abandons_and_says_why() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config::default();
        let mut t = start(d.path(), &cfg);
        t.open("TRAINING", 0).unwrap();
        put(&mut t, &cfg, 0, "TRAINING/a.wav".into());
        t.flush().unwrap();
        put(&mut t, &cfg, 1, "TRAINING/b\0.wav".into());
        put(&mut t, &cfg, 2, "TRAINING/c.wav".into());
        assert!(t.close_all().unwrap_err().to_string().contains("NUL"));
        drop(t);
        let (_, paths, _) = rows_of(&d.path().join("TRAINING.h5"));
        assert_eq!(paths, vec!["TRAINING/a.wav".to_string()]);
    }
}
