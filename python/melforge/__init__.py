"""melforge from Python: build log-mel HDF5 datasets and read them.

Build (runs the `melforge` executable installed with this package):

* `build(input, out, config=..., backend=..., shard=..., progress=...)`
  returns a typed `BuildReport`; progress from the binary's JSON events
  (tqdm when installed); Ctrl-C stops the build and leaves nothing behind;
  failures raise `BuildError` with the binary's sentence.
* `merge(out)` joins a sharded build; `Config` is a dict or TOML file
  validated by `melforge check-config`; `serve_status(socket)` asks a running
  `melforge serve`.

Read (numpy and h5py only, no torch needed):

* `MelDataset(path)` reads one split file (`ds[i] -> (features ndarray,
  label int)`: librosa's fixed rows, Kaldi `(num_frames, num_bins)`, Whisper
  `(n_mels, 3000)`), lazily opened per process so it can go straight into
  PyTorch `DataLoader` workers (fork or spawn); `ds.lengths`, `ds.meta(i)`;
  `refresh()` follows a running `melforge serve`. `ConcatMelDataset` reads
  several split files or shards as one.
* `collate` / `collate_torch` pad a batch of variable-length rows and return
  the lengths; `LengthBatchSampler` groups rows of similar length, at most
  N frames per batch (no torch import at module load).

Compute in-process (`melforge.features`, the compiled extension in the
wheel; imported on first use, so `import melforge` needs no extension):

* `features.kaldi_fbank` / `kaldi_mfcc` (torchaudio's options) and
  `whisper_log_mel` on waveforms in memory: the rows a build stores, bit
  for bit; a list runs on Rust threads with the GIL released.
* `melforge.lhotse.Fbank` / `Mfcc`: lhotse extractors over them (for
  `OnTheFlyFeatures`; importing it imports lhotse).
* `melforge.hf.WhisperFeatureExtractor`: transformers' extractor with
  melforge's log-mel (importing it imports transformers).
* `melforge.torch.fbank` / `mfcc`: `torchaudio.compliance.kaldi`'s
  signature (importing it imports torch).
* `melforge.decode(path_or_bytes, offset=, duration=, sr=)`: `(samples, rate)`
  through melforge's decoders.

See docs/FORMAT.md in the melforge repository for the file layout.
"""

from typing import Any

from ._batching import Batch, LengthBatchSampler, collate, collate_torch
from ._binary import BinaryNotFound, find_binary
from ._build import build, merge, serve_status
from ._concat import ConcatMelDataset
from ._config import Config
from ._dataset import DEFAULT_CHUNK_CACHE_BYTES, MelDataset
from ._errors import BuildError, ConfigError
from ._report import (
    BuildReport,
    BusySeconds,
    MergeReport,
    OutputFile,
    Planned,
    ProgressEvent,
    Rejection,
    Ring,
    SerialStage,
    Startup,
    Stats,
)


def decode(*args: Any, **kwargs: Any) -> Any:
    """`melforge.features.decode`: a recording as `(samples, rate)`, mono, at
    its own rate or `sr`, through melforge's decoders (imports the
    extension)."""
    from .features import decode as _decode

    return _decode(*args, **kwargs)


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return "unknown"
    try:
        return version("melforge")
    except PackageNotFoundError:
        return "unknown"


__version__ = _version()
"""The distribution's version: Cargo.toml's, through the wheel's metadata."""

__all__ = [
    "Batch",
    "BinaryNotFound",
    "BuildError",
    "BuildReport",
    "BusySeconds",
    "ConcatMelDataset",
    "Config",
    "ConfigError",
    "DEFAULT_CHUNK_CACHE_BYTES",
    "LengthBatchSampler",
    "MelDataset",
    "MergeReport",
    "OutputFile",
    "Planned",
    "ProgressEvent",
    "Rejection",
    "Ring",
    "SerialStage",
    "Startup",
    "Stats",
    "build",
    "collate",
    "collate_torch",
    "decode",
    "find_binary",
    "merge",
    "serve_status",
]
