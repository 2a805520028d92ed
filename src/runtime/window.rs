//! [`Window`]: how far a source may run ahead of an in-order consumer.
//!
//! `build` writes rows in sorted path order, so its writer holds every row
//! that arrives before its predecessors. Without a bound, one slow file (a
//! read stuck behind others, a worker descheduled on a busy machine) let the
//! rest of the pipeline pile rows up behind it: a 200k-clip build peaked
//! anywhere from 90 to 420 MB depending on such stalls. With a window the
//! source does not hand out job `id` until every job below `id − size` has
//! reached the consumer, so at most `size` rows wait, whatever the timing.
//!
//! Invariants: `low` is the smallest id not yet received; ids in
//! `low .. low + size` may be received in any order (each once); `admit(id)`
//! returns only when `id < low + size` (or the window is closed).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// See the module notes. `Sync`: one admitting thread, one receiving thread.
pub struct Window {
    size: usize,
    state: Mutex<State>,
    moved: Condvar,
}

struct State {
    /// Smallest id not yet received.
    low: usize,
    /// `received[i]`: id `low + i` has arrived (always false at the front).
    received: VecDeque<bool>,
    /// The admitting thread is blocked until `low` reaches this (notify only
    /// then): room for its id and a quarter window more, so it is woken once
    /// per batch rather than at every id received.
    wake_at: Option<usize>,
    closed: bool,
}

impl Window {
    /// A window of `size` (≥ 1) ids.
    pub fn new(size: usize) -> Window {
        let size = size.max(1);
        Window {
            size,
            state: Mutex::new(State {
                low: 0,
                received: VecDeque::with_capacity(size),
                wake_at: None,
                closed: false,
            }),
            moved: Condvar::new(),
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until `id` is inside the window; false when the window was
    /// closed instead (the consumer is gone: stop producing).
    pub fn admit(&self, id: usize) -> bool {
        let mut g = self.lock();
        while !g.closed && id >= g.low + self.size {
            // ≤ id, which `low` reaches once every admitted id is received.
            g.wake_at = Some(id + 1 + (self.size / 4).min(self.size - 1) - self.size);
            g = self
                .moved
                .wait_timeout(g, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        g.wake_at = None;
        !g.closed
    }

    /// Records that `id` reached the consumer. Ids below the window or seen
    /// before are ignored.
    pub fn received(&self, id: usize) {
        let mut g = self.lock();
        let Some(i) = id.checked_sub(g.low).filter(|&i| i < self.size) else {
            return;
        };
        if g.received.len() <= i {
            g.received.resize(i + 1, false);
        }
        g.received[i] = true;
        while g.received.front() == Some(&true) {
            g.received.pop_front();
            g.low += 1;
        }
        if g.wake_at.is_some_and(|at| g.low >= at) {
            g.wake_at = None;
            self.moved.notify_all();
        }
    }

    /// Smallest id not yet received.
    pub fn low(&self) -> usize {
        self.lock().low
    }

    /// Releases the admitting thread for good (the consumer stopped).
    pub fn close(&self) {
        self.lock().closed = true;
        self.moved.notify_all();
    }
}

/// Closes the window when dropped: the consumer's thread holds one, so the
/// source is released however the consumer ends (error, panic).
pub struct CloseOnDrop<'a>(pub &'a Window);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn admit_waits_for_the_oldest_id_not_for_the_count() {
        let w = Arc::new(Window::new(4));
        for id in 0..4 {
            assert!(w.admit(id));
        }
        // 1, 2 and 3 arrive, 0 is late: 4 must still wait.
        for id in [3, 1, 2] {
            w.received(id);
        }
        assert_eq!(w.low(), 0);
        let t = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || w.admit(4) && w.admit(7))
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(!t.is_finished(), "admitted past a missing id");
        w.received(0);
        assert!(t.join().unwrap(), "0..=3 received: 4..8 fit");
        assert_eq!(w.low(), 4);
        // Duplicates and ids below the window are ignored.
        w.received(2);
        w.received(5);
        w.received(5);
        assert_eq!(w.low(), 4);
    }

    #[test]
    fn close_releases_a_blocked_source() {
        let w = Arc::new(Window::new(1));
        assert!(w.admit(0));
        let t = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || w.admit(1))
        };
        {
            let _consumer_gone = CloseOnDrop(&w);
        }
        assert!(!t.join().unwrap());
    }

    /// Random arrival order over many ids: the source never gets more than
    /// `size` ahead of the oldest id not yet received.
    #[test]
    fn the_source_never_runs_more_than_the_window_ahead() {
        let w = Arc::new(Window::new(8));
        let n = 2000;
        let (tx, rx) = std::sync::mpsc::channel::<usize>();
        let source = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                for id in 0..n {
                    assert!(w.admit(id));
                    assert!(id < w.low() + 8);
                    tx.send(id).unwrap();
                }
            })
        };
        // The consumer takes ids in scrambled batches of up to 8.
        let mut held = Vec::new();
        let mut got = 0;
        let mut state = 12345u32;
        while got < n {
            held.push(rx.recv().unwrap());
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            if held.len() == 8 || (state >> 16).is_multiple_of(3) || got + held.len() == n {
                while let Some(id) = held.pop() {
                    w.received(id);
                    got += 1;
                }
            }
        }
        source.join().unwrap();
        assert_eq!(w.low(), n);
    }
}
