use super::*;
use crate::policy::Channels;

fn fixture(rel: &str) -> Vec<u8> {
    let p = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/golden/inputs/files")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn stream_info_reads_the_header_fields() {
    let f = fixture("8000/flac16_stereo_synth_8000.flac");
    let i = stream_info(&f).unwrap();
    assert_eq!(
        (i.sample_rate, i.channels, i.bits, i.total_samples),
        (8000, 2, 16, 1600)
    );
    assert!(i.min_block >= 16 && i.max_block >= i.min_block);
    let f = fixture("48000/flac24_stereo_speech_48000.flac");
    let i = stream_info(&f).unwrap();
    assert_eq!((i.sample_rate, i.channels, i.bits), (48000, 2, 24));
}

#[test]
fn whole_stream_is_decoded_and_a_limit_stops_early() {
    let f = fixture("44100/long_flac16_mono_tones_44100.flac");
    let total = stream_info(&f).unwrap().total_samples as usize;
    let mut out = Vec::new();
    decode(&f, Channels::Mean, usize::MAX, &mut out).unwrap();
    assert_eq!(out.len(), total);
    assert!(out.iter().all(|x| x.abs() <= 1.0) && out.iter().any(|&x| x != 0.0));
    // Stops at the first frame boundary past the limit.
    decode(&f, Channels::Mean, 5000, &mut out).unwrap();
    assert!(out.len() >= 5000 && out.len() < total, "{}", out.len());
}

#[test]
fn mean_is_the_float32_average_of_the_channels_and_first_is_channel_0() {
    let f = fixture("8000/flac16_stereo_synth_8000.flac");
    let (mut mean, mut first) = (Vec::new(), Vec::new());
    decode(&f, Channels::Mean, usize::MAX, &mut mean).unwrap();
    decode(&f, Channels::First, usize::MAX, &mut first).unwrap();
    assert_eq!(mean.len(), first.len());
    assert_ne!(mean, first);
    // 16-bit samples scaled by 2^-15 are exact: first is a multiple of 2^-15.
    assert!(first.iter().all(|&x| (x * 32768.0).fract() == 0.0));
}

#[test]
fn a_wav_header_is_not_flac_and_a_short_buffer_is_a_truncated_header() {
    let e = stream_info(b"RIFF\0\0\0\0WAVEfmt ").unwrap_err();
    assert_eq!(
        e.to_string(),
        "not a FLAC file (starts with b\"RIFF\", expected b\"fLaC\")"
    );
    assert_eq!(
        stream_info(b"fLaC\0\0\0\x22").unwrap_err(),
        Error::TruncatedHeader { len: 8 }
    );
}

/// `fixture` with a VORBIS_COMMENT block inserted after STREAMINFO whose
/// vendor string claims `vendor_len` bytes inside a 16-byte block.
fn with_comment(f: &[u8], vendor_len: u32) -> Vec<u8> {
    let mut b = f[..42].to_vec();
    b[4] &= 0x7F; // STREAMINFO is no longer the last block
    let last = f[4] & 0x80;
    let mut body = vendor_len.to_le_bytes().to_vec();
    body.extend_from_slice(&[0; 12]);
    b.extend_from_slice(&[last | 4, 0, 0, body.len() as u8]);
    b.extend_from_slice(&body);
    b.extend_from_slice(&f[42..]);
    b
}

#[test]
fn a_corrupt_tag_block_is_not_parsed_and_the_audio_decodes() {
    // The fuzzer found symphonia's tag reader allocating a comment's declared
    // length (4 GiB) before reading it; tags are now skipped, not parsed.
    let f = fixture("8000/flac16_stereo_synth_8000.flac");
    let (mut want, mut got) = (Vec::new(), Vec::new());
    decode(&f, Channels::Mean, usize::MAX, &mut want).unwrap();
    decode(
        &with_comment(&f, 0xFFFF_FFFE),
        Channels::Mean,
        usize::MAX,
        &mut got,
    )
    .unwrap();
    assert_eq!(got, want);
}

#[test]
fn a_metadata_block_running_past_the_end_is_a_truncation() {
    let f = fixture("8000/flac16_stereo_synth_8000.flac");
    let mut b = with_comment(&f, 0);
    b[42 + 1..42 + 4].copy_from_slice(&[0x7F, 0xFF, 0xFF]);
    let e = decode(&b, Channels::Mean, usize::MAX, &mut Vec::new()).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "truncated FLAC stream: metadata block of type 4 at byte 42 declares 8388607 bytes"
        ),
        "{e}"
    );
}
