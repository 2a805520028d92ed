"""transformers' `WhisperFeatureExtractor`, computed by melforge in-process.

`melforge.hf.WhisperFeatureExtractor` is transformers' own class with the
log-mel step replaced by melforge's (`melforge.features.whisper_log_mel`,
the rows a `melforge build` stores): it is called the same way (padding,
truncation, `return_tensors` "np" or "pt", `return_attention_mask`,
`do_normalize`, 80 or 128 bins), returns the same `BatchFeature` keys and
shapes, and saves and loads its `preprocessor_config.json`
(`save_pretrained`, `from_pretrained`). transformers does everything around
the log-mel itself (padding, truncation, normalisation, the mask), so only
the numbers of the log-mel differ, within docs/FORMAT.md's 1e-4.

melforge computes the batches transformers' defaults make: every waveform
padded or cut to 30 s at 16 kHz (`padding="max_length"`), no dither, on the
CPU. Anything else (`padding="longest"`, a dither, another device or
window) goes to transformers' own computation, unchanged. A batch runs on
`threads` Rust threads (`WhisperFeatureExtractor(threads=2)`; 1 by default).

```python
from melforge.hf import WhisperFeatureExtractor
fe = WhisperFeatureExtractor(feature_size=128)        # or .from_pretrained("openai/whisper-large-v3")
batch = fe([y1, y2], sampling_rate=16000, return_tensors="np")
```

Importing this module imports transformers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from transformers import WhisperFeatureExtractor as _Reference

from . import features as _features

__all__ = ["WhisperFeatureExtractor"]


class WhisperFeatureExtractor(_Reference):  # type: ignore[misc]
    """See the module doc."""

    def __init__(self, *args: Any, threads: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads = threads

    def _ours(self, waveforms: np.ndarray, device: str) -> bool:
        """Whether melforge computes this batch (transformers' defaults)."""
        return (
            device == "cpu"
            and not getattr(self, "dither", 0.0)
            and self.feature_size in (80, 128)
            and self.sampling_rate == 16000
            and self.n_fft == 400
            and self.hop_length == 160
            and waveforms.ndim in (1, 2)
            and waveforms.shape[-1] == self.n_samples
        )

    def _melforge(self, waveforms: np.ndarray) -> np.ndarray:
        batch = [np.ascontiguousarray(w, dtype=np.float32) for w in np.atleast_2d(waveforms)]
        rows = _features.whisper_log_mel(batch, n_mels=self.feature_size, threads=self.threads)
        out = np.stack(rows)
        return out if waveforms.ndim == 2 else out[0]

    def _np_extract_fbank_features(self, waveform_batch: np.ndarray, device: str) -> np.ndarray:
        if self._ours(np.asarray(waveform_batch), device):
            return self._melforge(np.asarray(waveform_batch))
        out: np.ndarray = super()._np_extract_fbank_features(waveform_batch, device)
        return out

    def _torch_extract_fbank_features(self, waveform: np.ndarray, device: str = "cpu") -> np.ndarray:
        if self._ours(np.asarray(waveform), device):
            return self._melforge(np.asarray(waveform))
        out: np.ndarray = super()._torch_extract_fbank_features(waveform, device)
        return out
