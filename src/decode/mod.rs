//! Containers → samples. [`wav`]: RIFF/WAVE parsed and decoded from a byte
//! buffer, with a specific reason for every malformation; [`flac`]: FLAC
//! through symphonia, with the same care; [`resample`]: libsoxr HQ as
//! librosa's `soxr_hq`; [`clip`]: file bytes → the mono `f32` clip at the
//! target rate under the `[input]` policy (what both compute backends call);
//! [`policy`]: the `[input]` decoding policy both read (channels, resampling);
//! [`pool`]: the staging slots host-decoded clips are written into for a
//! device, and the per-thread router that decides who decodes a file.

pub mod clip;
pub mod flac;
pub mod policy;
pub mod pool;
pub mod resample;
pub mod wav;
