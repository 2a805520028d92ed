"""`torchaudio.compliance.kaldi.fbank` and `.mfcc`, computed by melforge.

Drop-in for WeNet-style data pipelines: the same signature (keyword names,
defaults, a `(channels, time)` waveform tensor and `channel`), the same
output, a `(frames, bins)` tensor of the waveform's dtype on its device,
computed in-process by melforge's recipes (`melforge.features`: the rows a
`melforge build` stores, within docs/FORMAT.md's tolerances of
kaldi-native-fbank, which computes torchaudio's numbers).

```python
import melforge.torch as kaldi            # instead of torchaudio.compliance.kaldi
feats = kaldi.fbank(waveform * 32768, num_mel_bins=80, frame_length=25, frame_shift=10,
                    dither=0.0, energy_floor=0.0, sample_frequency=16000)
```

`subtract_mean` and `min_duration` behave as torchaudio's; VTLN
(`vtln_warp` other than 1.0) and `htk_compat=True` are a `ValueError`
(melforge does not compute them). A waveform too short for one frame gives
torchaudio's empty result, `(0, 0)`. The computation is float32 on the
CPU; a tensor on another device is copied there and back.

Importing this module imports torch.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from . import features as _features

__all__ = ["fbank", "mfcc"]

# torchaudio's keyword defaults that melforge's options do not carry.
_TORCHAUDIO_ONLY = dict(channel=-1, htk_compat=False, min_duration=0.0, subtract_mean=False,
                        vtln_high=-500.0, vtln_low=100.0, vtln_warp=1.0)


def _run(kind: str, waveform: Any, options: Dict[str, Any]) -> Any:
    own = {k: options.pop(k, v) for k, v in _TORCHAUDIO_ONLY.items()}
    if own["vtln_warp"] != 1.0:
        raise ValueError(f"vtln_warp = {own['vtln_warp']}: melforge computes no VTLN (1.0 only)")
    if own["htk_compat"]:
        raise ValueError("htk_compat = True: melforge computes Kaldi's layout only (False)")
    if not isinstance(waveform, torch.Tensor):
        raise TypeError(f"waveform: expected a torch tensor, got {type(waveform).__name__}")
    if waveform.dim() != 2:
        raise ValueError(f"waveform: expected (channels, time), got shape {tuple(waveform.shape)}")
    channel = max(int(own["channel"]), 0)
    if channel >= waveform.shape[0]:
        raise ValueError(f"channel = {own['channel']}: the waveform has {waveform.shape[0]} channel(s)")
    rate = float(options.get("sample_frequency", 16000.0))
    if waveform.shape[1] < own["min_duration"] * rate:
        return torch.empty(0, dtype=waveform.dtype, device=waveform.device)
    x = waveform[channel].detach().to("cpu", torch.float32).contiguous()
    compute = _features.kaldi_fbank if kind == "fbank" else _features.kaldi_mfcc
    try:
        out = compute(x, **options)
    except ValueError as e:
        if "fewer than one frame" not in str(e):
            raise
        return torch.empty((0, 0), dtype=waveform.dtype, device=waveform.device)
    if own["subtract_mean"]:
        out = out - out.mean(dim=0, keepdim=True)
    return out.to(device=waveform.device, dtype=waveform.dtype)


def fbank(waveform: Any, **options: Any) -> Any:
    """`torchaudio.compliance.kaldi.fbank(waveform, **options)`, by melforge."""
    return _run("fbank", waveform, options)


def mfcc(waveform: Any, **options: Any) -> Any:
    """`torchaudio.compliance.kaldi.mfcc(waveform, **options)`, by melforge."""
    return _run("mfcc", waveform, options)
