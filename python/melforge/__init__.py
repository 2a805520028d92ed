"""Read melforge log-mel HDF5 datasets from Python (no torch needed).

`MelDataset(path)` reads one split file (`ds[i] -> (mel ndarray, label int)`),
lazily opened per process so it can go straight into PyTorch `DataLoader`
workers (fork or spawn); `refresh()` follows a running `melforge serve`.
`ConcatMelDataset` reads several split files or shards as one.
See docs/FORMAT.md in the melforge repository for the file layout.
"""

from ._concat import ConcatMelDataset
from ._dataset import DEFAULT_CHUNK_CACHE_BYTES, MelDataset

__all__ = ["ConcatMelDataset", "DEFAULT_CHUNK_CACHE_BYTES", "MelDataset"]
__version__ = "0.1.0"
