//! MPEG audio layer III frame headers and Ogg page headers, read without
//! decoding: enough to hop from one frame or page to the next, at plan time
//! ([`super::index`]) and when a part is decoded ([`super::part`]).

/// One MP3 frame header (layer III, not free format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mp3Frame {
    /// Bytes of the whole frame, header included.
    pub size: usize,
    /// Samples it decodes to (1,152 for MPEG-1, 576 for MPEG-2 and 2.5).
    pub samples: u32,
    pub sample_rate: u32,
    pub channels: u16,
    /// Version and rate bits: every frame of a stream has the same.
    pub kind: u8,
}

impl Mp3Frame {
    /// The header in the first 4 bytes of `h`, or `None` when they are no
    /// layer III header melforge can hop over.
    pub fn parse(h: &[u8]) -> Option<Mp3Frame> {
        let &[a, b, c, d] = h.first_chunk::<4>()?;
        if a != 0xFF || b & 0xE0 != 0xE0 {
            return None;
        }
        let version = (b >> 3) & 3; // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
        let layer = (b >> 1) & 3;
        let bitrate = usize::from(c >> 4);
        let rate = usize::from((c >> 2) & 3);
        if version == 1 || layer != 1 || bitrate == 0 || bitrate == 15 || rate == 3 {
            return None;
        }
        const V1: [u32; 15] = [
            0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
        ];
        const V2: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
        const RATES: [u32; 3] = [44_100, 48_000, 32_000];
        let shift = match version {
            3 => 0,
            2 => 1,
            _ => 2,
        };
        let sample_rate = RATES[rate] >> shift;
        let (kbps, per) = if version == 3 {
            (V1[bitrate], 144)
        } else {
            (V2[bitrate], 72)
        };
        let pad = usize::from((c >> 1) & 1);
        let size = (per * kbps * 1000 / sample_rate) as usize + pad;
        Some(Mp3Frame {
            size,
            samples: if version == 3 { 1152 } else { 576 },
            sample_rate,
            channels: if d >> 6 == 3 { 1 } else { 2 },
            kind: b & 0x18 | c & 0x0C,
        })
    }
}

/// Trailing tags an MP3 file may end with after its last frame.
pub(super) fn is_trailing_tag(bytes: &[u8]) -> bool {
    bytes.starts_with(b"TAG") || bytes.starts_with(b"APETAGEX") || bytes.starts_with(b"LYRICS")
}

/// One Ogg page header: its fixed 27 bytes and lacing table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OggPage {
    pub granule: u64,
    /// Bit 0: starts with a continued packet; bit 2: end of stream.
    pub flags: u8,
    pub serial: u32,
    /// Bytes of the header (27 + lacing values).
    pub header: usize,
    /// Bytes of the body.
    pub body: usize,
}

impl OggPage {
    pub const MAX_HEADER: usize = 27 + 255;

    /// The header at the start of `h` (its lacing table included), or
    /// `None` when `h` holds no whole page header.
    pub fn parse(h: &[u8]) -> Option<OggPage> {
        let fixed = h.first_chunk::<27>()?;
        if &fixed[..4] != b"OggS" || fixed[4] != 0 {
            return None;
        }
        let nseg = usize::from(fixed[26]);
        let table = h.get(27..27 + nseg)?;
        Some(OggPage {
            granule: u64::from_le_bytes(fixed[6..14].try_into().expect("8 bytes")),
            flags: fixed[5],
            serial: u32::from_le_bytes(fixed[14..18].try_into().expect("4 bytes")),
            header: 27 + nseg,
            body: table.iter().map(|&v| usize::from(v)).sum(),
        })
    }

    pub fn len(&self) -> usize {
        self.header + self.body
    }

    pub fn continued(&self) -> bool {
        self.flags & 1 != 0
    }

    pub fn eos(&self) -> bool {
        self.flags & 4 != 0
    }

    /// A packet ends on this page (its granule position is a position).
    pub fn has_granule(&self) -> bool {
        self.granule != u64::MAX
    }

    /// Whether `page` (this page's bytes, header first) carries the
    /// checksum of its bytes, as libogg computes it: CRC-32 with the
    /// polynomial 0x04c11db7, unreflected, from 0, over the page with its
    /// checksum field (bytes 22..26) read as zeros.
    pub fn checksum_ok(&self, page: &[u8]) -> bool {
        const OGG: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::Algorithm {
            width: 32,
            poly: 0x04c1_1db7,
            init: 0,
            refin: false,
            refout: false,
            xorout: 0,
            check: 0x89a1_897f,
            residue: 0,
        });
        let Some((head, rest)) = page.get(..self.len()).and_then(|p| p.split_at_checked(22)) else {
            return false;
        };
        let Some((stored, body)) = rest.split_first_chunk::<4>() else {
            return false;
        };
        let mut d = OGG.digest();
        d.update(head);
        d.update(&[0; 4]);
        d.update(body);
        d.finalize() == u32::from_le_bytes(*stored)
    }
}

/// The packets of consecutive pages of one stream, joined across page
/// boundaries. A first page that continues a packet from a page not given
/// drops that packet's tail.
#[derive(Default)]
pub(super) struct Packets {
    pending: Vec<u8>,
    /// Whether `pending` holds a packet from its first byte.
    whole: bool,
}

impl Packets {
    /// Calls `each(packet, last_on_page)` for every packet that completes
    /// on `page` (`bytes` is the whole page, header first).
    pub fn page(&mut self, page: &OggPage, bytes: &[u8], mut each: impl FnMut(&[u8], bool)) {
        if !page.continued() {
            self.pending.clear();
            self.whole = true;
        } else if self.pending.is_empty() {
            // The page continues a packet from a page not given.
            self.whole = false;
        }
        let table = &bytes[27..page.header];
        let last = table.iter().rposition(|&v| v < 255);
        let mut at = page.header;
        for (i, &lace) in table.iter().enumerate() {
            let n = usize::from(lace);
            self.pending.extend_from_slice(&bytes[at..at + n]);
            at += n;
            if lace < 255 {
                if self.whole {
                    each(&self.pending, Some(i) == last);
                }
                self.pending.clear();
                self.whole = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mp3_headers_give_their_frame_sizes() {
        // MPEG-1 128 kb/s 44.1 kHz stereo, no padding: 417 bytes.
        let f = Mp3Frame::parse(&[0xFF, 0xFB, 0x90, 0x44]).unwrap();
        assert_eq!(
            (f.size, f.samples, f.sample_rate, f.channels),
            (417, 1152, 44_100, 2)
        );
        // MPEG-2 32 kb/s 16 kHz mono, padded: 145 bytes.
        let f = Mp3Frame::parse(&[0xFF, 0xF3, 0x4A, 0xC4]).unwrap();
        assert_eq!(
            (f.size, f.samples, f.sample_rate, f.channels),
            (145, 576, 16_000, 1)
        );
        // Free format, reserved rate, layer I: none.
        assert_eq!(Mp3Frame::parse(&[0xFF, 0xFB, 0x00, 0x44]), None);
        assert_eq!(Mp3Frame::parse(&[0xFF, 0xFB, 0x9C, 0x44]), None);
        assert_eq!(Mp3Frame::parse(&[0xFF, 0xFF, 0x90, 0x44]), None);
    }

    #[test]
    fn a_page_checksum_is_libogg_s() {
        // The first page of an Ogg Vorbis file ffmpeg wrote (tests/data).
        let bytes = std::fs::read(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                .join("tests/data/codecs/speech16k_mono.ogg"),
        )
        .unwrap();
        let page = OggPage::parse(&bytes).unwrap();
        assert!(page.checksum_ok(&bytes));
        for at in [0, 5, 21, 22, 26, page.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(!page.checksum_ok(&bad), "byte {at}");
        }
        assert!(!page.checksum_ok(&bytes[..page.len() - 1]));
    }

    #[test]
    fn packets_join_across_pages_and_drop_a_tail_without_its_head() {
        fn page(flags: u8, lacing: &[u8]) -> Vec<u8> {
            let mut p = b"OggS\0".to_vec();
            p.push(flags);
            p.extend_from_slice(&7u64.to_le_bytes());
            p.extend_from_slice(&[0; 12]);
            p.push(lacing.len() as u8);
            p.extend_from_slice(lacing);
            let n: usize = lacing.iter().map(|&v| usize::from(v)).sum();
            p.extend((0..n).map(|i| i as u8));
            p
        }
        let a = page(0, &[3, 255]);
        let b = page(1, &[2, 4]);
        let mut got = Vec::new();
        let mut packets = Packets::default();
        for bytes in [&a, &b] {
            let h = OggPage::parse(bytes).unwrap();
            assert_eq!(h.len(), bytes.len());
            packets.page(&h, bytes, |p, last| got.push((p.len(), last)));
        }
        assert_eq!(got, [(3, true), (257, false), (4, true)]);
        // Starting at the continued page: its first packet's tail is dropped.
        got.clear();
        let mut packets = Packets::default();
        packets.page(&OggPage::parse(&b).unwrap(), &b, |p, last| {
            got.push((p.len(), last))
        });
        assert_eq!(got, [(4, true)]);
    }
}
