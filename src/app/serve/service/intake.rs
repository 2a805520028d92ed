//! The serve loop's intake: every file it has taken on and not yet finished
//! (queued for the readers, or in flight through the stage graph), bounded by
//! `serve.max_queued_files`.
//!
//! Invariants:
//! * **Bounded.** At most `capacity` files are *queued* (admitted, not yet
//!   handed to the readers): [`Intake::admit`] is only called when
//!   [`Intake::is_full`] is false. Files *in flight* are bounded by the stage
//!   graph's rings, so everything the intake holds per file is bounded by
//!   the cap plus the rings, whatever the size of a burst. The one
//!   exception: after a GPU failure the files the stage held go back to the
//!   head of the queue ([`Intake::requeue_in_flight`]), which may pass the cap
//!   by those files until they are read again.
//! * **Nothing is lost when full.** A file seen while the queue is full is
//!   *deferred*: it stays in the drop directory and the intake remembers only
//!   that something was ([`Intake::defer`]). Once the queue has drained to
//!   half the cap, [`Intake::rescan_due`] says so and the loop rescans the
//!   drop tree, which offers the files in path order until the queue is full
//!   again (the rescan stops there, so each costs about half the cap in
//!   `stat`s and index lookups). Deferred files are therefore ingested in
//!   later rescans, each exactly once (the journal and [`Intake::holds`]
//!   still decide).
//! * **One job per path.** A relative path is held at most once
//!   ([`Intake::holds`]); the ids of jobs only grow.
//!
//! Memory per held file is its [`DropFile`] (two paths, split, label) plus a
//! map entry and its name in the held set: about 450 B with 30-character
//! usual path lengths (docs/OPERATIONS.md, "Sizing the intake").

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use crate::app::serve::journal::FileStamp;
use crate::writer::append::Dest;

/// One file of the drop tree on its way through the pipeline.
#[derive(Clone, Debug)]
pub(super) struct DropFile {
    pub(super) abs: PathBuf,
    /// Where its row goes (`rel` is its path relative to the drop directory).
    pub(super) dest: Dest,
    /// Size and mtime when it was offered (the journal's identity of the file).
    pub(super) stamp: FileStamp,
    /// When it was offered (the start of its drop→commit latency).
    pub(super) seen: Instant,
}

/// The files the loop holds between admission and outcome; see the module
/// documentation.
pub(super) struct Intake {
    /// Every held file by job id: queued or in flight.
    jobs: HashMap<usize, DropFile>,
    /// The queued ones, oldest first.
    queue: VecDeque<usize>,
    /// The relative paths of `jobs`.
    held: HashSet<String>,
    next_id: usize,
    capacity: usize,
    /// A file was deferred since the last rescan started.
    deferred: bool,
    /// Files deferred since the start (a file seen twice counts twice).
    deferred_total: u64,
}

impl Intake {
    /// An empty intake that queues at most `capacity` (≥ 1) files.
    pub(super) fn new(capacity: usize) -> Intake {
        assert!(capacity >= 1, "validated: serve.max_queued_files >= 1");
        Intake {
            jobs: HashMap::new(),
            queue: VecDeque::new(),
            held: HashSet::new(),
            next_id: 0,
            capacity,
            deferred: false,
            deferred_total: 0,
        }
    }

    /// Whether `rel` is queued or in flight.
    pub(super) fn holds(&self, rel: &str) -> bool {
        self.held.contains(rel)
    }

    /// Whether the queue has no room for another file.
    pub(super) fn is_full(&self) -> bool {
        self.queue.len() >= self.capacity
    }

    /// Notes a file seen while the queue was full: it stays in the drop
    /// directory for a later rescan.
    pub(super) fn defer(&mut self) {
        self.deferred = true;
        self.deferred_total += 1;
    }

    /// Whether files were deferred and the queue has drained to half the cap:
    /// time for a rescan.
    pub(super) fn rescan_due(&self) -> bool {
        self.deferred && self.queue.len() <= self.capacity / 2
    }

    /// A rescan starts: it sees every deferred file again (and defers anew
    /// what does not fit).
    pub(super) fn rescan_started(&mut self) {
        self.deferred = false;
    }

    /// Queues `file` (the queue must not be full); returns its job id.
    pub(super) fn admit(&mut self, file: DropFile) -> usize {
        assert!(!self.is_full(), "admitted into a full intake");
        let id = self.next_id;
        self.next_id += 1;
        let fresh = self.held.insert(file.dest.rel.clone());
        debug_assert!(fresh, "{} admitted twice", file.dest.rel);
        self.jobs.insert(id, file);
        self.queue.push_back(id);
        id
    }

    /// The oldest queued job: its id and path.
    pub(super) fn front(&self) -> Option<(usize, &PathBuf)> {
        let &id = self.queue.front()?;
        Some((id, &self.jobs[&id].abs))
    }

    /// The oldest queued job was handed to the readers: it is in flight.
    pub(super) fn started_front(&mut self) {
        self.queue.pop_front();
    }

    /// Takes job `id` off the intake (its outcome came back, or was
    /// discarded); `None` for an id it does not hold.
    pub(super) fn take(&mut self, id: usize) -> Option<DropFile> {
        let file = self.jobs.remove(&id)?;
        self.held.remove(&file.dest.rel);
        Some(file)
    }

    /// Takes every queued job off the intake (shutdown, a rebuild's swap);
    /// their files stay in the drop directory. Returns their paths, oldest
    /// first.
    pub(super) fn take_queued(&mut self) -> Vec<PathBuf> {
        let ids = std::mem::take(&mut self.queue);
        let paths = ids
            .into_iter()
            .filter_map(|id| self.take(id).map(|f| f.abs))
            .collect();
        self.shrink();
        paths
    }

    /// Puts every in-flight job back at the head of the queue, in the order
    /// they were admitted (a failed stage graph will not answer for them);
    /// returns how many.
    pub(super) fn requeue_in_flight(&mut self) -> usize {
        let queued: HashSet<usize> = self.queue.iter().copied().collect();
        let mut held: Vec<usize> = self
            .jobs
            .keys()
            .copied()
            .filter(|id| !queued.contains(id))
            .collect();
        held.sort_unstable();
        for &id in held.iter().rev() {
            self.queue.push_front(id);
        }
        held.len()
    }

    /// A new cap (a reload); files queued beyond it, newest first, leave the
    /// queue and are deferred (they stay in the drop directory).
    pub(super) fn set_capacity(&mut self, capacity: usize) {
        assert!(capacity >= 1, "validated: serve.max_queued_files >= 1");
        self.capacity = capacity;
        while self.queue.len() > capacity {
            let id = self.queue.pop_back().expect("longer than the cap");
            let _left = self.take(id);
            self.defer();
        }
    }

    /// Files queued, not yet handed to the readers.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Files handed to the readers, not yet written or rejected.
    pub(super) fn in_flight(&self) -> usize {
        self.jobs.len() - self.queue.len()
    }

    /// The cap on [`Intake::queued`].
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Files deferred since the start.
    pub(super) fn deferred_total(&self) -> u64 {
        self.deferred_total
    }

    /// Hands back the tables' memory once they are empty (after a burst
    /// they keep the capacity it needed, which the cap bounds anyway).
    fn shrink(&mut self) {
        if self.jobs.is_empty() {
            self.jobs.shrink_to_fit();
            self.held.shrink_to_fit();
            self.queue.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rel: &str) -> DropFile {
        DropFile {
            abs: PathBuf::from("/drop").join(rel),
            dest: Dest {
                rel: rel.into(),
                split: "TRAINING".into(),
                label: None,
                meta: None,
            },
            stamp: FileStamp {
                size: 1,
                mtime_ns: 2,
            },
            seen: Instant::now(),
        }
    }

    /// The queue never passes the cap; a file seen while full is deferred,
    /// and a rescan is due only once the queue drained to half the cap.
    #[test]
    fn the_cap_holds_and_a_rescan_is_due_once_half_drained() {
        let mut intake = Intake::new(4);
        for i in 0..4 {
            assert!(!intake.is_full());
            intake.admit(file(&format!("f{i}.wav")));
        }
        assert!(intake.is_full());
        intake.defer();
        assert_eq!(intake.deferred_total(), 1);
        assert!(!intake.rescan_due(), "nothing drained yet");
        intake.started_front();
        assert!(!intake.rescan_due(), "3 queued of 4: not half drained");
        intake.started_front();
        assert!(intake.rescan_due());
        assert_eq!((intake.queued(), intake.in_flight()), (2, 2));
        intake.rescan_started();
        assert!(!intake.rescan_due(), "the rescan sees the deferred files");
    }

    /// A path is held until its job is taken; taking an unknown id is
    /// nothing.
    #[test]
    fn a_path_is_held_from_admission_to_outcome() {
        let mut intake = Intake::new(8);
        let id = intake.admit(file("a.wav"));
        assert!(intake.holds("a.wav"));
        intake.started_front();
        assert!(intake.take(id + 1).is_none());
        assert_eq!(intake.take(id).unwrap().dest.rel, "a.wav");
        assert!(!intake.holds("a.wav"));
        assert_eq!((intake.queued(), intake.in_flight()), (0, 0));
    }

    /// In-flight jobs go back to the head of the queue in admission order,
    /// ahead of the files still queued.
    #[test]
    fn in_flight_jobs_are_requeued_first_in_order() {
        let mut intake = Intake::new(8);
        for i in 0..5 {
            intake.admit(file(&format!("f{i}.wav")));
        }
        for _ in 0..3 {
            intake.started_front();
        }
        assert_eq!(intake.requeue_in_flight(), 3);
        let order: Vec<String> = std::iter::from_fn(|| {
            let (id, _) = intake.front()?;
            intake.started_front();
            intake.take(id).map(|f| f.dest.rel)
        })
        .collect();
        assert_eq!(order, ["f0.wav", "f1.wav", "f2.wav", "f3.wav", "f4.wav"]);
    }

    /// A lower cap sends the newest queued files back to the drop directory
    /// (deferred); the held set forgets them.
    #[test]
    fn a_lower_cap_defers_the_newest_queued_files() {
        let mut intake = Intake::new(8);
        for i in 0..6 {
            intake.admit(file(&format!("f{i}.wav")));
        }
        intake.started_front();
        intake.set_capacity(2);
        assert_eq!((intake.queued(), intake.in_flight()), (2, 1));
        assert!(intake.holds("f2.wav") && !intake.holds("f3.wav"));
        assert_eq!(intake.deferred_total(), 3);
        assert!(intake.is_full());
    }

    /// Taking the queue leaves the in-flight jobs held.
    #[test]
    fn take_queued_keeps_the_files_in_flight() {
        let mut intake = Intake::new(8);
        for i in 0..3 {
            intake.admit(file(&format!("f{i}.wav")));
        }
        intake.started_front();
        let paths = intake.take_queued();
        assert_eq!(
            paths,
            [PathBuf::from("/drop/f1.wav"), "/drop/f2.wav".into()]
        );
        assert!(intake.holds("f0.wav"));
        assert_eq!((intake.queued(), intake.in_flight()), (0, 1));
    }
}
