"""Features computed in-process, with the code `melforge build` stores them with.

The same recipes as `melforge build` (the Rust crate melforge-dsp, compiled
into the extension `melforge._native`), called on waveforms in memory: a
row equals the row a build stores for the same samples and options, bit for
bit, and stays within docs/FORMAT.md's tolerances of the references.

* `kaldi_fbank(waveform, **options)` and `kaldi_mfcc(waveform, **options)`:
  `torchaudio.compliance.kaldi.fbank` / `.mfcc`, with its keyword names and
  defaults (plus `sample_scale`: 32768 reads the waveform in int16 units, as
  the Kaldi binaries and WeNet do). A `(frames, bins)` float32 array.
* `whisper_log_mel(waveform, n_mels=80)`: transformers'
  `WhisperFeatureExtractor` (padded to 30 s): an `(n_mels, 3000)` float32
  array.
* `log_mel(waveform, **options)`: librosa's
  `power_to_db(melspectrogram(y=waveform, ...))` over the whole waveform,
  with both functions' keyword names and defaults (`sr=22050`,
  `n_fft=2048`, `n_mels=128`, `top_db=80.0`, ...): an `(n_mels, frames)`
  float32 array.
* `decode(path_or_bytes, offset=, duration=)`: `(samples, rate)`, mono at
  the file's own rate, through melforge's decoders (`melforge.decode` too).

A waveform is 1-D: a numpy array of float32 (used in place when
contiguous), float64 or int16 (int16 is read as `x / 32768`, as WAV decoders
do), or a CPU torch tensor (the result is then a torch tensor too). A list
of waveforms is computed on `threads` threads with the GIL released and
returns a list; with `dither`, item `i` is seeded with `seed + i`, so the
rows do not depend on the thread count. Plans are cached per option set.

Errors name the argument: `TypeError` for an unknown option (with the valid
ones), a value or dtype of the wrong type; `ValueError` for an empty
waveform, NaN or inf samples, a waveform shorter than one frame where
`snip_edges` refuses it, or an option out of range.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

Waveform = Any
"""A 1-D numpy array (float32, float64 or int16) or a CPU torch tensor."""

Features = Any
"""A float32 numpy array, or a torch tensor when a tensor came in."""

__all__ = [
    "decode",
    "kaldi_fbank",
    "kaldi_mfcc",
    "kaldi_option_names",
    "log_mel",
    "log_mel_option_names",
    "whisper_log_mel",
]

_F32 = npt.NDArray[np.float32]


def _native() -> ModuleType:
    try:
        from . import _native as native
    except ImportError as e:  # pragma: no cover (the wheel always has it)
        raise ImportError(
            "melforge.features needs the compiled extension melforge._native, which this "
            "installation lacks; install the melforge wheel (pip install melforge)"
        ) from e
    return native


def _is_torch(x: object) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _samples(x: Waveform, name: str) -> _F32:
    """`x` as a contiguous 1-D float32 array (no copy where it is one)."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(f"{name}: a torch tensor on {x.device}; move it to the CPU first")
        x = x.detach().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D waveform, got shape {x.shape}")
    if x.dtype == np.float32:
        return np.ascontiguousarray(x)
    if x.dtype == np.float64:
        return x.astype(np.float32)
    if x.dtype == np.int16:
        return (x.astype(np.float32) / np.float32(32768.0)).astype(np.float32)
    raise TypeError(f"{name}: dtype {x.dtype} is not float32, float64 or int16")


def _batch(waveform: Union[Waveform, Sequence[Waveform]]) -> Tuple[List[_F32], bool, bool]:
    """The waveforms, whether one came alone, and whether torch came in."""
    if isinstance(waveform, (list, tuple)):
        items = [_samples(w, f"waveforms[{i}]") for i, w in enumerate(waveform)]
        return items, False, any(_is_torch(w) for w in waveform)
    return [_samples(waveform, "waveform")], True, _is_torch(waveform)


def _out(rows: List[_F32], single: bool, torch: bool) -> Any:
    if torch:
        t: Any = importlib.import_module("torch")
        rows = [t.from_numpy(r) for r in rows]
    return rows[0] if single else rows


def _kaldi(kind: str, waveform: Any, threads: int, seed: int, options: dict[str, Any]) -> Any:
    items, single, torch = _batch(waveform)
    rows = _native().kaldi(kind, items, options, threads=threads, seed=seed)
    return _out(rows, single, torch)


def kaldi_fbank(
    waveform: Union[Waveform, Sequence[Waveform]],
    *,
    threads: int = 1,
    seed: int = 0,
    **options: Any,
) -> Features:
    """Kaldi filter-bank features, `torchaudio.compliance.kaldi.fbank`'s:
    `(frames, num_mel_bins [+1 with use_energy])` float32. `options` are its
    keywords (`kaldi_option_names("fbank")`)."""
    return _kaldi("fbank", waveform, threads, seed, options)


def kaldi_mfcc(
    waveform: Union[Waveform, Sequence[Waveform]],
    *,
    threads: int = 1,
    seed: int = 0,
    **options: Any,
) -> Features:
    """Kaldi MFCCs, `torchaudio.compliance.kaldi.mfcc`'s: `(frames, num_ceps)`
    float32. `options` are its keywords (`kaldi_option_names("mfcc")`)."""
    return _kaldi("mfcc", waveform, threads, seed, options)


def kaldi_option_names(kind: str = "fbank") -> List[str]:
    """The options `kaldi_fbank` ("fbank") or `kaldi_mfcc` ("mfcc") take."""
    names: List[str] = _native().kaldi_option_names(kind)
    return names


def whisper_log_mel(
    waveform: Union[Waveform, Sequence[Waveform]],
    n_mels: int = 80,
    *,
    threads: int = 1,
) -> Features:
    """Whisper's log-mel, `WhisperFeatureExtractor`'s `input_features` of one
    waveform (mono, 16 kHz; cut or padded to 30 s): `(n_mels, 3000)` float32."""
    items, single, torch = _batch(waveform)
    computed = _native().whisper(items, n_mels, threads=threads)
    rows = []
    for frames, pad in computed:
        full = np.full((n_mels, 3000), pad, dtype=np.float32)
        full[:, : frames.shape[0]] = frames.T
        rows.append(full)
    return _out(rows, single, torch)


def log_mel(
    waveform: Union[Waveform, Sequence[Waveform]],
    *,
    threads: int = 1,
    **options: Any,
) -> Features:
    """librosa's log-mel spectrogram of the whole waveform,
    `librosa.power_to_db(librosa.feature.melspectrogram(y=waveform, **mel),
    **db)`: `(n_mels, frames)` float32.

    `options` are those two functions' keywords (`log_mel_option_names()`),
    with their defaults: `sr=22050`, `n_fft=2048`, `hop_length=512`
    (None: `win_length // 4`), `win_length=None` (`n_fft`), `window="hann"`
    (or "hamming", "blackman", "boxcar"), `center=True`,
    `pad_mode="constant"` (or "reflect"), `power=2.0`, `n_mels=128`,
    `fmin=0.0`, `fmax=None` (`sr / 2`), `htk=False`, `norm="slaney"` (or
    None), `ref=1.0` (a number), `amin=1e-10`, `top_db=80.0` (or None).

    The waveform is analysed in float32, as `librosa.load` returns it (a
    float64 one is rounded to float32 first). With `center=False` it needs
    `n_fft` samples; with `pad_mode="reflect"`, more than `n_fft // 2`."""
    items, single, torch = _batch(waveform)
    rows = _native().log_mel(items, options, threads=threads)
    return _out(rows, single, torch)


def log_mel_option_names() -> List[str]:
    """The options `log_mel` takes, librosa's keyword names."""
    return list(_native().LOG_MEL_OPTIONS)


def decode(
    source: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview],
    offset: float = 0.0,
    duration: Optional[float] = None,
    sr: Optional[int] = None,
) -> Tuple[_F32, int]:
    """A recording as `(samples, rate)`: mono float32, decoded by melforge's
    decoders (WAV, FLAC, MP3, Ogg Vorbis and Opus, MP4 AAC), from `offset`
    seconds for `duration` seconds, as `librosa.load(source, sr=sr, offset=,
    duration=)` reads it: at the file's own rate when `sr` is None, else
    converted to `sr` Hz through libsoxr HQ (librosa's `soxr_hq`, the
    conversion `melforge build` makes). `source` is a path or the file's
    bytes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
    else:
        raise TypeError(f"source: expected a path or bytes, got {type(source).__name__}")
    if sr is not None and (isinstance(sr, bool) or not isinstance(sr, (int, np.integer))):
        raise TypeError(f"sr = {sr!r}: expected an int (Hz) or None")
    if sr is not None and sr <= 0:
        raise ValueError(f"sr = {sr}: expected a rate > 0 or None")
    samples: _F32
    samples, rate = _native().decode(
        data, float(offset), None if duration is None else float(duration), None if sr is None else int(sr)
    )
    return samples, rate
