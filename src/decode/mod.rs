//! Containers → samples. [`wav`]: RIFF/WAVE parsed and decoded from a byte
//! buffer, with a specific reason for every malformation; [`flac`]: FLAC
//! through symphonia, with the same care; [`resample`]: libsoxr HQ as
//! librosa's `soxr_hq`; [`clip`]: file bytes → the mono `f32` clip at the
//! target rate under the `[input]` policy (what both compute backends call);
//! [`policy`]: the `[input]` decoding policy both read (channels, resampling);
//! [`compressed`]: MP3, Ogg Vorbis, Ogg Opus and MP4 AAC (symphonia and
//! libopus) with soundfile's/ffmpeg's gapless alignment; [`native`]: any
//! container → mono samples at the file's own rate (`melforge decode`);
//! [`pool`]: the staging slots host-decoded clips are written into for a
//! device, and the per-thread router that decides who decodes a file.

pub mod clip;
pub mod compressed;
pub mod flac;
pub mod native;
pub mod policy;
pub mod pool;
pub mod resample;
pub mod wav;
