//! Part of an MP3, Ogg or MP4 AAC stream, as [`super::index`] plans it: MP3
//! frames from a frame boundary, an Ogg stream's header pages followed by
//! its pages from a page boundary, or MP4 access units behind a header
//! that gives the AudioSpecificConfig and where each unit lies
//! ([`aac_setup`]). The codec decoders are fed the packets directly
//! (nanomp3's MP3 frame decoder, as in [`super::mp3`]; symphonia's Vorbis
//! and AAC decoders; libopus), no demuxer; so each Ogg page's checksum is
//! checked here, as the demuxers check it on the whole-file path, and a
//! damaged page is [`Error::Malformed`]. An MP3 frame whose bit reservoir
//! lies before the part decodes to the frame's length in silence
//! (pre-roll, dropped); from the frames the index's pre-roll covers on, the
//! decoder's state (reservoir, overlap, synthesis window) is the whole-file
//! decode's, so the samples are bit for bit the same.
//!
//! The part's first decoded sample is placed in the stream: MP3, AAC and
//! Opus by the planned position of its first packet ([`LossyPart::first`]), Vorbis
//! by the first page in the part that ends a decoded packet (its granule
//! less the samples decoded so far; the first packet only primes the
//! overlap). Positions before the whole-file decode's first
//! sample ([`LossyPart::origin`]: MP3's encoder delay, the MP4 edit list's
//! media time, Opus's pre-skip) are
//! dropped as it drops them, and the part ends where it ends
//! ([`LossyPart::length`]), so sample `i` of the output is sample
//! `base + i` of the whole-file decode. The caller drops the pre-roll (the
//! samples between `base` and the segment).

use symphonia::core::audio::{AudioBufferRef, Signal};
use symphonia::core::codecs::{
    CODEC_TYPE_AAC, CODEC_TYPE_VORBIS, CodecParameters, Decoder, DecoderOptions,
};
use symphonia::core::formats::Packet;

use super::frames::{Mp3Frame, OggPage, Packets};
use super::{Codec, Error, Head, Sink, guarded, mp3, ogg_opus, symph};
use crate::policy::Mix;
use crate::segment::LossyPart;

/// An opened part: its codec setup read, ready to decode.
pub struct Part<'a> {
    bytes: &'a [u8],
    head: Head,
    part: LossyPart,
    codec: PartCodec,
}

enum PartCodec {
    Mp3(mp3::Frames),
    Aac {
        decoder: Box<dyn Decoder>,
        /// Each access unit's offset and size in the bytes.
        units: Vec<(usize, usize)>,
    },
    Vorbis {
        decoder: Box<dyn Decoder>,
        serial: u32,
        /// Where the audio pages start in the bytes.
        audio: usize,
    },
    Opus {
        decoder: Box<opus::Decoder>,
        serial: u32,
        audio: usize,
        factor: u64,
    },
}

/// Opens a part: the first MP3 frame header, or the Ogg header packets.
pub fn open_part(bytes: &[u8], part: LossyPart) -> Result<Part<'_>, Error> {
    guarded(|| {
        let (head, codec) = if bytes.starts_with(AAC_PART) {
            aac_open(bytes)?
        } else if bytes.starts_with(b"OggS") {
            ogg_setup(bytes)?
        } else {
            mp3_setup(bytes)?
        };
        Ok(Part {
            bytes,
            head,
            part,
            codec,
        })
    })
}

fn mp3_setup(bytes: &[u8]) -> Result<(Head, PartCodec), Error> {
    const F: &str = "MP3";
    let fr = Mp3Frame::parse(bytes)
        .ok_or_else(|| Error::malformed(F, "the part does not start with a frame header"))?;
    let head = Head {
        codec: Codec::Mp3,
        sample_rate: fr.sample_rate,
        channels: fr.channels,
    };
    Ok((head, PartCodec::Mp3(mp3::Frames::new(fr.sample_rate))))
}

fn make(params: &CodecParameters, f: &'static str) -> Result<Box<dyn Decoder>, Error> {
    symphonia::default::get_codecs()
        .make(params, &DecoderOptions::default())
        .map_err(|e| symph::map_err(f, e))
}

/// The header packets of the first stream, and where its audio pages start.
fn ogg_setup(bytes: &[u8]) -> Result<(Head, PartCodec), Error> {
    const F: &str = "Ogg";
    let mut pos = 0;
    let mut headers = Vec::<Vec<u8>>::new();
    let mut packets = Packets::default();
    let mut serial = None;
    loop {
        let page = OggPage::parse(&bytes[pos..])
            .filter(|p| pos + p.len() <= bytes.len())
            .ok_or_else(|| Error::truncated(F, "the part ends inside its header pages"))?;
        check_page(&page, &bytes[pos..], pos)?;
        let this = *serial.get_or_insert(page.serial);
        if page.serial == this {
            let body = &bytes[pos..pos + page.len()];
            packets.page(&page, body, |p, _| headers.push(p.to_vec()));
        }
        pos += page.len();
        let opus = headers.first().is_some_and(|h| h.starts_with(b"OpusHead"));
        if headers.len() >= if opus { 2 } else { 3 } {
            break;
        }
    }
    let serial = serial.expect("a page was read");
    if headers[0].starts_with(b"OpusHead") {
        let (decoder, head, factor) = ogg_opus::part_decoder(&headers[0])?;
        let codec = PartCodec::Opus {
            decoder: Box::new(decoder),
            serial,
            audio: pos,
            factor,
        };
        return Ok((head, codec));
    }
    let ident = &headers[0];
    if !ident.starts_with(b"\x01vorbis") || ident.len() < 30 {
        return Err(Error::malformed(
            "Ogg Vorbis",
            "the part's first packet is no Vorbis identification header",
        ));
    }
    let mut extra = ident.clone();
    extra.extend_from_slice(&headers[2]);
    let mut params = CodecParameters::new();
    params
        .for_codec(CODEC_TYPE_VORBIS)
        .with_extra_data(extra.into_boxed_slice());
    let decoder = make(&params, "Ogg Vorbis")?;
    let head = Head {
        codec: Codec::Vorbis,
        sample_rate: u32::from_le_bytes(ident[12..16].try_into().expect("4 bytes")),
        channels: u16::from(ident[11]),
    };
    let codec = PartCodec::Vorbis {
        decoder,
        serial,
        audio: pos,
    };
    Ok((head, codec))
}

/// Places decoded samples in the whole-file decode.
struct Place {
    origin: u64,
    /// Stream positions per output sample.
    factor: u64,
    /// The whole-file sample to stop at (the segment's end or the stream's).
    stop: u64,
    /// The whole-file sample of `out[0]`, once known.
    base: Option<u64>,
    /// Samples still to drop before the origin.
    skip: usize,
}

impl Place {
    /// The first sample in `sink` is at stream position `at`.
    fn start(&mut self, at: u64, sink: &mut Sink<'_>) {
        let (base, skip) = if at >= self.origin {
            ((at - self.origin) / self.factor, 0)
        } else {
            (0, ((self.origin - at) / self.factor) as usize)
        };
        self.base = Some(base);
        self.skip = skip;
        self.dropped(0, sink);
        sink.max_frames = usize::try_from(self.stop.saturating_sub(base)).unwrap_or(usize::MAX);
    }

    /// Drops what is left to skip from `sink` past `from`.
    fn dropped(&mut self, from: usize, sink: &mut Sink<'_>) {
        let n = self.skip.min(sink.out.len() - from);
        sink.out.drain(from..from + n);
        self.skip -= n;
    }

    /// Appends through `push`, dropping what lies before the origin.
    fn push(&mut self, sink: &mut Sink<'_>, push: impl FnOnce(&mut Sink<'_>)) {
        let from = sink.out.len();
        push(sink);
        self.dropped(from, sink);
    }
}

impl Part<'_> {
    pub fn head(&self) -> Head {
        self.head
    }

    /// Decodes into `out` (cleared first) the whole-file samples from the
    /// part's first up to `end` (exclusive; the stream's end at most), and
    /// returns the whole-file index of `out[0]`.
    pub fn decode(
        self,
        channels: impl Into<Mix>,
        end: u64,
        out: &mut Vec<f32>,
    ) -> Result<u64, Error> {
        out.clear();
        let stop = end.min(self.part.length.unwrap_or(u64::MAX));
        let mut sink = Sink::new(out, channels.into(), usize::MAX);
        let mut place = Place {
            origin: self.part.origin,
            factor: 1,
            stop,
            base: None,
            skip: 0,
        };
        let codec = self.head.codec;
        let r = guarded(|| match self.codec {
            PartCodec::Mp3(f) => mp3(self.bytes, self.part, f, &mut place, &mut sink),
            PartCodec::Aac { decoder, units } => aac(
                self.bytes, &units, self.part, decoder, &mut place, &mut sink,
            ),
            PartCodec::Vorbis {
                mut decoder,
                serial,
                audio,
            } => ogg(
                &self.bytes[audio..],
                serial,
                &mut place,
                &mut sink,
                |data, sink, place| vorbis_packet(decoder.as_mut(), data, sink, place),
            ),
            PartCodec::Opus {
                mut decoder,
                serial,
                audio,
                factor,
            } => {
                place.factor = factor;
                if let Some(at) = self.part.first {
                    place.start(at, &mut sink);
                }
                let nch = usize::from(self.head.channels);
                let mut pcm = vec![0f32; ogg_opus::MAX_PACKET_FRAMES * nch];
                ogg(
                    &self.bytes[audio..],
                    serial,
                    &mut place,
                    &mut sink,
                    |data, sink, place| {
                        let n = decoder.decode_float(data, &mut pcm, false).map_err(|e| {
                            Error::malformed("Ogg Opus", format!("libopus refused a packet: {e}"))
                        })?;
                        place.push(sink, |s| s.interleaved(&pcm[..n * nch], nch));
                        Ok(())
                    },
                )
            }
        });
        if let Err(e) = r {
            sink.out.clear();
            return Err(e);
        }
        let base = place.base.ok_or_else(|| {
            Error::malformed(
                codec.stream(),
                "no page of the part gives a granule position",
            )
        })?;
        let keep = usize::try_from(stop.saturating_sub(base)).unwrap_or(usize::MAX);
        sink.out.truncate(keep);
        Ok(base)
    }
}

/// The start of an AAC part's header ([`aac_setup`]); no MP3 frame sync.
const AAC_PART: &[u8; 8] = b"\0AACpart";

/// The bytes are an AAC part ([`aac_setup`]'s header, then its access
/// units), not a file.
pub fn is_aac_part(bytes: &[u8]) -> bool {
    bytes.starts_with(AAC_PART)
}

/// The header of every part of an MP4 AAC track: [`AAC_PART`], the rate
/// (u32), channels (u16) and the AudioSpecificConfig (u16 length, bytes).
/// [`super::index`] appends the part's access units: their count (u32),
/// then each one's offset in the bytes that follow the header (u64) and
/// size (u32).
pub(super) fn aac_setup(rate: u32, channels: u16, asc: &[u8]) -> Option<Vec<u8>> {
    let mut h = AAC_PART.to_vec();
    h.extend_from_slice(&rate.to_be_bytes());
    h.extend_from_slice(&channels.to_be_bytes());
    h.extend_from_slice(&u16::try_from(asc.len()).ok()?.to_be_bytes());
    h.extend_from_slice(asc);
    Some(h)
}

/// An AAC part's header read: the decoder made from the AudioSpecificConfig
/// (as symphonia's MP4 demuxer makes it for the whole-file decode) and the
/// access units located in the bytes.
fn aac_open(bytes: &[u8]) -> Result<(Head, PartCodec), Error> {
    const F: &str = "MP4 AAC";
    let cut = || Error::truncated(F, "the part ends inside its header");
    let mut at = AAC_PART.len();
    let mut take = |n: usize| -> Result<&[u8], Error> {
        let b = bytes.get(at..at + n).ok_or_else(cut)?;
        at += n;
        Ok(b)
    };
    let be = |b: &[u8]| b.iter().fold(0u64, |a, &v| (a << 8) | u64::from(v));
    let rate = be(take(4)?) as u32;
    let channels = be(take(2)?) as u16;
    let asc_len = be(take(2)?) as usize;
    let asc = take(asc_len)?.to_vec();
    let n = be(take(4)?) as usize;
    let mut units = Vec::with_capacity(n.min(bytes.len() / 12));
    for _ in 0..n {
        let (off, size) = (be(take(8)?), be(take(4)?));
        units.push((usize::try_from(off).unwrap_or(usize::MAX), size as usize));
    }
    let body = at;
    let units = units.into_iter().map(|(o, s)| (body.saturating_add(o), s));
    let mut params = CodecParameters::new();
    params
        .for_codec(CODEC_TYPE_AAC)
        .with_sample_rate(rate)
        .with_extra_data(asc.into_boxed_slice());
    let decoder = make(&params, F)?;
    let head = Head {
        codec: Codec::Aac,
        sample_rate: rate,
        channels,
    };
    let units = units.collect();
    Ok((head, PartCodec::Aac { decoder, units }))
}

/// Access unit after access unit of an AAC part, the first placed at
/// [`LossyPart::first`] (the sum of the durations before it).
fn aac(
    bytes: &[u8],
    units: &[(usize, usize)],
    part: LossyPart,
    mut decoder: Box<dyn Decoder>,
    place: &mut Place,
    sink: &mut Sink<'_>,
) -> Result<(), Error> {
    const F: &str = "MP4 AAC";
    place.start(part.first.unwrap_or(0), sink);
    for &(at, size) in units {
        if sink.full() {
            break;
        }
        let data = bytes
            .get(at..at.saturating_add(size))
            .ok_or_else(|| Error::truncated(F, "the part ends inside an access unit"))?;
        let packet = Packet::new_from_slice(0, 0, 1024, data);
        let buf = decoder.decode(&packet).map_err(|e| symph::map_err(F, e))?;
        place.push(sink, |s| planar(buf, s));
    }
    Ok(())
}

/// Frame after frame of an MP3 part.
fn mp3(
    bytes: &[u8],
    part: LossyPart,
    mut frames: mp3::Frames,
    place: &mut Place,
    sink: &mut Sink<'_>,
) -> Result<(), Error> {
    const F: &str = "MP3";
    place.start(part.first.unwrap_or(0), sink);
    let mut pos = 0;
    while pos < bytes.len() && !sink.full() {
        let fr = Mp3Frame::parse(&bytes[pos..]).ok_or_else(|| {
            Error::malformed(F, format!("no frame header at byte {pos} of the part"))
        })?;
        if bytes.len() - pos < fr.size {
            return Err(Error::truncated(F, "the part ends inside a frame"));
        }
        // The rest of the part, so that the decoder sees the next header.
        let (used, pcm, nch) = frames.next(&bytes[pos..], pos)?;
        if used != fr.size || pcm.len() != fr.samples as usize * nch {
            return Err(Error::malformed(
                F,
                format!("the frame at byte {pos} of the part does not decode to one frame"),
            ));
        }
        place.push(sink, |s| s.interleaved(pcm, nch));
        pos += fr.size;
    }
    Ok(())
}

fn vorbis_packet(
    decoder: &mut dyn Decoder,
    data: &[u8],
    sink: &mut Sink<'_>,
    place: &mut Place,
) -> Result<(), Error> {
    let packet = Packet::new_from_slice(0, 0, 0, data);
    let buf = decoder
        .decode(&packet)
        .map_err(|e| symph::map_err("Ogg Vorbis", e))?;
    place.push(sink, |s| planar(buf, s));
    Ok(())
}

/// A decoded buffer's channels into `sink`.
fn planar(buf: AudioBufferRef<'_>, sink: &mut Sink<'_>) {
    let AudioBufferRef::F32(buf) = buf else {
        return;
    };
    let nch = buf.spec().channels.count().min(8);
    let mut chans: [&[f32]; 8] = [&[]; 8];
    for (c, slot) in chans.iter_mut().enumerate().take(nch) {
        *slot = buf.chan(c);
    }
    sink.planar(&chans[..nch]);
}

/// A page of a part whose bytes are not the ones its checksum was made
/// over is damaged: malformed, as the whole-file decode finds it (the `ogg`
/// crate and symphonia's Ogg reader check every page's checksum).
fn check_page(page: &OggPage, bytes: &[u8], pos: usize) -> Result<(), Error> {
    if page.checksum_ok(bytes) {
        return Ok(());
    }
    Err(Error::malformed(
        "Ogg",
        format!(
            "the page at byte {pos} of the segment's pages fails its CRC check (damaged bytes)"
        ),
    ))
}

/// The audio pages of an Ogg part: `packet` decodes each packet of stream
/// `serial` into the sink; the first page that ends a decoded packet
/// places what came out.
fn ogg(
    bytes: &[u8],
    serial: u32,
    place: &mut Place,
    sink: &mut Sink<'_>,
    mut packet: impl FnMut(&[u8], &mut Sink<'_>, &mut Place) -> Result<(), Error>,
) -> Result<(), Error> {
    const F: &str = "Ogg";
    let mut pos = 0;
    let mut packets = Packets::default();
    let mut decoded = false;
    let mut page_packets = Vec::new();
    while pos < bytes.len() {
        let page = OggPage::parse(&bytes[pos..])
            .filter(|p| pos + p.len() <= bytes.len())
            .ok_or_else(|| {
                Error::truncated(F, format!("the part ends inside a page at byte {pos}"))
            })?;
        check_page(&page, &bytes[pos..], pos)?;
        let body = &bytes[pos..pos + page.len()];
        pos += page.len();
        if page.serial != serial {
            continue;
        }
        page_packets.clear();
        packets.page(&page, body, |p, _| page_packets.push(p.to_vec()));
        for p in &page_packets {
            if sink.full() {
                return Ok(());
            }
            packet(p, sink, place)?;
            decoded = true;
        }
        if place.base.is_none() && decoded && page.has_granule() {
            let out = sink.out.len() as u64 * place.factor;
            let at = page.granule.checked_sub(out).ok_or_else(|| {
                Error::malformed(
                    F,
                    format!(
                        "a page's granule position {} is less than the samples before it",
                        page.granule
                    ),
                )
            })?;
            place.start(at, sink);
        }
    }
    Ok(())
}
