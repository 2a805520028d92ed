"""lhotse feature extractors computed by melforge in-process.

`Fbank` and `Mfcc` take lhotse's own `FbankConfig` / `MfccConfig` (its
defaults: 80 or 23 bins, `snip_edges=False`, `high_freq=-400`) and compute
Kaldi's features with melforge's recipes (`melforge.features`, the rows a
`melforge build` stores), within docs/FORMAT.md's tolerances of lhotse's own
`Fbank`/`Mfcc` and with lhotse's frame counts. `WhisperFbank` takes lhotse's
`WhisperFbankConfig` and computes lhotse's Whisper fbank, which is not
transformers' extractor: no padding to 30 s, the waveform reflected at both
ends (torch.stft's `center=True`), the last frame dropped, the clamp at the
maximum of the recording's own frames, zero frames appended to lhotse's
frame count. It is the librosa recipe's log-mel (`features.log_mel`: 400-point
Hann frames every 160 samples, 80 or 128 Slaney bins) in Whisper's scale.
They are registered under their own names (`melforge-fbank`,
`melforge-mfcc`, `melforge-whisper-fbank`), so a features manifest written
with them reads back once `melforge.lhotse` is imported, and they work
wherever lhotse takes an extractor:

```python
from lhotse.dataset import K2SpeechRecognitionDataset, OnTheFlyFeatures
import melforge.lhotse
dataset = K2SpeechRecognitionDataset(input_strategy=OnTheFlyFeatures(melforge.lhotse.Fbank()))
```

or `cuts.compute_and_store_features(melforge.lhotse.Fbank(), storage_path=...)`.
`extract_batch` computes a batch on `threads` Rust threads (the constructor's
argument; 1 by default, as a DataLoader worker is one process already).

What lhotse's configs allow and melforge does not compute is a `ValueError`
at construction: `norm_filters=True`, `torchaudio_compatible_mel_scale=False`,
a device other than the CPU, and (MFCC) `use_fft_mag=True`.

Importing this module imports lhotse (and torch).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import numpy as np
from lhotse.features.base import FeatureExtractor, register_extractor
from lhotse.features.kaldi.extractors import FbankConfig, MfccConfig
from lhotse.features.whisper_fbank import WhisperFbankConfig

from . import features as _features

__all__ = ["Fbank", "Mfcc", "WhisperFbank"]


def _cpu(c: Any) -> List[str]:
    if str(getattr(c, "device", "cpu")) != "cpu":
        return [f"device={c.device!r} (melforge computes on the CPU)"]
    return []


def _refuse(c: Any, refused: List[str]) -> None:
    if refused:
        raise ValueError(f"{type(c).__name__}: melforge cannot compute " + "; ".join(refused))


def _options(c: Any, kind: str) -> Dict[str, Any]:
    """melforge's (torchaudio's) options for lhotse's config `c`."""
    refused = _cpu(c)
    if getattr(c, "norm_filters", False):
        refused.append("norm_filters=True (melforge computes Kaldi's unnormalised filters)")
    if not getattr(c, "torchaudio_compatible_mel_scale", True):
        refused.append("torchaudio_compatible_mel_scale=False")
    if kind == "mfcc" and c.use_fft_mag:
        refused.append("use_fft_mag=True for MFCC (Kaldi's MFCC takes the power spectrum)")
    _refuse(c, refused)
    o: Dict[str, Any] = dict(
        sample_frequency=float(c.sampling_rate),
        frame_length=float(c.frame_length) * 1000.0,
        frame_shift=float(c.frame_shift) * 1000.0,
        round_to_power_of_two=bool(c.round_to_power_of_two),
        remove_dc_offset=bool(c.remove_dc_offset),
        preemphasis_coefficient=float(c.preemph_coeff),
        window_type=str(c.window_type),
        dither=float(c.dither),
        snip_edges=bool(c.snip_edges),
        energy_floor=float(c.energy_floor),
        raw_energy=bool(c.raw_energy),
        use_energy=bool(c.use_energy),
        low_freq=float(c.low_freq),
        high_freq=float(c.high_freq),
        num_mel_bins=int(c.num_filters),
    )
    if kind == "fbank":
        o["use_power"] = not c.use_fft_mag
    else:
        o["num_ceps"] = int(c.num_ceps)
        o["cepstral_lifter"] = float(c.cepstral_lifter)
    return o


def _mono(samples: Any, where: str) -> Any:
    """A (1, n) recording as its one channel; 1-D as it is."""
    shape = tuple(samples.shape)
    if len(shape) == 2 and shape[0] == 1:
        return samples[0]
    if len(shape) != 1:
        raise ValueError(f"{where}: expected one channel, got shape {shape}")
    return samples


class _Extractor(FeatureExtractor):  # type: ignore[misc]
    """What the extractors share: the rate check, one channel, and batches
    computed on `threads` Rust threads (`_rows`)."""

    def __init__(self, config: Optional[Any] = None, threads: int = 1) -> None:
        super().__init__(config=config)
        self.threads = threads

    def _rate(self) -> int:
        return int(self.config.sampling_rate)

    def _check_rate(self, sampling_rate: int) -> None:
        if sampling_rate != self._rate():
            raise ValueError(
                f"{type(self).__name__} is configured for sampling_rate {self._rate()}, "
                f"got {sampling_rate} (resample the cuts: CutSet.resample)"
            )

    def _rows(self, items: List[Any], threads: int) -> List[Any]:
        raise NotImplementedError

    def extract(self, samples: Any, sampling_rate: int) -> Any:
        self._check_rate(sampling_rate)
        return self._rows([_mono(samples, "samples")], 1)[0]

    def extract_batch(
        self,
        samples: Any,
        sampling_rate: int,
        lengths: Optional[Any] = None,
    ) -> Union[Any, List[Any]]:
        self._check_rate(sampling_rate)
        if lengths is not None:
            items = [samples[i, : int(n)] for i, n in enumerate(lengths)]
        elif isinstance(samples, (list, tuple)):
            items = [_mono(s, f"samples[{i}]") for i, s in enumerate(samples)]
        elif len(samples.shape) == 1:
            return [self.extract(samples, sampling_rate)]
        else:
            items = list(samples)
        return self._rows(items, self.threads)


class _Kaldi(_Extractor):
    kind = "fbank"

    def __init__(self, config: Optional[Any] = None, threads: int = 1) -> None:
        super().__init__(config=config, threads=threads)
        self.options = _options(self.config, self.kind)
        self._compute = _features.kaldi_fbank if self.kind == "fbank" else _features.kaldi_mfcc

    @property
    def frame_shift(self) -> float:
        return float(self.config.frame_shift)

    def feature_dim(self, sampling_rate: int) -> int:
        if self.kind == "mfcc":
            return int(self.config.num_ceps)
        return int(self.config.num_filters) + int(bool(self.config.use_energy))

    def _one(self, samples: Any) -> Any:
        """Features of one waveform; lhotse's 0 frames for one too short."""
        try:
            return self._compute(samples, **self.options)
        except ValueError as e:
            if "fewer than one frame" not in str(e):
                raise
            return np.zeros((0, self.feature_dim(self._rate())), np.float32)

    def _rows(self, items: List[Any], threads: int) -> List[Any]:
        try:
            return list(self._compute(items, threads=threads, **self.options))
        except ValueError as e:
            if "fewer than one frame" not in str(e):
                raise
            return [self._one(x) for x in items]


@register_extractor
class Fbank(_Kaldi):
    """lhotse's `Fbank`, computed by melforge (see the module doc)."""

    name = "melforge-fbank"
    config_type = FbankConfig
    kind = "fbank"


@register_extractor
class Mfcc(_Kaldi):
    """lhotse's `Mfcc`, computed by melforge (see the module doc)."""

    name = "melforge-mfcc"
    config_type = MfccConfig
    kind = "mfcc"


# lhotse's Whisper fbank: Whisper's 16 kHz, 400-point frames every 160 samples.
_WHISPER_RATE, _WHISPER_HOP = 16000, 160


def _whisper_scale(db: Any, samples: int) -> Any:
    """lhotse's Whisper fbank `(frames, n_mels)` of `samples` samples from
    melforge's log-mel in dB (`(n_mels, 1 + samples // 160)`, no clamp):
    the last frame dropped, log10 clamped at the maximum − 8, `(x + 4) / 4`,
    then zero frames up to lhotse's count, `(samples + 80) // 160`."""
    x = db[:, :-1] / np.float32(10.0)
    if x.shape[1]:
        x = np.maximum(x, x.max() - np.float32(8.0))
    x = (x + np.float32(4.0)) / np.float32(4.0)
    frames = max(x.shape[1], (samples + _WHISPER_HOP // 2) // _WHISPER_HOP)
    out = np.zeros((frames, x.shape[0]), np.float32)
    out[: x.shape[1]] = x.T
    return out


@register_extractor
class WhisperFbank(_Extractor):
    """lhotse's `WhisperFbank`, computed by melforge (see the module doc)."""

    name = "melforge-whisper-fbank"
    config_type = WhisperFbankConfig

    def __init__(self, config: Optional[Any] = None, threads: int = 1) -> None:
        super().__init__(config=config, threads=threads)
        _refuse(self.config, _cpu(self.config))
        self.options: Dict[str, Any] = dict(
            sr=_WHISPER_RATE,
            n_fft=400,
            hop_length=_WHISPER_HOP,
            n_mels=int(self.config.num_filters),
            center=True,
            pad_mode="reflect",
            top_db=None,
        )

    def _rate(self) -> int:
        return _WHISPER_RATE

    @property
    def frame_shift(self) -> float:
        return _WHISPER_HOP / _WHISPER_RATE

    def feature_dim(self, sampling_rate: int) -> int:
        return int(self.config.num_filters)

    def _rows(self, items: List[Any], threads: int) -> List[Any]:
        torch_in = any(_features._is_torch(x) for x in items)
        waves = [x.detach().cpu().numpy() if _features._is_torch(x) else x for x in items]
        dbs = _features.log_mel(waves, threads=threads, **self.options)
        rows = [_whisper_scale(db, len(w)) for db, w in zip(dbs, waves)]
        if torch_in:
            import torch

            return [torch.from_numpy(r) for r in rows]
        return rows
