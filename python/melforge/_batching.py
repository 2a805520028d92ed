"""Batches of variable-length rows: `collate` and `LengthBatchSampler`.

Neither imports torch at module load (the package works without it):

* `collate(items)` stacks `(features, label)` items of different lengths
  into one zero-padded array and returns the lengths, as a `Batch` of numpy
  arrays; `collate_torch` is the same as torch tensors (torch imported when
  called), for `DataLoader(collate_fn=melforge.collate_torch)`.
* `LengthBatchSampler(lengths, max_frames)` is a `batch_sampler` for
  PyTorch's `DataLoader` (any iterable of index lists is one): rows of similar
  length go together so little is padded, and every batch holds at most
  `max_frames` frames counted as padded (`len(batch) * longest`), a row
  longer than that alone. The order is reproducible from `seed` and the
  epoch (`set_epoch`), so every `DataLoader` worker and rank agrees.
"""

from __future__ import annotations

from typing import Any, Iterator, List, NamedTuple, Sequence, Tuple

import numpy as np


class Batch(NamedTuple):
    """A padded batch: `features` (B, T, ...) with the time axis padded to
    the longest item, `lengths` (B,) the items' own lengths along it,
    `labels` (B,)."""

    features: Any
    lengths: Any
    labels: Any


def collate(
    items: Sequence[Tuple[np.ndarray, int]],
    *,
    time_axis: int = 0,
    pad_value: float = 0.0,
) -> Batch:
    """Pads items along `time_axis` (0: Kaldi's `(frames, bins)`; Whisper
    rows are `(n_mels, 3000)` already, use -1) with `pad_value` and stacks
    them. Returns numpy arrays: features float32 (or the items' dtype),
    lengths and labels int64."""
    if not items:
        return Batch(np.zeros((0,), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    arrays = [np.asarray(x) for x, _ in items]
    axis = time_axis % arrays[0].ndim
    lengths = np.array([a.shape[axis] for a in arrays], dtype=np.int64)
    shape = list(arrays[0].shape)
    shape[axis] = int(lengths.max())
    out = np.full([len(arrays)] + shape, pad_value, dtype=arrays[0].dtype)
    for k, a in enumerate(arrays):
        where: List[Any] = [k] + [slice(None)] * a.ndim
        where[1 + axis] = slice(0, a.shape[axis])
        out[tuple(where)] = a
    labels = np.array([int(y) for _, y in items], dtype=np.int64)
    return Batch(out, lengths, labels)


def collate_torch(items: Sequence[Tuple[np.ndarray, int]], *, time_axis: int = 0) -> Batch:
    """`collate` as torch tensors (imports torch when called)."""
    import importlib

    torch: Any = importlib.import_module("torch")
    b = collate(items, time_axis=time_axis)
    return Batch(torch.from_numpy(b.features), torch.from_numpy(b.lengths), torch.from_numpy(b.labels))


class LengthBatchSampler:
    """Index batches of similar-length rows, at most `max_frames` padded
    frames each (see the module doc).

    `lengths`: frames per row (`MelDataset.lengths`). Rows are shuffled
    (`shuffle`), cut into pools of `pool_batches` batches' worth, each pool
    sorted by length and packed greedily; the batches are then shuffled.
    `drop_last` drops each epoch's last, partly filled batch.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_frames: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 50,
        drop_last: bool = False,
    ) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {max_frames}")
        self.lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
        self.max_frames = int(max_frames)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.pool_batches = max(1, int(pool_batches))
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Changes the order for `epoch` (call once per epoch)."""
        self.epoch = int(epoch)

    def _batches(self) -> List[List[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        n = len(self.lengths)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        mean = float(self.lengths.mean()) if n else 1.0
        pool = max(1, int(self.pool_batches * self.max_frames / mean))
        batches: List[List[int]] = []
        for start in range(0, n, pool):
            part = order[start : start + pool]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batch: List[int] = []
            longest = 0
            for i in part.tolist():
                grown = max(longest, int(self.lengths[i]))
                if batch and grown * (len(batch) + 1) > self.max_frames:
                    batches.append(batch)
                    batch, grown = [], int(self.lengths[i])
                batch.append(i)
                longest = grown
            if batch:
                batches.append(batch)
        if self.drop_last and batches:
            batches.pop()
        if self.shuffle:
            batches = [batches[k] for k in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[List[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())
