//! Containers → samples. [`wav`]: RIFF/WAVE parsed and decoded from a byte
//! buffer, with a specific reason for every malformation; [`flac`]: FLAC
//! through symphonia, with the same care; [`resample`]: libsoxr HQ as
//! librosa's `soxr_hq`; [`clip`]: file bytes → the mono `f32` clip at the
//! target rate under the `[input]` policy (what both compute backends call);
//! [`policy`]: the `[input]` decoding policy both read (channels, resampling);
//! [`compressed`]: MP3, Ogg Vorbis, Ogg Opus and MP4 AAC (symphonia and
//! libopus) with soundfile's/ffmpeg's gapless alignment; [`native`]: any
//! container → mono samples at the file's own rate (`melforge decode`);
//! [`segment`]: the part of a file an item stands for, as its manifest's
//! loader counts it.
//!
//! The crate needs no system library but libsoxr, and that only with the
//! `soxr` feature (on by default): HDF5, hwloc, io_uring and CUDA stay in
//! melforge's daemon and CLI. libopus is built from source and linked
//! statically.

pub mod clip;
pub mod compressed;
pub mod flac;
pub mod native;
pub mod policy;
pub mod resample;
pub mod segment;
pub mod wav;
