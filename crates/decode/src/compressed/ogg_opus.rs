//! Ogg Opus through libopus (the `opus` crate over the libopus that
//! `opusic-sys` builds from source and links statically), the packets from
//! the `ogg` crate's demuxer (page CRCs checked), and libsndfile's alignment
//! (its `ogg_opus.c`, the reference soundfile reads Opus with):
//! * the output rate is the Opus rate at or above the header's input rate
//!   (8, 12, 16, 24 or 48 kHz), libopus decoding at that rate;
//! * positions are granules (48 kHz samples); the stream starts at the first
//!   audio page's granule less the duration of its packets;
//! * the pre-skip is dropped from the start and, on the end-of-stream page,
//!   whatever lies past its granule position from the end;
//! * the header's output gain is applied by libopus (`OPUS_SET_GAIN`).
//!
//! Channel mapping family 0 (mono and stereo) is decoded; other families
//! (surround) are [`Error::Unsupported`].

use std::io::Cursor;

use ogg::reading::{OggReadError, PacketReader};

use super::{Codec, Error, Head, Sink};

const F: &str = "Ogg Opus";

/// The most frames one Opus packet holds (120 ms at 48 kHz).
pub(super) const MAX_PACKET_FRAMES: usize = 5760;

/// The fields of `OpusHead` this decoder uses.
#[derive(Clone, Copy, Debug)]
struct OpusHead {
    channels: u8,
    preskip: u16,
    input_rate: u32,
    gain: i16,
}

/// An opened Ogg Opus stream: headers read, decoder made.
pub(super) struct Stream {
    reader: PacketReader<Cursor<Vec<u8>>>,
    decoder: opus::Decoder,
    serial: u32,
    head: OpusHead,
    /// 48 kHz granules per output sample.
    sr_factor: u64,
}

impl Stream {
    pub(super) fn open(bytes: &[u8]) -> Result<(Stream, Head), Error> {
        let mut reader = PacketReader::new(Cursor::new(bytes.to_vec()));
        let first = next(&mut reader)?
            .ok_or_else(|| Error::truncated(F, "the file ends before the OpusHead packet"))?;
        let serial = first.stream_serial();
        let head = parse_head(&first.data)?;
        let tags = next_of(&mut reader, serial)?
            .ok_or_else(|| Error::truncated(F, "the file ends before the OpusTags packet"))?;
        if !tags.data.starts_with(b"OpusTags") {
            return Err(Error::malformed(F, "the second packet is not OpusTags"));
        }
        let (decoder, h, sr_factor) = make_decoder(&head)?;
        let stream = Stream {
            reader,
            decoder,
            serial,
            head,
            sr_factor,
        };
        Ok((stream, h))
    }

    /// Decodes the audio packets in order (libsndfile's
    /// `ogg_opus_read_refill`), trimming by granule position.
    pub(super) fn decode(mut self, sink: &mut Sink<'_>) -> Result<(), Error> {
        let nch = usize::from(self.head.channels);
        let preskip = u64::from(self.head.preskip);
        let mut pcm = vec![0f32; MAX_PACKET_FRAMES * nch];
        let mut page = self.first_page()?;
        let mut pkt_pos = start_granule(&page)?;
        while !page.packets.is_empty() {
            for data in &page.packets {
                if sink.full() {
                    return Ok(());
                }
                let n = self
                    .decoder
                    .decode_float(data, &mut pcm, false)
                    .map_err(|e| {
                        Error::malformed(
                            F,
                            format!("libopus refused a packet at granule {pkt_pos}: {e}"),
                        )
                    })?;
                let pkt_gp = pkt_pos + n as u64 * self.sr_factor;
                let len = if pkt_gp <= page.granule {
                    n
                } else if page.eos {
                    (page.granule.saturating_sub(pkt_pos) / self.sr_factor) as usize
                } else {
                    return Err(Error::malformed(
                        F,
                        format!(
                            "a page's granule position {} is less than the samples of its \
                             packets ({pkt_gp})",
                            page.granule
                        ),
                    ));
                };
                let loc = if pkt_pos < preskip {
                    (((preskip - pkt_pos) / self.sr_factor) as usize).min(len)
                } else {
                    0
                };
                sink.interleaved(&pcm[loc * nch..len * nch], nch);
                pkt_pos = pkt_gp;
            }
            if page.eos {
                break;
            }
            page = self.page()?;
        }
        Ok(())
    }

    /// The first page with audio packets.
    fn first_page(&mut self) -> Result<Page, Error> {
        let page = self.page()?;
        if page.packets.is_empty() {
            return Err(Error::Empty { format: F });
        }
        Ok(page)
    }

    /// The packets that complete on the next page of this stream, with the
    /// page's granule position and end-of-stream flag (empty at the end).
    fn page(&mut self) -> Result<Page, Error> {
        let mut page = Page::default();
        while let Some(p) = next_of(&mut self.reader, self.serial)? {
            let last = p.last_in_page();
            page.eos |= p.last_in_stream();
            page.granule = p.absgp_page();
            page.packets.push(p.data);
            if last {
                break;
            }
        }
        Ok(page)
    }
}

/// libsndfile's output rate for an Opus stream of `input_rate` Hz: the
/// Opus rate at or above it, as 48 kHz granules per sample.
fn sr_factor(input_rate: u32) -> u32 {
    match input_rate {
        r if r > 24_000 => 1,
        r if r > 16_000 => 2,
        r if r > 12_000 => 3,
        r if r > 8_000 => 4,
        _ => 6,
    }
}

/// The libopus decoder for `head`, with the stream's head and granules per
/// output sample.
fn make_decoder(head: &OpusHead) -> Result<(opus::Decoder, Head, u64), Error> {
    let sr_factor = sr_factor(head.input_rate);
    let rate = 48_000 / sr_factor;
    let layout = if head.channels == 1 {
        opus::Channels::Mono
    } else {
        opus::Channels::Stereo
    };
    let mut decoder = opus::Decoder::new(rate, layout)
        .map_err(|e| Error::malformed(F, format!("libopus refused the header: {e}")))?;
    decoder
        .set_gain(i32::from(head.gain))
        .map_err(|e| Error::malformed(F, format!("libopus refused the output gain: {e}")))?;
    let h = Head {
        codec: Codec::Opus,
        sample_rate: rate,
        channels: u16::from(head.channels),
    };
    Ok((decoder, h, u64::from(sr_factor)))
}

/// An `OpusHead` packet's output rate, granules per output sample and
/// pre-skip (plan time, [`super::index`]).
pub(super) fn rates(packet: &[u8]) -> Option<(u32, u64, u64)> {
    let head = parse_head(packet).ok()?;
    let f = sr_factor(head.input_rate);
    Some((48_000 / f, u64::from(f), u64::from(head.preskip)))
}

/// A decoder for part of a stream: the `OpusHead` packet's decoder, head
/// and granules per output sample ([`super::part`]).
pub(super) fn part_decoder(packet: &[u8]) -> Result<(opus::Decoder, Head, u64), Error> {
    make_decoder(&parse_head(packet)?)
}

/// The packets completing on one page.
#[derive(Default)]
struct Page {
    packets: Vec<Vec<u8>>,
    granule: u64,
    eos: bool,
}

/// The granule position the stream starts at: the first audio page's
/// granule less its packets' duration (0 when that page is also the last,
/// whose granule may be short of its samples).
fn start_granule(page: &Page) -> Result<u64, Error> {
    let mut duration = 0u64;
    for p in &page.packets {
        duration += opus::packet::get_nb_samples(p, 48_000).unwrap_or(0) as u64;
    }
    if duration == 0 {
        return Err(Error::malformed(F, "the first audio page holds no samples"));
    }
    if page.eos {
        if duration < page.granule {
            return Err(Error::malformed(
                F,
                "the only audio page's granule position exceeds its samples (an ambiguous offset)",
            ));
        }
        return Ok(0);
    }
    page.granule.checked_sub(duration).ok_or_else(|| {
        Error::malformed(
            F,
            format!(
                "the first audio page's granule position {} is less than its {duration} samples",
                page.granule
            ),
        )
    })
}

fn parse_head(p: &[u8]) -> Result<OpusHead, Error> {
    if p.len() < 19 || !p.starts_with(b"OpusHead") {
        return Err(Error::malformed(
            F,
            format!(
                "the OpusHead packet is {} bytes, at least 19 expected",
                p.len()
            ),
        ));
    }
    if p[8] >> 4 != 0 {
        return Err(Error::Unsupported {
            format: F,
            what: format!("OpusHead version {}", p[8]),
            expected: "version 0.x",
        });
    }
    let head = OpusHead {
        channels: p[9],
        preskip: u16::from_le_bytes([p[10], p[11]]),
        input_rate: u32::from_le_bytes([p[12], p[13], p[14], p[15]]),
        gain: i16::from_le_bytes([p[16], p[17]]),
    };
    let family = p[18];
    if head.channels == 0 {
        return Err(Error::malformed(F, "the OpusHead declares 0 channels"));
    }
    if family != 0 || head.channels > 2 {
        return Err(Error::Unsupported {
            format: F,
            what: format!(
                "{} channels in channel mapping family {family}",
                head.channels
            ),
            expected: "mono or stereo (mapping family 0)",
        });
    }
    Ok(head)
}

/// The next packet of any stream.
fn next(reader: &mut PacketReader<Cursor<Vec<u8>>>) -> Result<Option<ogg::Packet>, Error> {
    reader.read_packet().map_err(ogg_err)
}

/// The next packet of stream `serial` (other multiplexed streams skipped).
fn next_of(
    reader: &mut PacketReader<Cursor<Vec<u8>>>,
    serial: u32,
) -> Result<Option<ogg::Packet>, Error> {
    loop {
        match next(reader)? {
            Some(p) if p.stream_serial() != serial => continue,
            p => return Ok(p),
        }
    }
}

fn ogg_err(e: OggReadError) -> Error {
    match e {
        OggReadError::HashMismatch(..) => {
            Error::malformed("Ogg", "a page failed its CRC check (damaged bytes)")
        }
        OggReadError::ReadError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Error::truncated("Ogg", "the file ends inside a page")
        }
        e => Error::malformed("Ogg", e.to_string()),
    }
}
