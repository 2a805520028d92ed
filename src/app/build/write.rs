//! The build's writer thread: every outcome into the [`DatasetWriter`], in
//! arrival order (it reorders rows), the rows it computes in pieces
//! (`crate::long`) accounted when it writes them.

use std::sync::Arc;

use super::{Error, Halt, Written};
use crate::app::interrupt;
use crate::compute::{Reject, Rejection};
use crate::pipeline::{self, Delivered, Pipeline};
use crate::plan::input::Items;
use crate::plan::{Job, Plan};
use crate::runtime::telemetry::Local;
use crate::runtime::window::{CloseOnDrop, Window};
use crate::writer::DatasetWriter;

/// The sink: one writer thread.
pub(super) fn spawn_writer(
    p: &Arc<Pipeline>,
    jobs: &Arc<Vec<Job>>,
    (open, items): (Arc<Plan>, Option<Arc<Items>>),
    writer: DatasetWriter,
    window: &Arc<Window>,
) -> Result<std::thread::JoinHandle<Written>, Error> {
    let (p, jobs) = (Arc::clone(p), Arc::clone(jobs));
    let window = Arc::clone(window);
    std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || {
            let _release_source = CloseOnDrop(&window);
            let r = write_all(writer, &jobs, (&open, items.as_deref()), &window, &p);
            if r.is_err() {
                p.abort();
            }
            r
        })
        .map_err(|e| Error::Spawn("writer", e))
}

/// The writer thread's loop: every outcome into the sink, in arrival order
/// (the writer reorders rows). A device failure aborts the graph.
fn write_all(
    mut w: DatasetWriter,
    jobs: &[Job],
    (open, items): (&Plan, Option<&Items>),
    window: &Window,
    p: &Pipeline,
) -> Written {
    let telemetry = p.telemetry();
    let mut local = Local::serial(telemetry, "writer");
    let copiers = crate::writer::lent::copiers();
    let mut rejected = Vec::new();
    let line = |j: &Job| items.and_then(|i| i.line(j));
    // Jobs are in (split, seq) order: the first job of each split.
    let mut split_start = vec![jobs.len(); open.splits.len()];
    for (i, j) in jobs.iter().enumerate().rev() {
        split_start[j.split as usize] = i;
    }
    while let Some(o) = p.outcomes().pop() {
        if let Err(Reject::Device(why)) = &o.row {
            p.abort();
            return Ok(Err(Halt::Gpu(Arc::clone(why))));
        }
        window.received(o.job);
        let j = &jobs[o.job];
        let path = pipeline::too_large(&o.row).then(|| open.open_path(j));
        let long = p
            .streamer()
            .zip(path.as_deref())
            .map(|(streamer, path)| pipeline::LongFile {
                streamer,
                path,
                segment: items.and_then(|i| i.segment(j)),
                seed: o.job as u64,
            });
        let d = pipeline::deliver(
            &mut w,
            j,
            open.paths.get(j.path),
            (o.row, o.stats, long),
            p.free_rows(),
            &mut local,
            telemetry,
        )?;
        if let Delivered::Rejected(mut r) = d {
            r.line = line(j);
            rejected.push(r);
        }
        for (split, seq, written) in w.take_streamed() {
            let j = &jobs[split_start[split] + seq];
            local.file_done(
                written.as_ref().map(drop).map_err(|why| why.kind),
                telemetry,
            );
            if let Err(why) = written {
                let mut r = Rejection::refused(open.paths.get(j.path).to_string(), why);
                r.line = line(j);
                rejected.push(r);
            }
        }
        if o.job == jobs.len() / 2 {
            interrupt::checkpoint("writing");
        }
    }
    local.publish(telemetry);
    if interrupt::requested().is_some() {
        return Ok(Err(Halt::Signal)); // dropping `w` unfinished deletes its .partial files
    }
    let report = local.time(crate::runtime::telemetry::Stage::Write, || w.finish());
    local.publish(telemetry);
    // The chunk copiers' share of this build (they serve every build of
    // the process).
    for (name, cpu, jobs) in crate::writer::lent::copiers() {
        let before = copiers.iter().find(|c| c.0 == name);
        let (cpu0, jobs0) = before.map_or((Default::default(), 0), |c| (c.1, c.2));
        telemetry.record_serial(name, cpu.saturating_sub(cpu0), jobs - jobs0);
    }
    interrupt::checkpoint("finished");
    rejected.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
    Ok(Ok((report?, rejected)))
}
