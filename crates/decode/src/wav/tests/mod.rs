//! Unit tests of the WAV decoder: one per format, one per malformation
//! (here), and proptests that no input panics with the regressions of the
//! attack pass (`hostile`). The builders below are shared by both.
use super::*;
use proptest::prelude::*;

// ---- builders: assemble a WAV from parts so malformed variants are easy ----

/// One chunk: id, little-endian size, body, pad byte when the size is odd.
fn chunk(id: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut c = id.to_vec();
    c.extend_from_slice(&(body.len() as u32).to_le_bytes());
    c.extend_from_slice(body);
    if body.len() % 2 == 1 {
        c.push(0);
    }
    c
}

/// `RIFF` + correct size + `WAVE` + the chunks, in order.
fn riff(chunks: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = chunks.concat();
    let mut f = b"RIFF".to_vec();
    f.extend_from_slice(&(4 + body.len() as u32).to_le_bytes());
    f.extend_from_slice(b"WAVE");
    f.extend_from_slice(&body);
    f
}

/// A 16-byte fmt body with every field given.
fn fmt_raw(tag: u16, channels: u16, rate: u32, block_align: u16, bits: u16) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&tag.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(block_align)).to_le_bytes());
    b.extend_from_slice(&block_align.to_le_bytes());
    b.extend_from_slice(&bits.to_le_bytes());
    b
}

/// A consistent fmt body (block_align derived).
fn fmt(tag: u16, channels: u16, rate: u32, bits: u16) -> Vec<u8> {
    fmt_raw(tag, channels, rate, channels * bits / 8, bits)
}

/// A 40-byte WAVE_FORMAT_EXTENSIBLE fmt body with a standard sub-format GUID.
fn fmt_ext(sub: u16, channels: u16, rate: u32, bits: u16, valid: u16) -> Vec<u8> {
    let mut b = fmt(TAG_EXTENSIBLE, channels, rate, bits);
    b.extend_from_slice(&22u16.to_le_bytes());
    b.extend_from_slice(&valid.to_le_bytes());
    b.extend_from_slice(&0x4u32.to_le_bytes()); // channel mask: front centre
    b.extend_from_slice(&sub.to_le_bytes());
    b.extend_from_slice(&KSDATAFORMAT_SUFFIX);
    b
}

fn wav(tag: u16, channels: u16, rate: u32, bits: u16, data: &[u8]) -> Vec<u8> {
    riff(&[
        chunk(b"fmt ", &fmt(tag, channels, rate, bits)),
        chunk(b"data", data),
    ])
}

fn i16_bytes(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_all(bytes: &[u8]) -> (WavInfo, Vec<f32>) {
    let info = parse(bytes).expect("valid wav");
    let mut out = vec![f32::NAN; info.frames];
    decode_mono_into(bytes, &info, &mut out);
    (info, out)
}

fn err(bytes: &[u8]) -> (Error, String) {
    let e = parse(bytes).expect_err("should be rejected");
    let s = e.to_string();
    (e, s)
}

// ---- one test per format, exact values ----

#[test]
fn u8_pcm() {
    let f = wav(1, 1, 4096, 8, &[0, 64, 128, 192, 255]);
    let (info, out) = decode_all(&f);
    assert_eq!(info.format, SampleFormat::U8);
    assert_eq!(
        (info.block_align, info.frames, info.data_offset),
        (1, 5, 44)
    );
    assert_eq!(out, [-1.0, -0.5, 0.0, 0.5, 127.0 / 128.0]);
}

#[test]
fn i16_pcm() {
    let f = wav(1, 1, 4096, 16, &i16_bytes(&[-32768, -16384, 0, 1, 32767]));
    let (info, out) = decode_all(&f);
    assert_eq!(info.format, SampleFormat::I16);
    assert_eq!((info.sample_rate, info.channels, info.frames), (4096, 1, 5));
    assert_eq!(out, [-1.0, -0.5, 0.0, 1.0 / 32768.0, 32767.0 / 32768.0]);
}

#[test]
fn i24_pcm() {
    let vals = [-8_388_608i32, 8_388_607, -1, 1, 0, 4_194_304];
    let data: Vec<u8> = vals
        .iter()
        .flat_map(|v| v.to_le_bytes()[..3].to_vec())
        .collect();
    let (info, out) = decode_all(&wav(1, 1, 4096, 24, &data));
    assert_eq!((info.format, info.block_align), (SampleFormat::I24, 3));
    let s = 8_388_608.0f32;
    assert_eq!(out, [-1.0, 8_388_607.0 / s, -1.0 / s, 1.0 / s, 0.0, 0.5]);
}

#[test]
fn i32_pcm() {
    let vals = [i32::MIN, -1, 1 << 30, 0, i32::MAX];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (info, out) = decode_all(&wav(1, 1, 4096, 32, &data));
    assert_eq!(info.format, SampleFormat::I32);
    // i32::MAX rounds to 2^31 in f32, as numpy's float32 conversion does.
    assert_eq!(out, [-1.0, -1.0 / 2_147_483_648.0, 0.5, 0.0, 1.0]);
}

#[test]
fn f32_float() {
    let vals = [0.25f32, -1.5, 1e-30, -0.0];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (info, out) = decode_all(&wav(3, 1, 4096, 32, &data));
    assert_eq!(info.format, SampleFormat::F32);
    assert_eq!(out, vals);
    assert!(out[3].is_sign_negative());
}

#[test]
fn f64_float() {
    let vals = [0.1f64, -0.75, 3.0];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (info, out) = decode_all(&wav(3, 1, 4096, 64, &data));
    assert_eq!((info.format, info.block_align), (SampleFormat::F64, 8));
    assert_eq!(out, [0.1f64 as f32, -0.75, 3.0]);
}

#[test]
fn extensible_pcm16() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_ext(TAG_PCM, 1, 4096, 16, 12)),
        chunk(b"data", &i16_bytes(&[16384, -8192])),
    ]);
    let (info, out) = decode_all(&f);
    assert_eq!(info.format, SampleFormat::I16);
    assert_eq!(info.data_offset, 12 + 8 + 40 + 8);
    assert_eq!(out, [0.5, -0.25]);
}

#[test]
fn extensible_float32() {
    let data: Vec<u8> = [0.125f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let f = riff(&[
        chunk(b"fmt ", &fmt_ext(TAG_FLOAT, 1, 4096, 32, 32)),
        chunk(b"data", &data),
    ]);
    let (info, out) = decode_all(&f);
    assert_eq!(info.format, SampleFormat::F32);
    assert_eq!(out, [0.125, -2.0]);
}

#[test]
fn stereo_mean_exact() {
    let data = i16_bytes(&[1000, 3000, -1, 0, 32767, 32767, -32768, 32767]);
    let (info, out) = decode_all(&wav(1, 2, 4096, 16, &data));
    assert_eq!((info.channels, info.block_align, info.frames), (2, 4, 4));
    assert_eq!(
        out,
        [
            2000.0 / 32768.0,
            -1.0 / 65536.0,
            32767.0 / 32768.0,
            -1.0 / 65536.0
        ]
    );
}

#[test]
fn three_channel_mean_sums_in_f32_then_divides() {
    let vals = [0.1f32, 0.2, 0.4, 1.0, 1.0, 0.5];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (_, out) = decode_all(&wav(3, 3, 4096, 32, &data));
    // numpy: np.float32 sum row by row, then / 3 in float32.
    assert_eq!(out[0], (0.1f32 + 0.2f32 + 0.4f32) / 3.0f32);
    assert_eq!(out[1], 2.5f32 / 3.0f32);
}

#[test]
fn odd_list_chunk_before_data_is_skipped_with_pad() {
    let f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
        chunk(b"LIST", b"INFOx"),
        chunk(b"data", &i16_bytes(&[-16384])),
    ]);
    let (info, out) = decode_all(&f);
    assert_eq!(info.data_offset, 12 + 24 + 8 + 6 + 8);
    assert_eq!(out, [-0.5]);
}

#[test]
fn odd_chunk_with_missing_pad_is_tolerated() {
    let mut list = chunk(b"LIST", b"abc");
    list.pop(); // the writer forgot the pad byte
    let f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
        list,
        chunk(b"data", &i16_bytes(&[8192])),
    ]);
    assert_eq!(decode_all(&f).1, [0.25]);
}

#[test]
fn data_before_fmt_and_unknown_chunks() {
    let f = riff(&[
        chunk(b"JUNK", &[0; 28]),
        chunk(b"data", &i16_bytes(&[16384, 0])),
        chunk(b"fact", &2u32.to_le_bytes()),
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
    ]);
    let (info, out) = decode_all(&f);
    assert_eq!(info.data_offset, 12 + 36 + 8);
    assert_eq!(out, [0.5, 0.0]);
}

#[test]
fn pad_and_trim_to_out_length() {
    let f = wav(1, 1, 4096, 16, &i16_bytes(&[16384, -16384, 8192]));
    let mut long = [9.0f32; 6];
    let info = decode(&f, 4096, &mut long).unwrap();
    assert_eq!(info.frames, 3);
    assert_eq!(long, [0.5, -0.5, 0.25, 0.0, 0.0, 0.0]);
    let mut short = [9.0f32; 2];
    decode(&f, 4096, &mut short).unwrap();
    assert_eq!(short, [0.5, -0.5]);
    let mut none: [f32; 0] = [];
    decode(&f, 4096, &mut none).unwrap();
}

#[test]
fn trailing_partial_frame_is_ignored() {
    let mut data = i16_bytes(&[16384, 16384, 8192]);
    data.pop();
    let (info, out) = decode_all(&wav(1, 2, 4096, 16, &data));
    assert_eq!(info.frames, 1);
    assert_eq!(out, [0.5]);
}

#[test]
fn wrong_riff_size_is_tolerated_when_chunks_are_intact() {
    let mut f = wav(1, 1, 4096, 16, &i16_bytes(&[16384]));
    f[4..8].copy_from_slice(&1_000_000u32.to_le_bytes());
    assert_eq!(decode_all(&f).1, [0.5]);
    f[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert_eq!(decode_all(&f).1, [0.5]);
    // Trailing junk after the chunks we need is not examined.
    f.extend_from_slice(b"ID3\x03\xff\xff\xff\xff");
    assert_eq!(decode_all(&f).1, [0.5]);
}

#[test]
fn inconsistent_info_does_not_panic() {
    let f = wav(1, 1, 4096, 16, &i16_bytes(&[16384, 16384]));
    let good = parse(&f).unwrap();
    let mut out = [1.0f32; 4];
    let bad = WavInfo {
        frames: 1000,
        ..good
    };
    decode_mono_into(&f, &bad, &mut out);
    assert_eq!(out, [0.5, 0.5, 0.0, 0.0]);
    let bad = WavInfo {
        block_align: 1,
        ..good
    };
    decode_mono_into(&f, &bad, &mut out);
    assert_eq!(out, [0.0; 4]);
    let bad = WavInfo {
        data_offset: usize::MAX,
        ..good
    };
    decode_mono_into(&f, &bad, &mut out);
    assert_eq!(out, [0.0; 4]);
}

// ---- one test per malformation: variant + key numbers in Display ----

#[test]
fn not_riff() {
    let mut f = b"ID3\x03".to_vec();
    f.resize(100, 0);
    let (e, s) = err(&f);
    assert_eq!(e, Error::NotRiff { magic: *b"ID3\x03" });
    assert_eq!(s, "not a RIFF/WAVE file (starts with b\"ID3\\x03\")");
}

#[test]
fn not_wave() {
    let mut f = wav(1, 1, 4096, 16, &[0, 0]);
    f[8..12].copy_from_slice(b"AVI ");
    let (e, s) = err(&f);
    assert_eq!(e, Error::NotWave { form: *b"AVI " });
    assert!(s.contains("b\"AVI \""), "{s}");
}

#[test]
fn rf64_rejected() {
    let mut f = wav(1, 1, 4096, 16, &[0, 0]);
    f[..4].copy_from_slice(b"RF64");
    let (e, s) = err(&f);
    assert_eq!(e, Error::Rf64 { magic: *b"RF64" });
    assert!(s.contains("RF64 not supported"), "{s}");
}

#[test]
fn truncated_header() {
    let f = wav(1, 1, 4096, 16, &[0, 0]);
    let (e, s) = err(&f[..20]);
    assert_eq!(e, Error::TruncatedHeader { len: 20 });
    assert_eq!(
        s,
        "truncated header: 20 bytes, a WAV header needs at least 44"
    );
    assert_eq!(err(&[]).0, Error::TruncatedHeader { len: 0 });
    assert_eq!(err(b"RI").0, Error::TruncatedHeader { len: 2 });
}

#[test]
fn truncated_data() {
    let mut f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
        chunk(b"data", &[0; 4000]),
    ]);
    f[40..44].copy_from_slice(&80_000u32.to_le_bytes());
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::TruncatedData {
            declared: 80_000,
            available: 4000
        }
    );
    assert_eq!(
        s,
        "data chunk declares 80000 bytes but only 4000 follow (truncated data)"
    );
}

#[test]
fn other_chunk_overrun_names_the_chunk() {
    let mut f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
        chunk(b"LIST", &[0; 12]),
    ]);
    f[40..44].copy_from_slice(&5000u32.to_le_bytes());
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::ChunkOverrun {
            id: *b"LIST",
            offset: 36,
            declared: 5000,
            available: 12
        }
    );
    assert!(
        s.contains("b\"LIST\"") && s.contains("36") && s.contains("5000"),
        "{s}"
    );
    assert!(s.contains("only 12 follow"), "{s}");
}

#[test]
fn fmt_missing() {
    let f = riff(&[chunk(b"LIST", &[0; 16]), chunk(b"data", &[0; 8])]);
    assert_eq!(err(&f), (Error::MissingFmt, "fmt chunk missing".into()));
}

#[test]
fn data_missing() {
    let f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)),
        chunk(b"LIST", &[0; 8]),
    ]);
    assert_eq!(err(&f), (Error::MissingData, "data chunk missing".into()));
}

#[test]
fn fmt_too_small() {
    let f = riff(&[
        chunk(b"fmt ", &fmt(1, 1, 4096, 16)[..14]),
        chunk(b"data", &[0; 8]),
    ]);
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::FmtTooSmall {
            size: 14,
            needed: 16
        }
    );
    assert!(s.contains("14") && s.contains("16"), "{s}");

    let mut ext = fmt(TAG_EXTENSIBLE, 1, 4096, 16);
    ext.extend_from_slice(&[0, 0]);
    let f = riff(&[chunk(b"fmt ", &ext), chunk(b"data", &[0; 8])]);
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::FmtTooSmall {
            size: 18,
            needed: 40
        }
    );
    assert!(s.contains("18") && s.contains("40"), "{s}");
}

#[test]
fn unsupported_codecs_are_named() {
    let (e, s) = err(&wav(0x0011, 1, 4096, 4, &[0; 8]));
    assert_eq!(
        e,
        Error::UnsupportedCodec {
            tag: 0x11,
            extensible: false
        }
    );
    assert_eq!(
        s,
        "unsupported codec: IMA ADPCM (format tag 0x0011); expected PCM or IEEE float"
    );
    for (tag, name) in [
        (0x0002, "MS ADPCM"),
        (0x0006, "A-law"),
        (0x0007, "µ-law"),
        (0x0050, "MPEG"),
        (0x0055, "MP3"),
    ] {
        let s = err(&wav(tag, 1, 4096, 8, &[0; 8])).1;
        assert!(
            s.contains(name) && s.contains(&format!("{tag:#06x}")),
            "{s}"
        );
    }
    let s = err(&wav(0x1234, 1, 4096, 16, &[0; 8])).1;
    assert!(s.contains("format tag 0x1234"), "{s}");

    let f = riff(&[
        chunk(b"fmt ", &fmt_ext(0x0007, 1, 4096, 8, 8)),
        chunk(b"data", &[0; 8]),
    ]);
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::UnsupportedCodec {
            tag: 7,
            extensible: true
        }
    );
    assert!(
        s.contains("µ-law") && s.contains("WAVE_FORMAT_EXTENSIBLE"),
        "{s}"
    );
}

#[test]
fn unknown_extensible_guid() {
    let mut body = fmt_ext(TAG_PCM, 1, 4096, 16, 16);
    body[39] = 0x70;
    let f = riff(&[chunk(b"fmt ", &body), chunk(b"data", &[0; 8])]);
    let (e, s) = err(&f);
    let Error::UnknownSubFormat { guid } = e else {
        panic!("{e:?}")
    };
    assert_eq!(guid[..2], [1, 0]);
    assert!(s.contains("{00000001-0000-0010-8000-00AA00389B70}"), "{s}");
}

#[test]
fn zero_channels() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_raw(1, 0, 4096, 2, 16)),
        chunk(b"data", &[0; 8]),
    ]);
    assert_eq!(err(&f), (Error::ZeroChannels, "zero channels".into()));
}

#[test]
fn zero_sample_rate() {
    let (e, s) = err(&wav(1, 1, 0, 16, &[0; 8]));
    assert_eq!(e, Error::ZeroSampleRate);
    assert!(s.contains("0 Hz"), "{s}");
}

#[test]
fn unsupported_bit_depth() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_raw(1, 1, 4096, 2, 12)),
        chunk(b"data", &[0; 8]),
    ]);
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::UnsupportedBitDepth {
            bits: 12,
            float: false
        }
    );
    assert_eq!(s, "unsupported bit depth 12 for PCM");
    let (e, s) = err(&wav(3, 1, 4096, 16, &[0; 8]));
    assert_eq!(
        e,
        Error::UnsupportedBitDepth {
            bits: 16,
            float: true
        }
    );
    assert_eq!(s, "unsupported bit depth 16 for IEEE float");
}

#[test]
fn block_align_mismatch() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_raw(1, 2, 4096, 3, 16)),
        chunk(b"data", &[0; 8]),
    ]);
    let (e, s) = err(&f);
    assert_eq!(
        e,
        Error::BlockAlign {
            found: 3,
            channels: 2,
            bits: 16,
            expected: 4
        }
    );
    assert_eq!(
        s,
        "block_align 3 does not match 2 channels × 16 bits (expected 4)"
    );
}

#[test]
fn sample_rate_mismatch() {
    let f = wav(1, 1, 8000, 16, &[0; 8]);
    let mut out = [0f32; 4];
    let e = decode(&f, 4096, &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::SampleRate {
            found: 8000,
            expected: 4096
        }
    );
    assert_eq!(e.to_string(), "sample rate 8000 Hz, expected 4096 Hz");
}

#[test]
fn empty_data() {
    let (e, s) = err(&wav(1, 1, 4096, 16, &[]));
    assert_eq!(
        e,
        Error::EmptyData {
            bytes: 0,
            block_align: 2
        }
    );
    assert!(s.starts_with("empty data chunk (0 sample frames"), "{s}");
    let (e, s) = err(&wav(1, 2, 4096, 16, &[0; 3]));
    assert_eq!(
        e,
        Error::EmptyData {
            bytes: 3,
            block_align: 4
        }
    );
    assert!(
        s.contains("3 data bytes") && s.contains("4 per frame"),
        "{s}"
    );
}

#[test]
fn every_truncation_of_a_valid_file_is_handled() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_ext(TAG_PCM, 2, 4096, 24, 24)),
        chunk(b"LIST", b"INFOabc"),
        chunk(b"data", &[7; 60]),
    ]);
    assert!(parse(&f).is_ok());
    let mut out = [0f32; 32];
    for len in 0..f.len() {
        let r = decode(&f[..len], 4096, &mut out);
        assert!(r.is_err(), "truncation to {len} bytes accepted: {r:?}");
    }
}

mod hostile;
