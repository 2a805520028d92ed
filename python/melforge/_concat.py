"""`ConcatMelDataset`: several split files (or shards) read as one dataset.

Rows are numbered file after file. Label ids are mapped onto one list of
label names (the first file's names, then names only later files have, in
the order met), so a label id means the same name across the whole
concatenation even where files list different names.
"""

from __future__ import annotations

import bisect
import glob
import os
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._dataset import Index, MelDataset


class ConcatMelDataset:
    """`ds[i] -> (mel, label)` over the rows of several `MelDataset`s."""

    def __init__(self, datasets: Iterable[MelDataset]) -> None:
        self.datasets: List[MelDataset] = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatMelDataset needs at least one dataset")
        self._reindex()

    def _reindex(self) -> None:
        names: List[str] = []
        where = {}
        self._maps: List[np.ndarray] = []
        for d in self.datasets:
            for n in d.label_names:
                if n not in where:
                    where[n] = len(names)
                    names.append(n)
            # Entry k is the global id of the file's label k; -1 stays -1.
            self._maps.append(np.array([where[n] for n in d.label_names] + [-1], dtype=np.int64))
        self.label_names = names
        self._ends: List[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self._ends.append(total)

    @classmethod
    def from_dir(
        cls, directory: Union[str, "os.PathLike[str]"], splits: Optional[Sequence[str]] = None, **kw: object
    ) -> "ConcatMelDataset":
        """Every `<split>.h5` of a build or serve output directory (sorted by
        name), or only the named `splits` in that order. `kw` goes to each
        `MelDataset`."""
        directory = os.fspath(directory)
        if splits is None:
            paths = sorted(glob.glob(os.path.join(glob.escape(directory), "*.h5")))
            if not paths:
                raise FileNotFoundError(f"no .h5 files in {directory}")
        else:
            paths = [os.path.join(directory, f"{s}.h5") for s in splits]
        return cls(MelDataset(p, **kw) for p in paths)  # type: ignore[arg-type]

    def refresh(self) -> int:
        """Refreshes every file (see `MelDataset.refresh`); returns new rows."""
        new = sum(d.refresh() for d in self.datasets)
        self._reindex()
        return new

    def __len__(self) -> int:
        return self._ends[-1]

    def locate(self, i: Index) -> Tuple[int, int]:
        """(file number, row in that file) of global row `i`."""
        j = int(i)
        n = len(self)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"row {int(i)} out of range for {n} rows")
        k = bisect.bisect_right(self._ends, j)
        return k, j - (self._ends[k - 1] if k else 0)

    def __getitem__(self, i: Index) -> Tuple[np.ndarray, int]:
        k, j = self.locate(i)
        mel, label = self.datasets[k][j]
        return mel, int(self._maps[k][label])

    @property
    def paths(self) -> List[str]:
        return [p for d in self.datasets for p in d.paths]

    def close(self) -> None:
        for d in self.datasets:
            d.close()

    def __repr__(self) -> str:
        return f"ConcatMelDataset({len(self.datasets)} files, rows={len(self)})"
