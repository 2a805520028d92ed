"""`melforge.features` from the installed wheel: the in-process extension
loads and computes, batches equal single calls on any thread count, and bad
input raises the error that names the argument. (Parity with the binary's
rows and with the references: scripts/parity_features.py.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("melforge._native", reason="the in-process extension is not built here")

from melforge import features as F  # noqa: E402


def speech(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    y = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (y + 0.01 * rng.standard_normal(n)).astype(np.float32)


def test_shapes_follow_torchaudios_frame_count_and_options() -> None:
    y = speech(16000)
    assert F.kaldi_fbank(y).shape == (98, 23)
    assert F.kaldi_fbank(y, num_mel_bins=80, use_energy=True).shape == (98, 81)
    assert F.kaldi_fbank(y, snip_edges=False).shape == (100, 23)
    assert F.kaldi_mfcc(y, num_ceps=20, num_mel_bins=40).shape == (98, 20)
    w = F.whisper_log_mel(y, n_mels=128)
    assert w.shape == (128, 3000) and w.dtype == np.float32
    # Past the covering frames, the extractor's padding value throughout.
    assert np.all(w[:, 200:] == w[0, -1])


def test_log_mel_takes_librosas_keywords_at_any_length() -> None:
    y = speech(16000)
    # melspectrogram's defaults: n_fft 2048, hop 512, centred: 1 + 16000 // 512.
    assert F.log_mel(y).shape == (128, 32)
    assert F.log_mel(y, sr=16000, n_fft=400, hop_length=160, n_mels=80).shape == (80, 101)
    assert F.log_mel(y, center=False, n_fft=512, hop_length=256).shape == (128, 61)
    # power_to_db's top_db=80 clamps the row at its maximum − 80 dB.
    quiet = np.concatenate([y, np.zeros(16000, np.float32)])
    row = F.log_mel(quiet)
    assert row.min() == pytest.approx(row.max() - 80.0, abs=1e-4)
    assert F.log_mel(quiet, top_db=None).min() < row.max() - 80.0
    rows = F.log_mel([y, quiet, y[:100]], threads=2)
    assert [r.shape[1] for r in rows] == [32, 63, 1]
    assert rows[1].tobytes() == row.tobytes()
    with pytest.raises(TypeError, match="hop_length"):
        F.log_mel(y, hop=256)
    with pytest.raises(ValueError, match="too few for one frame"):
        F.log_mel(y[:100], center=False)


def test_dtypes_are_read_as_a_wav_decoder_reads_them() -> None:
    y16 = (speech(8000) * 32767).astype(np.int16)
    y = (y16.astype(np.float32) / np.float32(32768)).astype(np.float32)
    a = F.kaldi_fbank(y16)
    assert a.dtype == np.float32
    assert a.tobytes() == F.kaldi_fbank(y).tobytes()
    assert a.tobytes() == F.kaldi_fbank(y.astype(np.float64)).tobytes()
    # A strided view is made contiguous, not refused.
    assert F.kaldi_fbank(np.repeat(y, 2)[::2]).tobytes() == a.tobytes()


def test_a_batch_equals_its_single_calls_on_any_thread_count() -> None:
    ys = [speech(4000 + 1500 * i, seed=i) for i in range(7)]
    one = F.kaldi_fbank(ys, threads=1)
    for y, row in zip(ys, one):
        assert F.kaldi_fbank(y).tobytes() == row.tobytes()
    dithered = [F.kaldi_mfcc(ys, threads=t, dither=1.0, seed=3) for t in (1, 2, 4)]
    for rows in dithered[1:]:
        assert [r.tobytes() for r in rows] == [r.tobytes() for r in dithered[0]]
    assert dithered[0][0].tobytes() != F.kaldi_mfcc(ys[0]).tobytes()


def test_bad_input_names_the_argument() -> None:
    y = speech(4000)
    with pytest.raises(TypeError, match="num_mel_bins"):
        F.kaldi_fbank(y, n_mels=80)
    with pytest.raises(TypeError, match="snip_edges"):
        F.kaldi_fbank(y, snip_edges="yes")
    with pytest.raises(ValueError, match="num_mel_bins"):
        F.kaldi_fbank(y, num_mel_bins=0)
    bad = y.copy()
    bad[3] = np.inf
    with pytest.raises(ValueError, match=r"waveforms\[1\].*index 3"):
        F.kaldi_fbank([y, bad])
    # Past the first blocks of the vectorised check, and in the last, short one.
    for at in (1000, 3999):
        late = y.copy()
        late[at] = np.nan
        with pytest.raises(ValueError, match=f"index {at}$"):
            F.log_mel(late)
    with pytest.raises(ValueError, match="fewer than one frame"):
        F.kaldi_fbank(y[:200])
    with pytest.raises(ValueError, match="empty"):
        F.whisper_log_mel(np.zeros(0, np.float32))
    with pytest.raises(TypeError, match="uint8"):
        F.kaldi_fbank(np.zeros(800, np.uint8))


def test_decode_reads_wav_bytes_and_parts_of_them() -> None:
    import io
    import wave

    y16 = (speech(16000) * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(y16.tobytes())
    data = buf.getvalue()
    import melforge

    y, rate = melforge.decode(data)
    assert rate == 16000 and y.dtype == np.float32
    assert y.tobytes() == (y16.astype(np.float32) / np.float32(32768)).astype(np.float32).tobytes()
    part, _ = melforge.decode(data, offset=0.25, duration=0.5)
    assert part.tobytes() == y[4000:12000].tobytes()
    with pytest.raises(ValueError, match="data"):
        melforge.decode(b"not audio" * 10)
