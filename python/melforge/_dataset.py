"""`MelDataset`: one split file of a melforge dataset, read row by row.

Invariants:

* The HDF5 file is opened lazily, once per process: the handle remembers the
  pid that opened it and a different pid (a forked DataLoader worker) opens its
  own. Pickling drops the handle (spawned workers open their own too), so an
  `h5py.File` is never shared across processes.
* Random single-row reads are the trainer's access pattern. A `mel` chunk holds
  `chunk_files` rows (64 rows of 79x3x32 float32 is 1.9 MB), bigger than h5py's
  default 1 MiB chunk cache, so with the defaults every row read reads and
  copies its whole chunk. The file is opened with the chunk cache off
  (`rdcc_nbytes=0`, see `DEFAULT_CHUNK_CACHE_BYTES`): the datasets are not
  compressed, so HDF5 then reads only the row's bytes.
* `label`s and `path`s are read once, at open and at `refresh()`, and held in
  memory; `ds[i]` reads only `mel[i]`.
* `refresh()` follows a running `melforge serve` (SWMR): it reopens the file
  (variable-length strings, `path` and `label_names`, are not covered by SWMR,
  so a long-open handle can fail to read new ones) and picks up the new rows,
  labels, paths and label names.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import h5py
import numpy as np

#: Chunk cache size `MelDataset` opens files with: 0 turns HDF5's chunk cache
#: off, so a single-row read touches only that row (docs/BENCHMARKS.md,
#: "Issue 14": about 10x the rows/s of h5py's 1 MiB default on 64-row chunks).
DEFAULT_CHUNK_CACHE_BYTES = 0

Index = Union[int, np.integer]


def _decode(values: Any) -> List[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def _open(path: str, swmr: Optional[bool], rdcc_nbytes: int) -> Tuple[h5py.File, bool]:
    """Opens `path` read-only; `swmr=None` tries a plain open first and falls
    back to SWMR when a writer (a running serve) holds the file."""
    kw = {"rdcc_nbytes": rdcc_nbytes}
    # SWMR opens take no file lock: a reader holding one would stop a running
    # serve from reopening its file (at shutdown and on restart). Plain opens
    # keep h5py's default, so the same file can also be opened with plain
    # h5py in this process (HDF5 refuses mixed locking flags).
    swmr_kw = {"libver": "latest", "swmr": True, "locking": False, **kw}
    if swmr is None:
        try:
            return h5py.File(path, "r", **kw), False
        except OSError:
            return h5py.File(path, "r", **swmr_kw), True
    if swmr:
        return h5py.File(path, "r", **swmr_kw), True
    return h5py.File(path, "r", **kw), False


class MelDataset:
    """Rows of one melforge split file: `ds[i] -> (mel, label)`.

    `mel` is a numpy array of shape `(n_long, n_short, n_mels, n_frames)`
    (float32, or float16 when the build wrote float16) and `label` an int
    indexing `label_names` (-1 for a file with no label).

    Safe to hand to PyTorch `DataLoader` workers started by fork or spawn: the
    file is opened in each process on its first read.

    `swmr`: None (default) opens normally and falls back to SWMR when a
    running `melforge serve` has the file open for writing; True always opens
    with SWMR (to `refresh()` while a serve appends), False never.
    `rdcc_nbytes`: HDF5 chunk cache size per dataset; the default 0 is the
    fast path for random rows (see the module doc).
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        swmr: Optional[bool] = None,
        rdcc_nbytes: int = DEFAULT_CHUNK_CACHE_BYTES,
    ) -> None:
        self.path = os.fspath(path)
        self._swmr_request = swmr
        self._rdcc_nbytes = int(rdcc_nbytes)
        self._file: Optional[h5py.File] = None
        self._mel: Optional[h5py.Dataset] = None
        self._mel_rows = 0
        self._pid = -1
        self._labels = np.zeros(0, dtype=np.int32)
        self._paths: List[str] = []
        self.label_names: List[str] = []
        self.attrs: dict = {}
        self._load_index(0)

    # -- metadata ---------------------------------------------------------

    def _load_index(self, have: int) -> None:
        """(Re)reads rows `have..` of `label` and `path`, the label names and
        the root attributes, through a fresh handle of this process."""
        self._close()
        f, swmr = _open(self.path, self._swmr_request, self._rdcc_nbytes)
        self.swmr = swmr
        mel, label, path = f["mel"], f["label"], f["path"]
        n = min(mel.shape[0], label.shape[0], path.shape[0])
        if n < have:
            # The file shrank (a serve restarted after a crash and cut
            # unconfirmed rows): start over.
            have = 0
            self._labels = np.zeros(0, dtype=np.int32)
            self._paths = []
        if n > have:
            self._labels = np.concatenate([self._labels[:have], label[have:n]])
            self._paths = self._paths[:have] + _decode(path[have:n])
        if "label_names" in f:
            self.label_names = _decode(f["label_names"][:])
        else:
            self.label_names = _decode(f.attrs.get("label_names", []))
        self.attrs = {k: f.attrs[k] for k in f.attrs.keys()}
        self.row_shape: Tuple[int, ...] = tuple(mel.shape[1:])
        self.dtype = mel.dtype
        self._n = n
        self._adopt(f)

    def _adopt(self, f: h5py.File) -> None:
        self._file, self._mel = f, f["mel"]
        self._mel_rows = self._mel.shape[0]
        self._pid = os.getpid()

    def _close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        # A handle inherited through fork is left to the parent (closing it
        # here is not needed: the child only drops its reference).
        self._file, self._mel, self._pid = None, None, -1

    def close(self) -> None:
        """Closes this process's handle (the next read reopens it)."""
        self._close()

    def refresh(self) -> int:
        """Picks up rows appended since the last open or refresh (a running
        `melforge serve`); returns the number of new rows."""
        before = self._n
        self._load_index(before)
        return self._n - before

    @property
    def paths(self) -> List[str]:
        """Source path of each row, relative to the build's input (or the
        serve's drop directory)."""
        return self._paths

    @property
    def labels(self) -> np.ndarray:
        """Label id of each row (int32; -1 for none)."""
        return self._labels[: self._n]

    # -- rows -------------------------------------------------------------

    def _dataset(self, need: int) -> h5py.Dataset:
        """This process's `mel` dataset, holding at least `need` rows."""
        if self._pid != os.getpid() or self._mel is None:
            f, _ = _open(self.path, self.swmr, self._rdcc_nbytes)
            self._adopt(f)
        assert self._mel is not None
        if need > self._mel_rows:
            # A worker's handle predates rows the parent's refresh() found.
            self._mel.refresh()
            self._mel_rows = self._mel.shape[0]
        return self._mel

    def __len__(self) -> int:
        return self._n

    def _index(self, i: Index) -> int:
        j = int(i)
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(f"row {int(i)} out of range for {self._n} rows of {self.path}")
        return j

    def __getitem__(self, i: Index) -> Tuple[np.ndarray, int]:
        j = self._index(i)
        mel = self._dataset(j + 1)[j]
        return mel, int(self._labels[j])

    def batch(self, rows: Sequence[Index]) -> Tuple[np.ndarray, np.ndarray]:
        """Many rows at once: `(mel[len(rows), ...], labels[len(rows)])`, in
        the order given (one HDF5 read per row, without per-call overhead
        beyond that)."""
        idx = [self._index(i) for i in rows]
        out = np.empty((len(idx),) + self.row_shape, dtype=self.dtype)
        if idx:
            d = self._dataset(max(idx) + 1)
            for k, j in enumerate(idx):
                d.read_direct(out, np.s_[j], np.s_[k])
        return out, self._labels[idx].astype(np.int64)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(len(self)):
            yield self[i]

    # -- pickling (spawned workers) ----------------------------------------

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"], state["_mel"], state["_pid"], state["_mel_rows"] = None, None, -1, 0
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"MelDataset({self.path!r}, rows={self._n}, labels={len(self.label_names)})"
