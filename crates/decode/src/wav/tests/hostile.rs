//! Hostile input: proptests that no byte string panics and that valid files
//! round-trip, and the regressions from the attack pass (accepted before,
//! rejected now).
use super::*;

// ---- property tests: nothing panics, valid files round-trip ----

fn check_any(bytes: &[u8], out_len: usize) {
    let mut out = vec![f32::NAN; out_len];
    if let Ok(info) = parse(bytes) {
        assert!(info.channels >= 1 && info.frames >= 1 && info.sample_rate >= 1);
        assert_eq!(
            usize::from(info.block_align),
            usize::from(info.channels) * info.format.bytes_per_sample()
        );
        assert!(info.data_offset + info.frames * usize::from(info.block_align) <= bytes.len());
        decode(bytes, info.sample_rate, &mut out).unwrap();
        let n = info.frames.min(out_len);
        assert!(out[n..].iter().all(|&x| x == 0.0));
    } else {
        assert!(decode(bytes, 4096, &mut out).is_err());
    }
}

fn valid_file() -> Vec<u8> {
    riff(&[
        chunk(b"LIST", b"INFOx"),
        chunk(b"fmt ", &fmt_ext(TAG_PCM, 2, 4096, 16, 16)),
        chunk(b"data", &i16_bytes(&[1, -2, 300, -400, 5000, -6000])),
    ])
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256),
                                   out_len in 0usize..16) {
        check_any(&bytes, out_len);
    }

    #[test]
    fn arbitrary_riff_prefixed_bytes_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..256), out_len in 0usize..16)
    {
        let mut bytes = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        bytes.extend_from_slice(&tail);
        check_any(&bytes, out_len);
    }

    #[test]
    fn byte_flips_of_a_valid_file_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(), out_len in 0usize..16)
    {
        let mut f = valid_file();
        for (i, b) in flips {
            let n = f.len();
            f[i % n] = b;
        }
        let cut = cut % (f.len() + 1);
        check_any(&f[..cut], out_len);
        check_any(&f, out_len);
    }

    #[test]
    fn arbitrary_info_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..128),
        channels in any::<u16>(), block_align in any::<u16>(),
        data_offset in any::<usize>(), frames in any::<usize>(),
        fmt_ix in 0usize..6, out_len in 0usize..64)
    {
        use SampleFormat::*;
        let format = [U8, I16, I24, I32, F32, F64][fmt_ix];
        let info = WavInfo { sample_rate: 1, channels, format, block_align,
                             data_offset: data_offset % 160, frames };
        let mut out = vec![f32::NAN; out_len];
        decode_mono_into(&bytes, &info, &mut out);
        prop_assert!(out.iter().all(|x| !x.is_nan()) || matches!(format, F32 | F64));
    }

    #[test]
    fn i16_round_trip(samples in proptest::collection::vec(any::<i16>(), 1..200),
                      channels in 1u16..4) {
        let usable = samples.len() / usize::from(channels) * usize::from(channels);
        prop_assume!(usable > 0);
        let f = wav(1, channels, 4096, 16, &i16_bytes(&samples[..usable]));
        let (info, out) = decode_all(&f);
        prop_assert_eq!(info.frames, usable / usize::from(channels));
        for (o, frame) in out.iter().zip(samples.chunks_exact(usize::from(channels))) {
            let mut sum = f32::from(frame[0]) / 32768.0;
            for &s in &frame[1..] {
                sum += f32::from(s) / 32768.0;
            }
            prop_assert_eq!(*o, sum / f32::from(channels));
        }
    }
}

// ---- regressions from the attack pass: accepted before, rejected now ----

#[test]
fn cb_size_0xffff_is_rejected_not_accepted() {
    let mut body = fmt_ext(TAG_PCM, 1, 4096, 16, 16);
    body[16..18].copy_from_slice(&0xFFFFu16.to_le_bytes());
    let f = riff(&[chunk(b"fmt ", &body), chunk(b"data", &i16_bytes(&[1, 2]))]);
    let (e, s) = err(&f);
    assert!(
        matches!(
            e,
            Error::ExtensionOverrun {
                declared: 0xFFFF,
                size: 40,
                available: 22
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        s,
        "fmt chunk's cbSize declares 65535 extension bytes but the 40-byte chunk holds 22"
    );
    // The same overrun in a plain PCM fmt chunk with a cbSize field.
    let mut body = fmt(TAG_PCM, 1, 4096, 16);
    body.extend_from_slice(&4u16.to_le_bytes());
    let f = riff(&[chunk(b"fmt ", &body), chunk(b"data", &i16_bytes(&[1, 2]))]);
    assert!(matches!(
        err(&f).0,
        Error::ExtensionOverrun { declared: 4, .. }
    ));
    // cbSize 0 in an 18-byte chunk is fine.
    let mut body = fmt(TAG_PCM, 1, 4096, 16);
    body.extend_from_slice(&0u16.to_le_bytes());
    let f = riff(&[chunk(b"fmt ", &body), chunk(b"data", &i16_bytes(&[1, 2]))]);
    assert_eq!(decode_all(&f).1.len(), 2);
}

#[test]
fn valid_bits_above_the_container_size_is_rejected() {
    let f = riff(&[
        chunk(b"fmt ", &fmt_ext(TAG_PCM, 1, 4096, 16, 24)),
        chunk(b"data", &i16_bytes(&[1, 2])),
    ]);
    let (e, s) = err(&f);
    assert!(
        matches!(
            e,
            Error::ValidBits {
                valid: 24,
                bits: 16
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        s,
        "wValidBitsPerSample 24 exceeds the 16-bit container; expected at most 16"
    );
    // Fewer valid bits than the container (20 in 24) and 0 ("all") are fine.
    for valid in [20, 0] {
        let f = riff(&[
            chunk(b"fmt ", &fmt_ext(TAG_PCM, 1, 4096, 24, valid)),
            chunk(b"data", &[0, 0, 0x40]),
        ]);
        assert_eq!(decode_all(&f).1, [0.5]);
    }
}

#[test]
fn nan_and_inf_float_samples_are_rejected_not_turned_into_silence() {
    for (bad, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        // Stereo: frame 300, channel 1 (past the first 256-sample block).
        let mut v = vec![0.25f32; 1000];
        v[601] = bad;
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let (e, s) = err(&wav(TAG_FLOAT, 2, 4096, 32, &data));
        assert!(
            matches!(
                e,
                Error::NonFinite {
                    frame: 300,
                    channel: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            s,
            format!(
                "sample frame 300, channel 1 is {shown} (not a finite float32 value); \
                 expected finite IEEE-float samples"
            )
        );
    }
}

#[test]
fn f64_samples_beyond_the_f32_range_are_rejected() {
    let data: Vec<u8> = [0.5f64, 1e300, -0.5]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let (e, _) = err(&wav(TAG_FLOAT, 1, 4096, 64, &data));
    assert!(
        matches!(e, Error::NonFinite { frame: 1, channel: 0, value } if value == 1e300),
        "{e:?}"
    );
    // The largest finite f32 still passes.
    let data: Vec<u8> = [f64::from(f32::MAX), -f64::from(f32::MAX)]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(
        decode_all(&wav(TAG_FLOAT, 1, 4096, 64, &data)).1,
        [f32::MAX, -f32::MAX]
    );
}

#[test]
fn an_info_with_zero_channels_decodes_to_silence_instead_of_panicking() {
    // Regression: the proptest above drew channels = 0 about once in 250
    // runs, and `decode_mono_into` chunked the (empty) data by 0 and
    // panicked; `decode_channel_into` must hold too.
    use SampleFormat::*;
    for format in [U8, I16, I24, I32, F32, F64] {
        for block_align in [0, 1, 2, 8] {
            let info = WavInfo {
                sample_rate: 16_000,
                channels: 0,
                format,
                block_align,
                data_offset: 0,
                frames: 4,
            };
            let mut out = vec![f32::NAN; 4];
            decode_mono_into(&[0u8; 64], &info, &mut out);
            assert_eq!(out, [0.0; 4], "{format:?}, block_align {block_align}");
            let mut out = vec![f32::NAN; 4];
            decode_channel_into(&[0u8; 64], &info, 0, &mut out);
            assert_eq!(out, [0.0; 4], "{format:?}, block_align {block_align}");
        }
    }
}
