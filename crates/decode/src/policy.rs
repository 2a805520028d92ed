//! The decoding half of `[input]` as values: how a file at another rate is
//! treated ([`Resample`]), how its channels become one ([`Channels`]), and
//! both together ([`Policy`]). The container decoders ([`super::flac`]) and
//! the clip maker ([`super::clip`], which re-exports these) both read them,
//! so they live here, below both.

/// `input.resample`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resample {
    /// A rate other than the target is rejected (both rates named).
    Off,
    /// libsoxr HQ, as `librosa.load(..., sr=target)` (res_type `soxr_hq`).
    SoxrHq,
}

impl Resample {
    /// The config value: "off" | "soxr_hq".
    pub fn name(self) -> &'static str {
        match self {
            Resample::Off => "off",
            Resample::SoxrHq => "soxr_hq",
        }
    }
}

/// `input.channels`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Channels {
    /// The mean of the channels (librosa's `mono=True`).
    Mean,
    /// Channel 0 only.
    First,
    /// A file with more than one channel is rejected.
    Reject,
}

impl Channels {
    /// The config value: "mean" | "first" | "reject".
    pub fn name(self) -> &'static str {
        match self {
            Channels::Mean => "mean",
            Channels::First => "first",
            Channels::Reject => "reject",
        }
    }
}

/// How a decoder makes one channel of several: the mean of all, or one of
/// them (channel 0 for `input.channels = "first"`, a lhotse cut's channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    Mean,
    Channel(u16),
}

impl From<Channels> for Mix {
    /// `Reject` is the caller's check; it mixes as `Mean`.
    fn from(c: Channels) -> Mix {
        match c {
            Channels::First => Mix::Channel(0),
            Channels::Mean | Channels::Reject => Mix::Mean,
        }
    }
}

/// How files become clips (the decoding half of `[input]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Policy {
    pub resample: Resample,
    pub channels: Channels,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            resample: Resample::Off,
            channels: Channels::Mean,
        }
    }
}
