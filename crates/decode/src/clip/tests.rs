use super::*;

/// A 16-bit PCM WAV of `frames` frames of `channels` channels at `rate`.
fn wav(rate: u32, channels: u16, frames: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..frames * usize::from(channels))
        .flat_map(|i| (((i as f32 * 0.37).sin() * 8000.0) as i16).to_le_bytes())
        .collect();
    let block = 2 * channels;
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt \x10\0\0\0\x01\0");
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    b.extend_from_slice(&block.to_le_bytes());
    b.extend_from_slice(b"\x10\0data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&data);
    b
}

fn policy(resample: Resample, channels: Channels) -> Policy {
    Policy { resample, channels }
}

#[test]
fn device_route_keeps_pcm_wav_at_the_rate_on_the_device_and_sends_the_rest_to_the_host() {
    let p = Policy::default();
    assert!(matches!(
        device_wav(&wav(4096, 1, 100), 4096, p),
        Ok(Some(_))
    ));
    assert!(matches!(
        device_wav(&wav(4096, 2, 100), 4096, p),
        Ok(Some(_))
    ));
    let first = policy(Resample::Off, Channels::First);
    assert_eq!(device_wav(&wav(4096, 2, 100), 4096, first), Ok(None));
    assert!(matches!(
        device_wav(&wav(4096, 1, 100), 4096, first),
        Ok(Some(_))
    ));
    let reject = policy(Resample::Off, Channels::Reject);
    assert_eq!(
        device_wav(&wav(4096, 2, 100), 4096, reject),
        Err(Error::Channels { found: 2 })
    );
    assert_eq!(
        device_wav(&wav(8000, 1, 100), 4096, p),
        Err(Error::Wav(wav::Error::SampleRate {
            found: 8000,
            expected: 4096
        }))
    );
    let soxr = policy(Resample::SoxrHq, Channels::Mean);
    assert_eq!(device_wav(&wav(8000, 1, 100), 4096, soxr), Ok(None));
    assert_eq!(device_wav(b"fLaC\0\0\0\x22", 4096, p), Ok(None));
    assert_eq!(device_wav(b"OggS....", 4096, p), Ok(None));
    assert!(matches!(
        device_wav(b"RIFF", 4096, p),
        Err(Error::Wav(wav::Error::TruncatedHeader { .. }))
    ));
}

#[test]
fn the_reference_path_equals_wav_decode_and_other_containers_are_named() {
    let bytes = wav(4096, 2, 300);
    let mut a = vec![1f32; 512];
    let mut b = vec![2f32; 512];
    let mut dec = ClipDecoder::new(4096, Policy::default());
    let d = dec.decode(&bytes, &mut a).unwrap();
    assert!(!d.resampled && d.container == Container::Wav && d.channels == 2);
    wav::decode(&bytes, 4096, &mut b).unwrap();
    assert_eq!(a, b);
    let e = dec.decode(b"MThd midi data", &mut a).unwrap_err();
    assert_eq!(
        e.to_string(),
        "not an audio file melforge reads (starts with b\"MThd\", expected WAV, FLAC, MP3, Ogg \
         Vorbis/Opus or MP4/M4A)"
    );
    // An ID3 tag is an MP3 file: cut short, it is named so.
    let e = dec.decode(b"ID3\x03 mp3 data", &mut a).unwrap_err();
    assert!(e.to_string().starts_with("truncated MP3 stream"), "{e}");
}

#[test]
fn resampled_length_is_ceil_of_n_times_the_ratio_then_padded_to_the_clip() {
    assert_eq!(resample::output_len(1000, 48000, 16000), 334);
    assert_eq!(resample::output_len(7, 22050, 4096), 2);
    assert_eq!(resample::output_len(44100, 44100, 4096), 4096);
    let mut dec = ClipDecoder::new(4096, policy(Resample::SoxrHq, Channels::Mean));
    // 0.1 s at 8 kHz → 410 samples at 4096 Hz, then zeros up to the clip.
    let mut clip = vec![1f32; 1000];
    let d = dec.decode(&wav(8000, 1, 800), &mut clip).unwrap();
    assert!(d.resampled && d.sample_rate == 8000);
    assert!(clip[..400].iter().any(|&x| x != 0.0));
    assert!(clip[410..].iter().all(|&x| x == 0.0));
}

#[test]
fn natural_length_keeps_every_sample_or_the_first_max_and_resamples_whole() {
    let bytes = wav(4096, 2, 300);
    let mut dec = ClipDecoder::new(4096, Policy::default());
    let mut clip = vec![0f32; 512];
    dec.decode(&bytes, &mut clip).unwrap();
    let mut natural = vec![7f32; 3];
    dec.decode_natural(&bytes, None, &mut natural).unwrap();
    assert_eq!(natural, clip[..300]);
    dec.decode_natural(&bytes, Some(100), &mut natural).unwrap();
    assert_eq!(natural, clip[..100]);
    // Resampled: librosa's length, ceil(n · to / from), the same samples as a
    // clip long enough to hold them.
    let soxr = policy(Resample::SoxrHq, Channels::Mean);
    let mut dec = ClipDecoder::new(4096, soxr);
    let bytes = wav(8000, 1, 1001);
    let want_len = (1001usize * 4096).div_ceil(8000);
    let mut clip = vec![0f32; 4096];
    assert!(dec.decode(&bytes, &mut clip).unwrap().resampled);
    dec.decode_natural(&bytes, None, &mut natural).unwrap();
    assert_eq!(natural.len(), want_len);
    assert_eq!(natural, clip[..want_len]);
    dec.decode_natural(&bytes, Some(200), &mut natural).unwrap();
    assert_eq!(natural, clip[..200]);
}

/// The output vector is reused without being cleared: a decode into one that
/// held a longer file's samples equals a decode into a fresh one.
#[test]
fn natural_decode_into_a_used_vector_equals_a_fresh_one() {
    let fresh = |bytes: &[u8], rate: u32, p: Policy| {
        let mut out = Vec::new();
        ClipDecoder::new(rate, p)
            .decode_natural(bytes, None, &mut out)
            .unwrap();
        out
    };
    for (rate, p) in [
        (4096, Policy::default()),
        (4096, policy(Resample::SoxrHq, Channels::First)),
        (2048, policy(Resample::SoxrHq, Channels::Mean)),
    ] {
        let mut dec = ClipDecoder::new(rate, p);
        let mut used = Vec::new();
        for bytes in [
            wav(4096, 2, 900),
            wav(4096, 2, 250),
            wav(4096, 1, 700),
            wav(4096, 1, 40),
        ] {
            dec.decode_natural(&bytes, None, &mut used).unwrap();
            assert_eq!(used, fresh(&bytes, rate, p), "rate {rate}, {p:?}");
        }
    }
}

/// `seg` of `bytes` at its natural length and native rate (no resampling).
fn natural(bytes: &[u8], rate: u32, seg: &Segment) -> Vec<f32> {
    let mut d = ClipDecoder::new(rate, policy(Resample::Off, Channels::Mean));
    let mut out = Vec::new();
    d.decode_natural_segment(bytes, Some(seg), None, &mut out)
        .unwrap_or_else(|e| panic!("{seg:?}: {e}"));
    out
}

fn cut(offset_s: f64, duration_s: f64, channel: Option<u16>) -> Segment {
    Segment {
        offset_s,
        duration_s: Some(duration_s),
        channel,
        ..Segment::default()
    }
}

/// A cut's channel > 0 of a stereo FLAC is that channel alone: exactly the
/// WAV's samples of it (FLAC is lossless; sox wrote the FLAC). Of a stereo
/// MP3 and Opus, each channel is its own (they differ) and their mean is
/// bit for bit the mono mix the policy gives: the channel is picked from
/// the same decoded frames the mean is made of. librosa's own channel is
/// the parity script's check (scripts/parity_manifest.py).
#[test]
fn a_cuts_channel_is_that_channel_of_flac_mp3_and_opus() {
    let rate = 16_000;
    // Left and right differ: frame i's left is sample 2i, its right 2i + 1.
    let pcm = wav(rate, 2, 40_000);
    let d = tempfile::tempdir().unwrap();
    let (w, f) = (d.path().join("s.wav"), d.path().join("s.flac"));
    std::fs::write(&w, &pcm).unwrap();
    let sox = std::process::Command::new("sox").arg(&w).arg(&f).status();
    if sox.is_ok_and(|s| s.success()) {
        let flac = std::fs::read(&f).unwrap();
        for c in [0u16, 1] {
            let got = natural(&flac, rate, &cut(0.5, 1.25, Some(c)));
            let want: Vec<f32> = (8000..8000 + 20_000)
                .map(|i| {
                    let at = 44 + 4 * i + 2 * usize::from(c);
                    f32::from(i16::from_le_bytes([pcm[at], pcm[at + 1]])) / 32768.0
                })
                .collect();
            assert_eq!(got, want, "FLAC channel {c}");
        }
    } else {
        eprintln!("no sox: the FLAC case is left out");
    }
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/codecs/");
    for (name, rate) in [
        ("speech44k_stereo.mp3", 44_100),
        ("speech44k_stereo.opus", 48_000),
    ] {
        let bytes = std::fs::read(format!("{data}{name}")).unwrap();
        let one = |c| natural(&bytes, rate, &cut(0.3, 0.4, c));
        let (left, right, mean) = (one(Some(0)), one(Some(1)), one(None));
        assert_eq!(left.len(), mean.len(), "{name}");
        assert_ne!(left, right, "{name}: the channels are the same");
        let mixed: Vec<f32> = left
            .iter()
            .zip(&right)
            .map(|(a, b)| (a + b) / 2.0)
            .collect();
        assert_eq!(mixed, mean, "{name}");
    }
    // A channel the file does not have is the item's reason.
    let bytes = std::fs::read(format!("{data}speech44k_stereo.mp3")).unwrap();
    let mut dec = ClipDecoder::new(44_100, Policy::default());
    let e = dec
        .decode_natural_segment(&bytes, Some(&cut(0.0, 0.1, Some(2))), None, &mut Vec::new())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoSuchChannel {
                channel: 2,
                channels: 2
            }
        ),
        "{e}"
    );
}
