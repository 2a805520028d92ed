//! [`Probe`]: the backend choice ([`super::select`]) made on a thread of its
//! own, so the device probe overlaps the walk and the first reads.
//!
//! With `auto` or `cuda` the choice needs the CUDA driver: loading libcuda,
//! `cuInit`, and a test open of the device with the kernels (so a CUBIN the
//! driver refuses still lets `auto` pick the CPU). On an H100 box that took
//! 0.5–1.5 s, before any read was submitted. A build starts the probe first,
//! walks its input meanwhile, starts the readers without waiting for it
//! (`pipeline::Pipeline::start_reading`), and joins it only to start the
//! compute stage (`pipeline::Pipeline::start_compute`). `compute.backend =
//! "cpu"` needs no probe: the choice is made at once, on the caller's thread.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Choice, Error, select};
use crate::config::Backend;

type Answer = (Result<Choice, Error>, Duration);

/// A backend choice being made (or made).
pub struct Probe {
    /// The probe thread, until it has been joined.
    thread: Option<JoinHandle<Answer>>,
    /// Its answer, once joined (or made inline).
    answer: Option<Answer>,
}

impl Probe {
    /// Starts choosing a backend for `requested` on a thread (at once, on
    /// this thread, for `cpu`, or when no thread can be started).
    pub fn spawn(requested: Backend) -> Probe {
        if requested == Backend::Cpu {
            return Probe::now(requested);
        }
        Probe::spawn_with(move || select(requested))
    }

    /// Runs `choose` on a probe thread (inline when none can be started);
    /// tests pass a choice that waits on them.
    pub fn spawn_with(
        choose: impl FnOnce() -> Result<Choice, Error> + Send + Clone + 'static,
    ) -> Probe {
        let inline = choose.clone();
        match std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || timed(choose))
        {
            Ok(h) => Probe {
                thread: Some(h),
                answer: None,
            },
            Err(e) => {
                tracing::debug!(error = %e, "Cannot start the probe thread; probing inline.");
                Probe {
                    thread: None,
                    answer: Some(timed(inline)),
                }
            }
        }
    }

    /// Chooses a backend for `requested` now, on this thread.
    pub fn now(requested: Backend) -> Probe {
        Probe {
            thread: None,
            answer: Some(timed(|| select(requested))),
        }
    }

    /// A choice already made (serve moving to the CPU after its GPU failed).
    pub fn decided(choice: Choice) -> Probe {
        Probe {
            thread: None,
            answer: Some((Ok(choice), Duration::ZERO)),
        }
    }

    /// The choice, if it has been made (never blocks).
    pub fn peek(&mut self) -> Option<&Result<Choice, Error>> {
        if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
            self.settle();
        }
        self.answer.as_ref().map(|(choice, _)| choice)
    }

    /// Waits for the choice; also how long the probe itself took.
    pub fn wait(mut self) -> Answer {
        self.settle();
        self.answer
            .take()
            .unwrap_or((Err(Error::Panicked), Duration::ZERO))
    }

    fn settle(&mut self) {
        if let Some(h) = self.thread.take() {
            self.answer = Some(h.join().unwrap_or((Err(Error::Panicked), Duration::ZERO)));
        }
    }
}

fn timed(choose: impl FnOnce() -> Result<Choice, Error>) -> Answer {
    let t = Instant::now();
    let choice = choose();
    (choice, t.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::Target;

    #[test]
    fn cpu_is_chosen_at_once_without_a_thread() {
        let mut p = Probe::spawn(Backend::Cpu);
        assert!(p.thread.is_none());
        let c = p
            .peek()
            .expect("made at once")
            .as_ref()
            .expect("cpu is always usable");
        assert_eq!(c.target, Target::Cpu);
        let (c, took) = p.wait();
        assert_eq!(c.unwrap().target, Target::Cpu);
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn auto_is_probed_on_a_thread_and_waited_for() {
        let mut p = Probe::spawn(Backend::Auto);
        // Either still running or done; waiting always gives an answer, and
        // without a GPU (CI, this harness) auto falls back to the CPU or, with
        // the host-double variable set, to the double.
        let _ = p.peek();
        let (c, _) = p.wait();
        let c = c.expect("auto never fails");
        assert!(matches!(
            c.target,
            Target::Cpu | Target::HostDouble | Target::Gpu(_)
        ));
    }
}
