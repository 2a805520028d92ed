//! Segments of a compressed recording that cannot be cut into parts, served
//! from one decode of it: the spill.
//!
//! The segments of an M4A recording past its first access unit that may
//! code perceptual noise (AAC's noise generator runs on from the stream's
//! start, so no part can start there: `decode::compressed::index`), and
//! those of an MP3 or Ogg recording whose seek index cannot be built, would
//! each read the whole file and decode it from its start up to the
//! segment's end: 1,000 segments of a 2-hour recording are about 500 whole
//! decodes and 1,000 whole reads. Instead, once every manifest line is
//! planned, the prepare step [`prepare`] reads each such recording that
//! has at least [`MIN_SEGMENTS`] of those segments through the reader
//! stage (the build's `[io]`: io_uring, its threads placed as the build's
//! readers, a bounded number of recordings read ahead), and decodes it
//! once, on at most [`THREADS`] threads, with the worker's whole-file
//! decoder (`decode::compressed::open`, the same
//! gapless trimming; [`crate::decode::compressed::Stream::decode_all_to`]
//! keeps every channel and hands the frames on as they pile up), and
//! writes the samples as they come as a 32-bit float WAV
//! (`WAVE_FORMAT_IEEE_FLOAT`, interleaved, the stream's own rate) into the
//! build's [`SpillDir`]. Each segment of the recording is then planned as
//! the exact extent of that WAV (`decode::wav::extent`, read through the
//! ring like any WAV segment): the decoder sees the same `f32` samples,
//! takes the cut's channel or the same left-to-right mean, so the row is
//! the one the whole-file decode gives, bit for bit.
//!
//! Nothing changes for a recording when spilling it is not sure to give
//! the same rows or is not worth it, and its segments are planned as
//! before: fewer than [`MIN_SEGMENTS`] segments; a decode larger than the
//! limit (`input.spill_max_mib`, default 2 GiB), found by stopping the
//! decode there; any decode error (a truncated or malformed stream: the
//! worker then rejects each segment with the decoder's own reason, or
//! builds the segments before the damage, as before); a non-finite sample
//! (the WAV decoder refuses those); a spill that cannot be written. A
//! segment that starts past the decoded end keeps its old plan too, so the
//! decoder says so in its words.
//!
//! The disk under the output folder is never filled by the spill. Before a
//! recording is decoded, its spill is estimated (the frames up to its
//! furthest segment end, a lower bound) and it is spilled only when the
//! filesystem has twice that free beyond what the spills in flight claimed
//! (`fstatvfs`; [`Room`]: the other half is kept for the rows); a spill
//! that met ENOSPC, EDQUOT or EFBIG while written, or left less free than
//! its own size, is removed at once. Either way the recording keeps its old
//! plan, the reason is logged (a warning naming the disk and the bytes)
//! and counted (`spill_no_room` in "Read the manifests."): the rows are
//! the same, only slower to build. No partial spill stays (the file goes
//! on any error) and the folder goes as soon as nothing was spilled.
//!
//! The spill folder is `OUT/.melforge-spill` (`.melforge-spill.shard-K-of-N`
//! for a shard, so shards building into one folder each spill their own):
//! hidden, never an output, removed when the build ends, on error too (the
//! [`SpillDir`] guard), and a stale one, left by a killed build, removed
//! when the next build of the same shard starts. Its bytes are counted:
//! the recordings read whole to decode them are part of the planner's
//! bytes read (`header_bytes`), and the bytes written are `spill_bytes`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Manifests;
use crate::config::IoConfig;
use crate::decode::compressed;
use crate::decode::wav::extent;
use crate::model::Segment;
use crate::reader::ReadRange;

/// A recording is spilled only when it has at least this many segments:
/// one segment is decoded at most once either way.
pub const MIN_SEGMENTS: usize = 2;

/// Recordings decoded at once (each holds about [`CHUNK`] +
/// `Sink::KEEP` frames in memory).
const THREADS: usize = 4;

/// A build's spill folder: created when the first recording is spilled,
/// removed with everything in it when dropped. Creating the guard removes
/// a stale folder of the same name.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    max_bytes: u64,
}

impl SpillDir {
    /// The folder's name in the output folder: `.melforge-spill`, with the
    /// shard's `infix` (`.shard-K-of-N`) after it.
    pub fn name(infix: &str) -> String {
        format!(".melforge-spill{infix}")
    }

    /// The guard of `path`, spilling decodes of at most `max_bytes`;
    /// whatever a killed build left there is removed.
    pub fn new(path: PathBuf, max_bytes: u64) -> SpillDir {
        let d = SpillDir { path, max_bytes };
        d.remove();
        d
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The most bytes one spill may hold (`input.spill_max_mib`).
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn remove(&self) {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "Cannot remove the spill folder."
            ),
        }
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The recordings whose segments may be spilled, with their jobs (path
/// indices), in the order met.
#[derive(Debug, Default)]
pub struct Pending {
    recordings: Vec<(PathBuf, Vec<u32>)>,
    by_path: std::collections::HashMap<PathBuf, usize>,
}

impl Pending {
    /// Job `path` is a segment of the recording at `open`.
    pub fn push(&mut self, open: &Path, path: u32) {
        let next = self.recordings.len();
        let i = *self.by_path.entry(open.to_path_buf()).or_insert(next);
        if i == next {
            self.recordings.push((open.to_path_buf(), Vec::new()));
        }
        self.recordings[i].1.push(path);
    }
}

/// One recording's spill, written.
struct Spilled {
    file: PathBuf,
    head: extent::Head,
    /// The recording's bytes, read to decode it.
    read: u64,
}

/// How the spill reads the recordings it decodes: the build's reader
/// configuration (`[io]`: engine, threads, pinning), so they are read as
/// the build's own files are.
#[derive(Clone, Copy, Debug)]
pub struct Readers<'a> {
    pub io: &'a IoConfig,
}

/// Spills the recordings of `pending` that qualify into `dir` and plans
/// their segments as extents of the spills (module doc); the others keep
/// their plan. The prepare step between planning and building: the
/// recordings are read through the reader stage (`readers`: io_uring
/// where it runs, the threads placed as the build's readers are) and
/// decoded on at most [`THREADS`] threads, with at most
/// [`READ_AHEAD`] recordings per reader read ahead of the decoders, so
/// memory holds a bounded number of recordings whatever their count.
pub fn prepare(m: &mut Manifests, pending: Pending, dir: &SpillDir, readers: Readers<'_>) {
    let todo: Vec<(usize, &(PathBuf, Vec<u32>))> = pending
        .recordings
        .iter()
        .filter(|(_, jobs)| jobs.len() >= MIN_SEGMENTS)
        .enumerate()
        .collect();
    if todo.is_empty() || dir.max_bytes == 0 {
        return;
    }
    let t = std::time::Instant::now();
    if let Err(e) = std::fs::create_dir_all(&dir.path) {
        tracing::warn!(path = %dir.path.display(), error = %e,
            "Cannot create the spill folder; segments are decoded from their recordings' start.");
        return;
    }
    let room = Room::new(&dir.path);
    let ends: Vec<f64> = todo.iter().map(|(_, (_, jobs))| end_s(m, jobs)).collect();
    let paths: Vec<PathBuf> = todo.iter().map(|(_, (p, _))| p.clone()).collect();
    let done = match read_and_spill(&paths, dir, &ends, &room, readers) {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(error = %e,
                "Cannot start the readers for the spill; segments are decoded from their \
                 recordings' start.");
            let _ = std::fs::remove_dir(&dir.path);
            return;
        }
    };
    for (spilled, (_, (_, jobs))) in done.into_iter().zip(&todo) {
        match spilled {
            Ok(s) => plan_jobs(m, &s, jobs),
            Err(Skip::NoRoom(_)) => m.spill_no_room += 1,
            Err(Skip::Unfit(_)) => {}
        }
    }
    tracing::info!(
        recordings = todo.len(),
        spilled = m.spilled,
        spill_bytes = m.spill_bytes,
        seconds = t.elapsed().as_secs_f64(),
        "Prepared the spill."
    );
    if m.spilled == 0 {
        // Nothing is served from it: the folder goes now, not at the end.
        let _ = std::fs::remove_dir(&dir.path);
    }
}

/// Recordings each spill reader keeps in flight: the reads ahead of the
/// decoders are bounded by this (whole recordings, each up to
/// `input.spill_max_mib`).
const READ_AHEAD: usize = 2;

/// Reads `paths` whole through a reader stage of `readers` and spills each
/// into `dir` as it arrives (`ends[k]`: how far path `k`'s segments reach);
/// per path, its spill or why not.
fn read_and_spill(
    paths: &[PathBuf],
    dir: &SpillDir,
    ends: &[f64],
    room: &Room,
    readers: Readers<'_>,
) -> Result<Vec<Result<Spilled, Skip>>, crate::reader::stage::StartError> {
    use crossbeam_queue::ArrayQueue;
    use std::sync::Arc;

    use crate::reader::{ReadJob, ReaderStage};
    use crate::runtime::ring::Ring;
    let decoders = THREADS
        .min(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(paths.len());
    let mut io = readers.io.clone();
    io.threads = io.threads.clamp(1, paths.len());
    io.queue_depth = io.queue_depth.clamp(1, READ_AHEAD);
    // A recording over the spill's limit is not read (the reader says so).
    io.max_file_bytes = dir.max_bytes;
    let cpus = crate::runtime::pin::plan(&io.pin, io.threads, 0, None).readers;
    let jobs = Arc::new(Ring::new(paths.len()));
    for (k, p) in paths.iter().enumerate() {
        let _ = jobs.push(ReadJob::whole(k, p.clone()));
    }
    jobs.close();
    let loaded = Arc::new(Ring::new(decoders));
    let telemetry = Arc::new(crate::runtime::telemetry::Telemetry::default());
    // The arena holds the small recordings; a larger one is read into an
    // extent of its own (`reader::arena`).
    let stage = ReaderStage::start(
        (&io, &crate::reader::cache::unsampled(io.direct)),
        16 << 20,
        &cpus,
        jobs,
        &loaded,
        Arc::new(ArrayQueue::new(decoders.max(1))),
        telemetry,
    )?;
    let done: Mutex<Vec<Result<Spilled, Skip>>> = Mutex::new(
        paths
            .iter()
            .map(|_| Err(Skip::Unfit(String::new())))
            .collect(),
    );
    std::thread::scope(|s| {
        for _ in 0..decoders {
            s.spawn(|| {
                while let Some(l) = loaded.pop() {
                    let k = l.job;
                    let file = dir.path.join(format!("{k}.wav"));
                    let r = match &l.bytes {
                        Ok(bytes) => spill_one(bytes, &file, dir.max_bytes, ends[k], room),
                        Err(crate::reader::Error::TooLarge { size, limit }) => Err(Skip::Unfit(
                            format!("the file is {size} bytes, over the spill's {limit}"),
                        )),
                        Err(e) => Err(Skip::Unfit(format!("cannot read it: {e}"))),
                    };
                    drop(l);
                    if let Err(why) = &r {
                        let _ = std::fs::remove_file(&file);
                        why.log(&paths[k]);
                    }
                    done.lock().expect("no spill thread panics holding it")[k] = r;
                }
            });
        }
    });
    if !stage.join() {
        tracing::warn!("A spill reader panicked; its recordings are decoded from their start.");
    }
    Ok(done.into_inner().expect("no spill thread panicked"))
}

/// How far into its recording the segments of `jobs` reach, in seconds:
/// the spill holds at least that much (a segment to the end counts its
/// offset), the estimate the free-space check uses.
fn end_s(m: &Manifests, jobs: &[u32]) -> f64 {
    jobs.iter()
        .filter_map(|&j| m.extents.segment(j as usize))
        .map(|s| s.offset_s + s.duration_s.unwrap_or(0.0))
        .filter(|e| e.is_finite())
        .fold(0.0, f64::max)
}

/// Why a recording is not spilled; its segments keep their old plan.
#[derive(Debug)]
enum Skip {
    /// Spilling it is not sure to give the same rows, or cannot be done
    /// (module doc).
    Unfit(String),
    /// The disk under the output folder has no room for it: the
    /// free-space check, or ENOSPC, EDQUOT or EFBIG while writing it.
    NoRoom(String),
}

impl Skip {
    /// A write error: [`Skip::NoRoom`] when the disk is full (or the quota
    /// or the file size limit reached), [`Skip::Unfit`] otherwise.
    fn write(file: &Path, e: &std::io::Error) -> Skip {
        let why = format!("cannot write {}: {e}", file.display());
        match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => Skip::NoRoom(why),
            _ => Skip::Unfit(why),
        }
    }

    fn log(&self, path: &Path) {
        match self {
            Skip::Unfit(why) => tracing::info!(path = %path.display(), why = %why,
                "Not spilling the recording; its segments are decoded from its start."),
            Skip::NoRoom(why) => tracing::warn!(path = %path.display(), why = %why,
                "No room on the disk under the output folder for the spill; the recording's \
                 segments are decoded from its start instead (the partial spill is removed)."),
        }
    }
}

/// The free-space check of the spill folder's filesystem, shared by the
/// spill threads: a recording is spilled only when the filesystem has
/// room for twice its estimated spill beyond what the spills in flight
/// claimed (the second half is kept for the rows and the other outputs,
/// which a 16 kHz mono spill of 64,000 bytes a second at least matches:
/// 100 rows a second of 80 `f32` bins is 32,000), and a spill that came
/// out larger than estimated is kept only when as much is still free
/// after it.
struct Room {
    dir: Option<std::fs::File>,
    claimed: Mutex<u64>,
}

impl Room {
    fn new(dir: &Path) -> Room {
        Room {
            dir: std::fs::File::open(dir).ok(),
            claimed: Mutex::new(0),
        }
    }

    /// Bytes free for the spill (unknown: as much as asked).
    fn free(&self) -> Option<u64> {
        use std::os::fd::AsFd as _;
        let dir = self.dir.as_ref()?;
        crate::runtime::sys::available_bytes(dir.as_fd()).ok()
    }

    /// Claims `bytes` for a spill, or says why there is no room.
    fn claim(&self, bytes: u64) -> Result<Claim<'_>, Skip> {
        let mut claimed = self
            .claimed
            .lock()
            .expect("no spill thread panics holding it");
        if let Some(free) = self.free() {
            let need = bytes.saturating_mul(2).saturating_add(*claimed);
            if free < need {
                return Err(Skip::NoRoom(format!(
                    "the disk under the output folder has {free} bytes free; the spill \
                     needs about {bytes}, as much again is kept for the rows, and {} \
                     are claimed by other spills",
                    *claimed
                )));
            }
        }
        *claimed += bytes;
        Ok(Claim { room: self, bytes })
    }

    /// After a spill of `bytes` was written: room left for the rows?
    fn left_for_rows(&self, bytes: u64) -> Result<(), Skip> {
        match self.free() {
            Some(free) if free < bytes => Err(Skip::NoRoom(format!(
                "the spill of {bytes} bytes left {free} bytes free on the disk under the \
                 output folder, less than it for the rows"
            ))),
            _ => Ok(()),
        }
    }
}

/// Bytes claimed by a spill in flight, given back when dropped.
struct Claim<'a> {
    room: &'a Room,
    bytes: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.room.claimed.lock() {
            *c = c.saturating_sub(self.bytes);
        }
    }
}

/// Each of `jobs` (segments of the spilled recording) as an extent of the
/// spill, where it starts before the spill's end.
fn plan_jobs(m: &mut Manifests, s: &Spilled, jobs: &[u32]) {
    m.header_bytes += s.read;
    m.spilled += 1;
    m.spill_bytes += s.head.bytes.len() as u64 + s.head.frames * u64::from(s.head.block_align);
    for &j in jobs {
        let i = j as usize;
        let Some(seg) = m.extents.segment(i) else {
            continue;
        };
        let Some(e) = s.head.extent(&seg) else {
            continue;
        };
        let range = ReadRange::new(e.prefix, e.start, e.len);
        let seg = Segment {
            offset_s: 0.0,
            duration_s: None,
            ..seg
        };
        m.extents.set(i, Some(seg), Some(range));
        m.plan.targets.insert(j, s.file.clone());
    }
}

/// Decodes the recording whose bytes are `bytes` and writes it to `file`
/// when it qualifies (module doc) and there is room for it (`end_s`: how
/// far its segments reach, [`end_s`]); the caller removes `file` on an
/// error.
fn spill_one(
    bytes: &[u8],
    file: &Path,
    max_bytes: u64,
    end_s: f64,
    room: &Room,
) -> Result<Spilled, Skip> {
    let unfit = |why: String| Skip::Unfit(why);
    let stream = compressed::open(bytes).map_err(|e| unfit(e.to_string()))?;
    let head = stream.head();
    let width = u64::from(head.channels.max(1));
    // At least this many bytes: the frames up to the furthest segment end.
    let estimate = (44 + 4 * width * (end_s * f64::from(head.sample_rate)).ceil() as u64)
        .min(max_bytes.saturating_add(44));
    let claim = room.claim(estimate)?;
    let max_frames = usize::try_from(max_bytes / (4 * width)).unwrap_or(usize::MAX);
    let written = write(file, &head, stream, max_frames)?;
    let len = 44 + 4 * width * written;
    drop(claim);
    room.left_for_rows(len)?;
    let header = float_wav_header(head.sample_rate, head.channels, written);
    let head = extent::head(&header, len)
        .ok_or_else(|| unfit("its spill's header does not describe it".into()))?;
    tracing::debug!(spill = %file.display(), frames = written, "Spilled.");
    Ok(Spilled {
        file: file.to_path_buf(),
        head,
        read: bytes.len() as u64,
    })
}

/// Frames decoded and written to the spill at a time.
const CHUNK: usize = 1 << 18;

/// Decodes `stream` into the float WAV `file` as it goes (memory: about
/// [`CHUNK`] frames, whatever the recording's length), then writes the
/// header's sizes: the frames; [`Skip::Unfit`] when the recording does not
/// qualify (a decode error, over `max_frames`, a sample that is not
/// finite, a trim into frames written) or the file cannot be written,
/// [`Skip::NoRoom`] when the disk is full ([`Skip::write`]).
fn write(
    file: &Path,
    head: &compressed::Head,
    stream: compressed::Stream,
    max_frames: usize,
) -> Result<u64, Skip> {
    use std::io::{Seek, SeekFrom};
    let cannot = |e: std::io::Error| Skip::write(file, &e);
    let mut w =
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(file).map_err(cannot)?);
    w.write_all(&float_wav_header(head.sample_rate, head.channels, 0))
        .map_err(cannot)?;
    let mut samples = 0u64;
    let mut failed: Option<Skip> = None;
    let mut bytes = Vec::with_capacity(4 << 16);
    let mut put = |s: &[f32]| -> bool {
        if let Some(i) = s.iter().position(|v| !v.is_finite()) {
            failed = Some(Skip::Unfit(format!(
                "sample {} of its decode is not finite",
                samples + i as u64
            )));
            return false;
        }
        for piece in s.chunks(1 << 16) {
            bytes.clear();
            bytes.extend(piece.iter().flat_map(|v| v.to_le_bytes()));
            if let Err(e) = w.write_all(&bytes) {
                failed = Some(cannot(e));
                return false;
            }
        }
        samples += s.len() as u64;
        true
    };
    let done = stream.decode_all_to(max_frames.saturating_add(1), CHUNK, &mut put);
    match (done, failed) {
        (_, Some(why)) => return Err(why),
        (Err(e), None) => return Err(Skip::Unfit(e.to_string())),
        (Ok(d), None) if d.trimmed_late => {
            return Err(Skip::Unfit(
                "its end trim reaches samples already spilled".into(),
            ));
        }
        (Ok(d), None) if d.frames > max_frames as u64 => {
            return Err(Skip::Unfit(format!(
                "its decode is over {} bytes",
                max_frames as u64 * 4 * u64::from(head.channels.max(1))
            )));
        }
        (Ok(_), None) => {}
    }
    let frames = samples / u64::from(head.channels.max(1));
    let mut f = w.into_inner().map_err(|e| cannot(e.into_error()))?;
    f.seek(SeekFrom::Start(0)).map_err(cannot)?;
    f.write_all(&float_wav_header(head.sample_rate, head.channels, frames))
        .map_err(cannot)?;
    Ok(frames)
}

/// The 44-byte header of a WAV of `frames` frames of `channels` 32-bit
/// float samples (`WAVE_FORMAT_IEEE_FLOAT`) at `rate` Hz.
fn float_wav_header(rate: u32, channels: u16, frames: u64) -> Vec<u8> {
    let align = 4 * channels;
    let data = u32::try_from(frames * u64::from(align)).unwrap_or(u32::MAX);
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&data.saturating_add(36).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&3u16.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&rate.saturating_mul(u32::from(align)).to_le_bytes());
    h.extend_from_slice(&align.to_le_bytes());
    h.extend_from_slice(&32u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data.to_le_bytes());
    h
}

#[cfg(test)]
mod tests;
