//! Ogg Vorbis and MP4 AAC through symphonia: the demuxer and decoder made
//! for the codec, gapless decoding on, packets decoded in order into a
//! [`Sink`], and the length checks each container allows (the sample table
//! and edit list for MP4, see [`super::mp4`]; the last granule for Vorbis).
//! Ogg page integrity was checked before ([`super::check_ogg_pages`]). MP3
//! is [`super::mp3`]'s.

use std::io::Cursor;

use symphonia::core::audio::{AudioBufferRef, Signal};
use symphonia::core::codecs::{CODEC_TYPE_AAC, CodecType, Decoder, DecoderOptions};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::MediaSourceStream;
use symphonia::default::formats::{IsoMp4Reader, OggReader};

use super::{Codec, Error, Head, Sink, mp4, mp4_tables};

/// An opened symphonia stream.
pub(super) struct Stream {
    codec: Codec,
    reader: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track: u32,
    /// Samples to drop at the start (MP4 edit list).
    skip: u64,
    /// The stream's exact length after trimming, where the container
    /// declares it (LAME tag, MP4 sample table).
    expected: Option<u64>,
    /// The most samples the stream holds (Ogg Vorbis: the last granule
    /// position; symphonia's own end trim misses it on short streams).
    cap: Option<u64>,
}

impl Stream {
    pub(super) fn open(
        bytes: &[u8],
        codec: Codec,
        cap: Option<u64>,
    ) -> Result<(Stream, Head), Error> {
        let f = codec.stream();
        let track_info = match codec {
            Codec::Aac => {
                mp4_tables::check(bytes)?;
                Some(mp4::audio_track(bytes)?)
            }
            _ => None,
        };
        let src = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
        let opts = FormatOptions {
            enable_gapless: true,
            ..Default::default()
        };
        let reader: Box<dyn FormatReader> = match codec {
            Codec::Vorbis => Box::new(OggReader::try_new(src, &opts).map_err(|e| map_err(f, e))?),
            Codec::Aac => Box::new(IsoMp4Reader::try_new(src, &opts).map_err(|e| map_err(f, e))?),
            Codec::Opus | Codec::Mp3 => unreachable!("Opus goes to libopus, MP3 to nanomp3"),
        };
        let track = pick_track(reader.as_ref(), codec)?;
        let params = track.codec_params.clone();
        let track_id = track.id;
        let decoder = symphonia::default::get_codecs()
            .make(&params, &DecoderOptions::default())
            .map_err(|e| map_err(f, e))?;
        let sample_rate = params
            .sample_rate
            .filter(|&r| r > 0)
            .ok_or_else(|| Error::malformed(f, "the stream declares no sample rate"))?;
        // An MP4 AAC track's channels are in its AudioSpecificConfig
        // (symphonia leaves them to the decoder; the sample entry's count is
        // a template 2 in files ffmpeg writes).
        let channels = params
            .channels
            .map(|c| c.count())
            .or_else(|| params.extra_data.as_deref().and_then(mp4::asc_channels))
            .filter(|&c| c > 0)
            .ok_or_else(|| Error::malformed(f, "the stream declares no channels"))?;
        let (skip, expected) = match track_info {
            Some(t) => t.trim(sample_rate),
            None => (0, None),
        };
        let head = Head {
            codec,
            sample_rate,
            channels: u16::try_from(channels).unwrap_or(u16::MAX),
        };
        let stream = Stream {
            codec,
            reader,
            decoder,
            track: track_id,
            skip,
            expected,
            cap,
        };
        Ok((stream, head))
    }

    /// Decodes packets in order into `sink` until the stream ends or the
    /// sink is full, then checks and trims the length.
    pub(super) fn decode(mut self, sink: &mut Sink<'_>) -> Result<(), Error> {
        let f = self.codec.stream();
        let mut complete = true;
        let mut skip = self.skip as usize;
        loop {
            if sink.full() {
                complete = false;
                break;
            }
            let packet = match self.reader.next_packet() {
                Ok(p) => p,
                Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break;
                }
                Err(e) => return Err(map_err(f, e)),
            };
            if packet.track_id() != self.track {
                continue;
            }
            let decoded = self.decoder.decode(&packet).map_err(|e| map_err(f, e))?;
            let AudioBufferRef::F32(buf) = decoded else {
                return Err(Error::Unsupported {
                    format: f,
                    what: "a sample format other than float".into(),
                    expected: "float output",
                });
            };
            let nch = buf.spec().channels.count();
            let from = skip.min(buf.frames());
            skip -= from;
            let mut chans: [&[f32]; 8] = [&[]; 8];
            for (c, slot) in chans.iter_mut().enumerate().take(nch.min(8)) {
                *slot = &buf.chan(c)[from..];
            }
            sink.planar(&chans[..nch.min(8)]);
        }
        if let Some(n) = self.expected {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if complete && sink.len() < n {
                return Err(Error::truncated(
                    f,
                    format!(
                        "the header declares {n} samples, the stream holds {} (the file is cut \
                         short)",
                        sink.len()
                    ),
                ));
            }
            sink.truncate(n);
        }
        if let Some(n) = self.cap {
            sink.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        }
        Ok(())
    }
}

/// The track holding `codec`: MP3 and Ogg files have one; in an MP4 it is
/// the AAC track ([`mp4::audio_track`] already named any other codec).
fn pick_track(
    reader: &dyn FormatReader,
    codec: Codec,
) -> Result<&symphonia::core::formats::Track, Error> {
    let f = codec.stream();
    let want: Option<CodecType> = (codec == Codec::Aac).then_some(CODEC_TYPE_AAC);
    let track = match want {
        Some(t) => reader.tracks().iter().find(|tr| tr.codec_params.codec == t),
        None => reader.default_track(),
    };
    track.ok_or_else(|| match codec {
        Codec::Aac => Error::Unsupported {
            format: "MP4",
            what: "an MPEG-4 audio track that is not AAC".into(),
            expected: "AAC-LC",
        },
        _ => Error::malformed(f, "no audio track"),
    })
}

/// A symphonia error as a specific [`Error`] about stream `f`.
pub(super) fn map_err(f: &'static str, e: SymError) -> Error {
    match e {
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Error::truncated(f, "the file ends inside a header or packet")
        }
        SymError::IoError(e) => Error::malformed(f, e.to_string()),
        SymError::DecodeError(m) => Error::malformed(f, m),
        SymError::Unsupported(m) => Error::Unsupported {
            format: f,
            what: m.to_owned(),
            expected: "what soundfile/ffmpeg decode for this codec",
        },
        SymError::LimitError(m) => Error::malformed(f, format!("a limit was exceeded: {m}")),
        SymError::SeekError(_) | SymError::ResetRequired => {
            Error::malformed(f, "the stream needs a decoder reset mid-way")
        }
    }
}
