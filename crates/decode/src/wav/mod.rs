//! WAV decoding from an in-memory byte buffer: RIFF/WAVE header parsing and
//! PCM / IEEE-float → mono `f32` conversion.
//!
//! The reader hands compute the whole file's bytes; [`parse`] walks the RIFF chunk
//! list and returns a [`WavInfo`] (format, rate, where the samples are), and
//! [`decode_mono_into`] converts the samples into a caller-owned `f32` buffer,
//! padding with zeros or trimming at the end. [`decode`] does both and checks the
//! sample rate. Nothing here allocates; every rejection is an [`Error`] whose
//! `Display` is a sentence fragment carrying the numbers (the caller prefixes the
//! path).
//!
//! Accepted: `RIFF`/`WAVE`, little-endian, format tag 1 (PCM: 8-bit unsigned,
//! 16/24/32-bit signed), 3 (IEEE float: 32/64-bit) and `0xFFFE`
//! (WAVE_FORMAT_EXTENSIBLE whose sub-format GUID is the standard KSDATAFORMAT PCM or
//! IEEE-float GUID; the container size `wBitsPerSample` decides decoding;
//! `wValidBitsPerSample` must not exceed it (0 is read as "all"), and `cbSize`
//! must fit in the fmt chunk). IEEE-float samples must be finite once held
//! as `f32` (NaN, ±Inf, or an f64 beyond f32's range is rejected with the
//! frame and channel, not turned into silence). Scaling follows docs/DESIGN.md: int16/2^15,
//! int24/2^23, int32/2^31, uint8 (v−128)/128, float as stored (f64 rounded to f32).
//! Several channels → the mean computed like `np.mean(y, axis=0)` on float32: the
//! scaled channel values summed left to right in `f32`, then divided by the count.
//!
//! Invariants of a [`WavInfo`] returned by [`parse`]:
//! * `channels ≥ 1`, `sample_rate ≥ 1`, `frames ≥ 1`;
//! * `block_align == channels × format.bytes_per_sample()`;
//! * `data_offset + frames × block_align ≤ bytes.len()`.
//!
//! Chunk-walking rules:
//! * Chunks are searched in file order until both `fmt ` and `data` are found, so
//!   `data` before `fmt ` is accepted; the first of each wins; chunks after both are
//!   not examined. Unknown chunks (`LIST`, `fact`, `cue `, `bext`, `JUNK`, …) are
//!   skipped, honouring the pad byte after an odd-sized chunk (when the padded
//!   position does not hold a plausible chunk id but the unpadded one does, the
//!   writer forgot the pad and the unpadded position is used).
//! * The RIFF size field is not trusted (many writers get it wrong): the walk is
//!   bounded by the buffer. A `data` chunk running past the end of the buffer is
//!   [`Error::TruncatedData`]; any other chunk doing so is [`Error::ChunkOverrun`].
//! * A trailing partial frame in `data` is ignored (`frames = len / block_align`).
//! * `RF64`/`BW64` (64-bit size) files are rejected with [`Error::Rf64`].
//!
//! [`decode_mono_into`] never panics, even on a hand-made inconsistent [`WavInfo`]:
//! it clamps to the bytes present and writes zeros where it cannot decode.
//! The hot path (16-bit mono) is one tight loop over `[u8; 2]` chunks; every format
//! is matched once, then a loop monomorphised for that sample width runs.

use std::fmt;

/// How samples are stored in the `data` chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleFormat {
    /// 8-bit unsigned PCM, 128 = silence.
    U8,
    /// 16-bit signed PCM.
    I16,
    /// 24-bit signed PCM, packed in 3 bytes.
    I24,
    /// 32-bit signed PCM.
    I32,
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
}

impl SampleFormat {
    /// Bytes one sample of one channel occupies.
    pub const fn bytes_per_sample(self) -> usize {
        match self {
            SampleFormat::U8 => 1,
            SampleFormat::I16 => 2,
            SampleFormat::I24 => 3,
            SampleFormat::I32 | SampleFormat::F32 => 4,
            SampleFormat::F64 => 8,
        }
    }
}

/// What [`parse`] learned from the header; see the module doc for its invariants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WavInfo {
    pub sample_rate: u32,
    pub channels: u16,
    pub format: SampleFormat,
    pub block_align: u16,
    /// byte offset of the first sample in the buffer
    pub data_offset: usize,
    /// number of sample frames (data bytes / block_align)
    pub frames: usize,
}

/// Why a buffer is not a WAV file this decoder accepts. `Display` is a sentence
/// fragment without the path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("not a RIFF/WAVE file (starts with {})", ByteStr(.magic))]
    NotRiff { magic: [u8; 4] },
    #[error("RIFF file of form type {} is not WAVE", ByteStr(.form))]
    NotWave { form: [u8; 4] },
    #[error("{} not supported (64-bit WAV)", .magic.escape_ascii())]
    Rf64 { magic: [u8; 4] },
    #[error(
        "truncated header: {len} bytes, a WAV header needs at least {}",
        MIN_HEADER
    )]
    TruncatedHeader { len: usize },
    #[error(
        "chunk {} at byte {offset} declares {declared} bytes but only {available} follow \
         (chunk runs past end of file)",
        ByteStr(.id)
    )]
    ChunkOverrun {
        id: [u8; 4],
        offset: usize,
        declared: u32,
        available: usize,
    },
    #[error("data chunk declares {declared} bytes but only {available} follow (truncated data)")]
    TruncatedData { declared: u32, available: usize },
    #[error("fmt chunk missing")]
    MissingFmt,
    #[error("data chunk missing")]
    MissingData,
    #[error("fmt chunk is {size} bytes, needs at least {needed}")]
    FmtTooSmall { size: u32, needed: u32 },
    #[error(
        "unsupported codec: {}{}; expected PCM or IEEE float",
        CodecName(*.tag),
        if *.extensible { " in WAVE_FORMAT_EXTENSIBLE" } else { "" }
    )]
    UnsupportedCodec { tag: u16, extensible: bool },
    #[error(
        "WAVE_FORMAT_EXTENSIBLE sub-format {} is not a standard KSDATAFORMAT GUID",
        Guid(.guid)
    )]
    UnknownSubFormat { guid: [u8; 16] },
    #[error("zero channels")]
    ZeroChannels,
    #[error("sample rate 0 Hz")]
    ZeroSampleRate,
    #[error("unsupported bit depth {bits} for {}", if *.float { "IEEE float" } else { "PCM" })]
    UnsupportedBitDepth { bits: u16, float: bool },
    #[error(
        "block_align {found} does not match {channels} channels × {bits} bits (expected {expected})"
    )]
    BlockAlign {
        found: u16,
        channels: u16,
        bits: u16,
        expected: u32,
    },
    #[error("sample rate {found} Hz, expected {expected} Hz")]
    SampleRate { found: u32, expected: u32 },
    #[error("empty data chunk (0 sample frames; {bytes} data bytes, {block_align} per frame)")]
    EmptyData { bytes: usize, block_align: u16 },
    #[error(
        "fmt chunk's cbSize declares {declared} extension bytes but the {size}-byte chunk \
         holds {available}"
    )]
    ExtensionOverrun {
        declared: u16,
        size: u32,
        available: u32,
    },
    #[error(
        "wValidBitsPerSample {valid} exceeds the {bits}-bit container; expected at most {bits}"
    )]
    ValidBits { valid: u16, bits: u16 },
    #[error(
        "sample frame {frame}, channel {channel} is {value} (not a finite float32 value); \
         expected finite IEEE-float samples"
    )]
    NonFinite {
        frame: usize,
        channel: u16,
        value: f64,
    },
}

/// Smallest buffer that can hold RIFF header + 16-byte `fmt ` + `data` header.
const MIN_HEADER: usize = 44;

const TAG_PCM: u16 = 0x0001;
const TAG_FLOAT: u16 = 0x0003;
const TAG_EXTENSIBLE: u16 = 0xFFFE;
/// Bytes 2..16 of every KSDATAFORMAT_SUBTYPE_* GUID derived from a format tag.
const KSDATAFORMAT_SUFFIX: [u8; 14] = [
    0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71,
];

/// Parses the RIFF/WAVE header; see the module doc for the rules.
pub fn parse(bytes: &[u8]) -> Result<WavInfo, Error> {
    if let Some(magic) = bytes.first_chunk::<4>() {
        match magic {
            b"RIFF" => {}
            b"RF64" | b"BW64" => return Err(Error::Rf64 { magic: *magic }),
            _ => return Err(Error::NotRiff { magic: *magic }),
        }
    }
    if bytes.len() >= 12 && &bytes[8..12] != b"WAVE" {
        let form = [bytes[8], bytes[9], bytes[10], bytes[11]];
        return Err(Error::NotWave { form });
    }
    if bytes.len() < MIN_HEADER {
        return Err(Error::TruncatedHeader { len: bytes.len() });
    }

    let mut fmt: Option<Fmt> = None;
    let mut data: Option<(usize, usize)> = None;
    let mut pos = 12usize;
    while fmt.is_none() || data.is_none() {
        let Some(header) = bytes.get(pos..pos.saturating_add(8)) else {
            break;
        };
        let id = [header[0], header[1], header[2], header[3]];
        let declared = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let body = pos + 8;
        let available = bytes.len() - body;
        let size = declared as usize;
        if size > available {
            if &id == b"data" {
                return Err(Error::TruncatedData {
                    declared,
                    available,
                });
            }
            return Err(Error::ChunkOverrun {
                id,
                offset: pos,
                declared,
                available,
            });
        }
        let chunk = &bytes[body..body + size];
        match &id {
            b"fmt " if fmt.is_none() => fmt = Some(parse_fmt(chunk)?),
            b"data" if data.is_none() => data = Some((body, size)),
            _ => {}
        }
        pos = next_chunk(bytes, body + size, size);
    }

    let fmt = fmt.ok_or(Error::MissingFmt)?;
    let (data_offset, data_len) = data.ok_or(Error::MissingData)?;
    let frames = data_len / usize::from(fmt.block_align);
    if frames == 0 {
        return Err(Error::EmptyData {
            bytes: data_len,
            block_align: fmt.block_align,
        });
    }
    let samples = &bytes[data_offset..data_offset + frames * usize::from(fmt.block_align)];
    check_finite(samples, fmt.format, fmt.channels)?;
    Ok(WavInfo {
        sample_rate: fmt.sample_rate,
        channels: fmt.channels,
        format: fmt.format,
        block_align: fmt.block_align,
        data_offset,
        frames,
    })
}

/// The first sample of float `data` that is not finite as `f32`, as an
/// error; integer formats always pass. One branch-free pass per chunk of
/// samples, so the common all-finite case costs a read of the data.
fn check_finite(data: &[u8], format: SampleFormat, channels: u16) -> Result<(), Error> {
    let first_bad = match format {
        SampleFormat::F32 => first_non_finite::<4>(data, |b| f32::from_le_bytes(b).is_finite()),
        SampleFormat::F64 => {
            first_non_finite::<8>(data, |b| f64::from_le_bytes(b).abs() <= f64::from(f32::MAX))
        }
        _ => None,
    };
    let Some(i) = first_bad else {
        return Ok(());
    };
    let value = match format {
        SampleFormat::F32 => f64::from(f32::from_le_bytes(
            data[i * 4..i * 4 + 4].try_into().expect("4 bytes"),
        )),
        _ => f64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().expect("8 bytes")),
    };
    Err(Error::NonFinite {
        frame: i / usize::from(channels),
        channel: (i % usize::from(channels)) as u16,
        value,
    })
}

/// Index of the first `W`-byte sample for which `ok` is false.
fn first_non_finite<const W: usize>(data: &[u8], ok: impl Fn([u8; W]) -> bool) -> Option<usize> {
    const BLOCK: usize = 256;
    let (samples, _) = data.as_chunks::<W>();
    for (b, block) in samples.chunks(BLOCK).enumerate() {
        // `all` without early exit in the block keeps the loop vectorisable.
        if !block.iter().fold(true, |acc, &s| acc & ok(s)) {
            let i = block.iter().position(|&s| !ok(s)).expect("a bad sample");
            return Some(b * BLOCK + i);
        }
    }
    None
}

/// [`parse`], check `sample_rate == expected_rate`, then [`decode_mono_into`].
pub fn decode(bytes: &[u8], expected_rate: u32, out: &mut [f32]) -> Result<WavInfo, Error> {
    let info = parse(bytes)?;
    if info.sample_rate != expected_rate {
        return Err(Error::SampleRate {
            found: info.sample_rate,
            expected: expected_rate,
        });
    }
    decode_mono_into(bytes, &info, out);
    Ok(info)
}

/// Writes `min(info.frames, out.len())` mono samples (mean of channels) to `out`,
/// zero-fills the rest of `out`.
///
/// Scaling per docs/DESIGN.md: int16/32768, int24/2^23, int32/2^31, uint8 (v−128)/128,
/// float as stored (f64 cast to f32). `info` should come from [`parse`] on the same
/// `bytes`; an inconsistent `info` never panics: frames are clamped to the bytes
/// present, and a `block_align` that cannot hold `channels` samples yields zeros.
pub fn decode_mono_into(bytes: &[u8], info: &WavInfo, out: &mut [f32]) {
    let channels = usize::from(info.channels);
    let width = info.format.bytes_per_sample();
    let block_align = usize::from(info.block_align);
    let data = bytes.get(info.data_offset..).unwrap_or(&[]);
    let n = if channels == 0 || block_align != channels * width {
        0
    } else {
        info.frames.min(out.len()).min(data.len() / block_align)
    };
    let (head, tail) = out.split_at_mut(n);
    tail.fill(0.0);
    if n == 0 {
        // Nothing to convert, and `channels` may be 0 (an inconsistent
        // `info`), which no chunking below accepts.
        return;
    }
    let data = &data[..n * block_align];

    // 2^-15, 2^-31, 2^-7 are exact, so multiplying equals numpy's division.
    const S16: f32 = 1.0 / 32768.0;
    const S31: f32 = 1.0 / 2_147_483_648.0;
    const S8: f32 = 1.0 / 128.0;
    match info.format {
        SampleFormat::U8 => convert::<1>(data, channels, head, |[b]| (f32::from(b) - 128.0) * S8),
        SampleFormat::I16 => convert::<2>(data, channels, head, |b| {
            f32::from(i16::from_le_bytes(b)) * S16
        }),
        // The 24-bit value placed in the top bytes of an i32 is v·2^8 (exact in
        // f32), so scaling by 2^-31 gives v/2^23 with the sign for free.
        SampleFormat::I24 => convert::<3>(data, channels, head, |[a, b, c]| {
            i32::from_le_bytes([0, a, b, c]) as f32 * S31
        }),
        SampleFormat::I32 => {
            convert::<4>(data, channels, head, |b| i32::from_le_bytes(b) as f32 * S31)
        }
        SampleFormat::F32 => convert::<4>(data, channels, head, f32::from_le_bytes),
        SampleFormat::F64 => convert::<8>(data, channels, head, |b| f64::from_le_bytes(b) as f32),
    }
}

/// Writes channel `channel` of `min(info.frames, out.len())` frames to `out`
/// (the `first` channel policy), zero-fills the rest; scaling as
/// [`decode_mono_into`]. Never panics: an inconsistent `info` or a channel
/// that does not exist yields zeros.
pub fn decode_channel_into(bytes: &[u8], info: &WavInfo, channel: usize, out: &mut [f32]) {
    let channels = usize::from(info.channels);
    let width = info.format.bytes_per_sample();
    let block_align = usize::from(info.block_align);
    let data = bytes.get(info.data_offset..).unwrap_or(&[]);
    let n = if channel >= channels || block_align != channels * width {
        0
    } else {
        info.frames.min(out.len()).min(data.len() / block_align)
    };
    let (head, tail) = out.split_at_mut(n);
    tail.fill(0.0);
    if n == 0 {
        // `block_align` may be 0 (no channels): nothing to chunk.
        return;
    }
    let frames = data[..n * block_align].chunks_exact(block_align);
    let at = channel * width;
    for (o, frame) in head.iter_mut().zip(frames) {
        let one = WavInfo {
            channels: 1,
            block_align: width as u16,
            data_offset: 0,
            frames: 1,
            ..*info
        };
        let mut v = [0f32; 1];
        decode_mono_into(&frame[at..at + width], &one, &mut v);
        *o = v[0];
    }
}

/// Converts `out.len()` frames of `channels` samples of `W` bytes each from `data`
/// (exactly `out.len() × channels × W` bytes) into their channel mean. Mono and
/// stereo get loops with the channel count known at compile time.
#[inline(always)]
fn convert<const W: usize>(
    data: &[u8],
    channels: usize,
    out: &mut [f32],
    sample: impl Fn([u8; W]) -> f32,
) {
    let (samples, _) = data.as_chunks::<W>();
    match channels {
        1 => {
            // Blocks of one cache line, each prefetching the line `AHEAD`
            // bytes on: the bytes were just DMA'd or copied by a reader on
            // another core, so the loads miss, and the hardware prefetcher
            // stops at every 4 KiB page (measured: 70% of decode's time sat
            // on the first use of a load).
            const AHEAD: usize = 2048;
            let per_line = 64 / W;
            for (o, s) in out.chunks_mut(per_line).zip(samples.chunks(per_line)) {
                prefetch(s.as_ptr().cast::<u8>().wrapping_add(AHEAD));
                for (o, s) in o.iter_mut().zip(s) {
                    *o = sample(*s);
                }
            }
        }
        2 => mean_fixed::<W, 2>(samples, out, sample),
        _ => {
            let divisor = channels as f32;
            for (o, frame) in out.iter_mut().zip(samples.chunks_exact(channels)) {
                *o = frame_sum(frame, &sample) / divisor;
            }
        }
    }
}

/// A hint to load the cache line at `p` (any address: a prefetch never faults).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing architecturally and cannot fault, so
    // any address is fine; SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`convert`] for a channel count `C` known at compile time.
#[inline(always)]
fn mean_fixed<const W: usize, const C: usize>(
    samples: &[[u8; W]],
    out: &mut [f32],
    sample: impl Fn([u8; W]) -> f32,
) {
    let (frames, _) = samples.as_chunks::<C>();
    let divisor = C as f32;
    for (o, frame) in out.iter_mut().zip(frames) {
        *o = frame_sum(frame, &sample) / divisor;
    }
}

/// Left-to-right `f32` sum of one frame's scaled samples (`frame` is non-empty).
/// Starts from the first channel, not 0.0, so a frame of -0.0 stays -0.0 as in
/// numpy's reduction.
#[inline(always)]
fn frame_sum<const W: usize>(frame: &[[u8; W]], sample: &impl Fn([u8; W]) -> f32) -> f32 {
    let mut sum = sample(frame[0]);
    for s in &frame[1..] {
        sum += sample(*s);
    }
    sum
}

/// The validated `fmt ` chunk.
struct Fmt {
    format: SampleFormat,
    channels: u16,
    sample_rate: u32,
    block_align: u16,
}

fn parse_fmt(chunk: &[u8]) -> Result<Fmt, Error> {
    let size = chunk.len() as u32;
    if chunk.len() < 16 {
        return Err(Error::FmtTooSmall { size, needed: 16 });
    }
    let u16_at = |i: usize| u16::from_le_bytes([chunk[i], chunk[i + 1]]);
    let tag = u16_at(0);
    let channels = u16_at(2);
    let sample_rate = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
    let block_align = u16_at(12);
    let bits = u16_at(14);

    if chunk.len() >= 18 {
        let declared = u16_at(16);
        let available = size - 18;
        if u32::from(declared) > available {
            return Err(Error::ExtensionOverrun {
                declared,
                size,
                available,
            });
        }
    }
    let (base, extensible) = if tag == TAG_EXTENSIBLE {
        (extensible_tag(chunk, bits)?, true)
    } else {
        (tag, false)
    };
    let float = match base {
        TAG_PCM => false,
        TAG_FLOAT => true,
        _ => {
            return Err(Error::UnsupportedCodec {
                tag: base,
                extensible,
            });
        }
    };
    if channels == 0 {
        return Err(Error::ZeroChannels);
    }
    if sample_rate == 0 {
        return Err(Error::ZeroSampleRate);
    }
    let format = match (float, bits) {
        (false, 8) => SampleFormat::U8,
        (false, 16) => SampleFormat::I16,
        (false, 24) => SampleFormat::I24,
        (false, 32) => SampleFormat::I32,
        (true, 32) => SampleFormat::F32,
        (true, 64) => SampleFormat::F64,
        _ => return Err(Error::UnsupportedBitDepth { bits, float }),
    };
    let expected = u32::from(channels) * format.bytes_per_sample() as u32;
    if u32::from(block_align) != expected {
        return Err(Error::BlockAlign {
            found: block_align,
            channels,
            bits,
            expected,
        });
    }
    Ok(Fmt {
        format,
        channels,
        sample_rate,
        block_align,
    })
}

/// The codec tag inside a WAVE_FORMAT_EXTENSIBLE `fmt ` chunk (its
/// sub-format GUID), after checking the extension is there and its valid
/// bits fit the container's `bits`.
fn extensible_tag(chunk: &[u8], bits: u16) -> Result<u16, Error> {
    if chunk.len() < 40 {
        return Err(Error::FmtTooSmall {
            size: chunk.len() as u32,
            needed: 40,
        });
    }
    let valid = u16::from_le_bytes([chunk[18], chunk[19]]);
    if valid > bits {
        return Err(Error::ValidBits { valid, bits });
    }
    let mut guid = [0u8; 16];
    guid.copy_from_slice(&chunk[24..40]);
    if guid[2..] != KSDATAFORMAT_SUFFIX {
        return Err(Error::UnknownSubFormat { guid });
    }
    Ok(u16::from_le_bytes([guid[0], guid[1]]))
}

/// Position of the chunk header after a chunk whose body ends at `end` (unpadded)
/// and is `size` bytes long: `end + 1` after an odd size, unless that position
/// does not look like a chunk id while `end` does (a writer that forgot the pad).
fn next_chunk(bytes: &[u8], end: usize, size: usize) -> usize {
    if size.is_multiple_of(2) {
        return end;
    }
    let looks_like_id = |at: usize| {
        bytes
            .get(at..at.saturating_add(4))
            .is_some_and(|id| id.iter().all(|b| (0x20..=0x7E).contains(b)))
    };
    if !looks_like_id(end + 1) && looks_like_id(end) {
        end
    } else {
        end + 1
    }
}

/// Displays bytes as a Rust byte-string literal: `b"ID3\x03"`.
pub(crate) struct ByteStr<'a>(pub(crate) &'a [u8]);

impl fmt::Display for ByteStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("b\"")?;
        for &b in self.0 {
            match b {
                b'"' => f.write_str("\\\"")?,
                b'\\' => f.write_str("\\\\")?,
                0x20..=0x7E => write!(f, "{}", b as char)?,
                _ => write!(f, "\\x{b:02x}")?,
            }
        }
        f.write_str("\"")
    }
}

/// Displays a codec's name and tag: `IMA ADPCM (format tag 0x0011)`.
struct CodecName(u16);

impl fmt::Display for CodecName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            0x0002 => Some("MS ADPCM"),
            0x0006 => Some("A-law"),
            0x0007 => Some("µ-law"),
            0x0011 => Some("IMA ADPCM"),
            0x0031 => Some("GSM 6.10"),
            0x0050 => Some("MPEG"),
            0x0055 => Some("MP3"),
            0x0161 => Some("WMA"),
            0x2000 => Some("AC-3"),
            0xF1AC => Some("FLAC"),
            TAG_EXTENSIBLE => Some("nested WAVE_FORMAT_EXTENSIBLE"),
            _ => None,
        };
        match name {
            Some(name) => write!(f, "{name} (format tag {:#06x})", self.0),
            None => write!(f, "format tag {:#06x}", self.0),
        }
    }
}

/// Displays a GUID stored in little-endian field order in canonical form.
struct Guid<'a>(&'a [u8; 16]);

impl fmt::Display for Guid<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{{{:08X}-{:04X}-{:04X}-",
            u32::from_le_bytes([g[0], g[1], g[2], g[3]]),
            u16::from_le_bytes([g[4], g[5]]),
            u16::from_le_bytes([g[6], g[7]]),
        )?;
        for b in &g[8..10] {
            write!(f, "{b:02X}")?;
        }
        f.write_str("-")?;
        for b in &g[10..] {
            write!(f, "{b:02X}")?;
        }
        f.write_str("}")
    }
}

pub mod extent;

#[cfg(test)]
mod tests;
