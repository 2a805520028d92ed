//! A GPU that fails while serve runs.
//!
//! After a device error the CUDA stage answers every file it had not
//! finished, and every file it is given later, with [`Reject::Device`]. That
//! says nothing about the file, so it must never reach the journal (a
//! rejection there is permanent: the file would never be ingested, or would
//! be moved to quarantine). On the first such answer the loop stops feeding
//! the stage ([`Service::device_failed`]); at the end of that loop turn
//! [`Service::replace_failed_compute`] aborts the whole stage graph at once
//! (files inside it may never come back: their arena extents stay held while
//! their copies are unfinished), keeps what it had finished (rows computed
//! before the failure, real rejections), and puts every other file it held
//! back at the head of the queue, as it was, still in the drop directory.
//! Then, by `compute.backend`:
//! * `auto`: a new stage graph on the CPU backend takes over (its reason, in
//!   `ctl status` and the metrics, names the GPU error) and gets the queue.
//!   The GPU is not tried again until serve restarts: a device that failed
//!   once mid-run is not trusted with the next file. The failed graph is
//!   joined on a thread of its own, so a hung device cannot stop ingest.
//! * `cuda`: the GPU is required, so serve stops with an error after the
//!   final commit of what it computed; the files it did not compute are
//!   still in the drop directory and are ingested at the next start
//!   (systemd restarts the service).
//!
//! [`Reject::Device`]: crate::compute::Reject::Device

use std::sync::Arc;

use super::health::Health;
use super::{Error, Service};
use crate::compute::cuda::Cause;
use crate::compute::{Choice, Probe};
use crate::config::Backend;
use crate::pipeline::Pipeline;

impl Service {
    /// Notes the device's error `why`: nothing more is fed to the stage, and
    /// the file stays a job, to be queued again.
    pub(super) fn device_failed(&mut self, why: &Arc<Cause>) {
        if matches!(self.health, Health::ComputeFailed { .. }) {
            return;
        }
        let then = match self.cfg.compute.backend {
            Backend::Cuda => "serve stops (compute.backend = \"cuda\" requires the GPU)",
            _ => "ingest goes on on the CPU backend",
        };
        tracing::error!(
            error = %why,
            "The GPU failed. The files it had not finished stay in the drop directory and \
             are queued again; {then}."
        );
        self.last_error = Some(format!("the GPU failed: {why}"));
        let degraded = match std::mem::replace(&mut self.health, Health::Healthy) {
            Health::Degraded(d) => Some(d),
            _ => None,
        };
        self.health = Health::ComputeFailed {
            cause: Arc::clone(why),
            degraded,
        };
    }

    /// After a GPU failure: stops the failed stage graph, keeps what it
    /// finished, queues the rest again, then moves to the CPU (`auto`) or
    /// stops serve (`cuda`: the error returned). See the module doc.
    pub(super) fn replace_failed_compute(&mut self) -> Result<(), Error> {
        if !matches!(self.health, Health::ComputeFailed { .. }) {
            return Ok(());
        }
        self.pipeline.abort();
        // Rows and real rejections are taken; a device answer leaves its
        // file a job (`absorb`), queued again below.
        while let Some(o) = self.pipeline.outcomes().try_pop() {
            if let Err(e) = self.absorb(o) {
                self.on_write_error(e)?;
            }
        }
        // Taken only now: a device answer above finds the failure noted.
        let why = self
            .health
            .take_compute_failure()
            .expect("a failed write keeps the compute failure");
        let again = self.intake.requeue_in_flight();
        if self.cfg.compute.backend == Backend::Cuda {
            return Err(Error::Gpu(Arc::unwrap_or_clone(why)));
        }
        let choice = Choice::cpu(format!(
            "auto: the GPU failed during this run ({why}), so the CPU backend is used until \
             serve restarts"
        ));
        let cpu = Pipeline::start_on_recipe(
            (&self.cfg, Arc::clone(self.pipeline.recipe())),
            Probe::decided(choice),
            Arc::clone(&self.telemetry),
            0,
        )?;
        let failed = std::mem::replace(&mut self.pipeline, cpu);
        let joined = std::thread::Builder::new()
            .name("gpu-retire".into())
            .spawn(move || {
                if let Err(e) = failed.join() {
                    tracing::debug!(error = %e, "The failed GPU stage ended.");
                }
            });
        if let Err(e) = joined {
            tracing::warn!(error = %e, "Cannot join the failed GPU stage; it is left running.");
        }
        tracing::warn!(
            queued_again = again,
            "Ingest goes on on the CPU backend. Restart serve to use the GPU again."
        );
        Ok(())
    }
}
