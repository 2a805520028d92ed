"""`MelDataset`: one split file of a melforge dataset, read row by row.

Invariants:

* The HDF5 file is opened lazily, once per process: the handle remembers the
  pid that opened it and a different pid (a forked DataLoader worker) opens its
  own. Pickling drops the handle (spawned workers open their own too), so an
  `h5py.File` is never shared across processes.
* Random single-row reads are the trainer's access pattern. A `mel` chunk holds
  `chunk_files` rows (64 rows of 79x3x32 float32 is 1.9 MB); through a chunk
  cache (h5py's default) a random row misses it and HDF5 reads and copies the
  whole chunk to return one row. The file is opened with the chunk cache off
  (`rdcc_nbytes=0`, see `DEFAULT_CHUNK_CACHE_BYTES`): the datasets are not
  compressed, so HDF5 then reads only the row's bytes. Faster still, rows of
  chunks stored without filters are read with one `pread` at the byte offset
  HDF5 reports for their chunk (`_DirectRows`), skipping HDF5's per-call
  selection work; anything else goes through h5py.
* `label`s and `path`s are read once, at open and at `refresh()`, and held in
  memory; `ds[i]` reads only `mel[i]`.
* Two layouts (docs/FORMAT.md): librosa's fixed rows (`mel`, one row per
  index) and variable-length rows (`features` (total_frames, n_bins) with
  per-row `offsets` and `lengths`; attribute `layout = "frames"`). For the
  latter `ds[i]` is what the recipe's reference returns for the file: Kaldi
  fbank/MFCC as `(num_frames, num_bins)` float32 (torchaudio's orientation),
  Whisper as `(n_mels, 3000)` (`WhisperFeatureExtractor`'s `input_features[0]`):
  the stored frames, transposed, padded to `padded_frames` with the row's
  `pad_value`. `lengths` (frames per row) is read once like the labels.
* `refresh()` follows a running `melforge serve` (SWMR): it reopens the file
  and picks up the new rows, labels, paths and label names.
* Two layouts of the string columns `path`, `meta` and `label_names`
  (docs/FORMAT.md): variable-length string datasets (files of `build`), or,
  in every file `serve` appends to (`layout_version` 2), UTF-8 bytes
  `C_utf8` with per-row ends `C_end` (`_column` reads both).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import h5py
import numpy as np

#: Chunk cache size `MelDataset` opens files with: 0 turns HDF5's chunk cache
#: off, so a single-row read touches only that row (docs/BENCHMARKS.md,
#: "Issue 14": many times the rows/s of h5py's default cache on 64-row chunks).
DEFAULT_CHUNK_CACHE_BYTES = 0

Index = Union[int, np.integer]


def _decode(values: Any) -> List[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def _has_meta(f: h5py.File) -> bool:
    return "meta" in f or "meta_end" in f


def _column_len(f: h5py.File, name: str) -> int:
    """Rows of string column `name`, either layout."""
    dataset = f[name + "_end"] if name + "_end" in f else f[name]
    return int(dataset.shape[0])


def _column(f: h5py.File, name: str, lo: int = 0, hi: Optional[int] = None) -> List[str]:
    """Strings `lo..hi` of column `name`: a variable-length string dataset,
    or `name_utf8` bytes with `name_end` ends (string i is
    `utf8[end[i-1]:end[i]]`, from 0 for i = 0)."""
    if name + "_end" not in f:
        return _decode(f[name][lo:hi])
    ends = f[name + "_end"]
    hi = ends.shape[0] if hi is None else min(hi, ends.shape[0])
    if hi <= lo:
        return []
    end = ends[lo:hi].astype(np.int64)
    start = int(ends[lo - 1]) if lo else 0
    data = f[name + "_utf8"][start : int(end[-1])].tobytes()
    cuts = [0, *(end - start).tolist()]
    return [data[a:b].decode("utf-8") for a, b in zip(cuts, cuts[1:])]


def _meta_doc(raw: Any) -> Dict[str, Any]:
    """One `meta` entry as a dict: a JSON object, or {} for the empty entry
    of a served file without a sidecar."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return json.loads(text) if text else {}


def _filtered(ds: h5py.Dataset) -> bool:
    """Whether `ds` stores its chunks through filters."""
    return bool(ds.id.get_create_plist().get_nfilters() > 0)


def _plugins_for(ds: h5py.Dataset, path: str) -> None:
    """Makes `ds` readable: a compact file (`[output] storage = "compact"`)
    keeps `features` in Blosc chunks (HDF5 filter 32001), which h5py decodes
    once `hdf5plugin` is imported (it registers the filter)."""
    if not _filtered(ds):
        return
    try:
        import hdf5plugin  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"{path}: `{ds.name}` is stored compact (Blosc chunks, HDF5 filter 32001); "
            "reading it needs the hdf5plugin package: pip install hdf5plugin"
        ) from e


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


class _DirectRows:
    """Row reads that bypass HDF5's per-call overhead: for a `mel` dataset
    stored without filters (melforge never compresses), row `i` is
    `row_bytes` contiguous bytes at `chunk_offset[i // chunk_rows] +
    (i % chunk_rows) * row_bytes`. The offsets come from HDF5 itself
    (`H5Dget_chunk_info`) when the file is opened, and only rows that existed
    then (`rows`) are read this way; the caller reads any other row through
    h5py. Chunks without filters are written in place and never move.

    On this machine a row costs about one `pread` instead of an HDF5
    selection, a few times more rows/s (docs/BENCHMARKS.md, "Issue 14").
    """

    def __init__(self, fd: int, offsets: np.ndarray, chunk_rows: int, row_bytes: int, rows: int):
        self.fd, self.offsets, self.chunk_rows = fd, offsets, chunk_rows
        self.row_bytes, self.rows = row_bytes, rows

    @staticmethod
    def of(path: str, mel: h5py.Dataset) -> "Optional[_DirectRows]":
        """The direct reader for `mel`, or None where its layout does not
        allow one (filters, a non-native byte order, no chunk info API)."""
        dt = mel.dtype
        if _filtered(mel):
            return None
        if not dt.isnative or mel.chunks is None or len(mel.shape) < 1:
            return None
        dsid = mel.id
        if not hasattr(dsid, "get_num_chunks"):
            return None  # h5py < 3.0 / HDF5 < 1.10.5
        chunk_rows = mel.chunks[0]
        if mel.chunks[1:] != mel.shape[1:]:
            return None  # chunked along N only, as melforge writes
        row_bytes = dt.itemsize * int(np.prod(mel.shape[1:], dtype=np.int64))
        rows = mel.shape[0]
        n_chunks = -(-rows // chunk_rows)
        offsets = np.full(n_chunks, -1, dtype=np.int64)
        for k in range(dsid.get_num_chunks()):
            info = dsid.get_chunk_info(k)
            if info.filter_mask != 0 or info.byte_offset is None:
                return None
            c = info.chunk_offset[0] // chunk_rows
            if c < n_chunks:
                offsets[c] = info.byte_offset
        if (offsets < 0).any():
            return None  # an unallocated chunk (never written): let h5py read fill values
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return _DirectRows(fd, offsets, chunk_rows, row_bytes, rows)

    def read(self, i: int, out: np.ndarray) -> None:
        """Reads row `i` into `out` (C-contiguous, `row_bytes` long)."""
        c, r = divmod(i, self.chunk_rows)
        off = int(self.offsets[c]) + r * self.row_bytes
        got = os.preadv(self.fd, [out.data.cast("B")], off)
        if got != self.row_bytes:
            raise OSError(f"short read of row {i}: {got} of {self.row_bytes} bytes")

    def close(self) -> None:
        os.close(self.fd)


class MelDataset:
    """Rows of one melforge split file: `ds[i] -> (features, label)`.

    `features` is the row as the recipe's reference returns it:
    * librosa: shape `(n_long, n_short, n_mels, n_frames)` (float32, or
      float16 when the build wrote float16);
    * Kaldi fbank/MFCC (and lhotse-fbank): `(num_frames, num_bins)` float32,
      torchaudio's orientation, one frame per row of `features`;
    * Whisper: `(n_mels, 3000)` float32, `WhisperFeatureExtractor`'s
      `input_features[0]`: the stored frames transposed and padded with the
      row's `pad_value`.
    `label` is an int indexing `label_names` (-1 for a file with no label).

    Safe to hand to PyTorch `DataLoader` workers started by fork or spawn: the
    file is opened in each process on its first read.

    `swmr`: None (default) opens normally and falls back to SWMR when a
    running `melforge serve` has the file open for writing; True always opens
    with SWMR (to `refresh()` while a serve appends), False never.
    `rdcc_nbytes`: HDF5 chunk cache size per dataset; the default 0 is the
    fast path for random rows (see the module doc).
    `direct`: read rows of unfiltered chunks with `pread` at the offsets HDF5
    reports (see `_DirectRows`); False reads every row through h5py.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        swmr: Optional[bool] = None,
        rdcc_nbytes: int = DEFAULT_CHUNK_CACHE_BYTES,
        direct: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self._swmr_request = swmr
        self._rdcc_nbytes = int(rdcc_nbytes)
        self._fast = bool(direct)
        self._direct: Optional[_DirectRows] = None
        self._file: Optional[h5py.File] = None
        self._mel: Optional[h5py.Dataset] = None
        self.frames_layout = False
        self._offsets = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.int32)
        self._pads = np.zeros(0, dtype=np.float32)
        self.padded_frames: Optional[int] = None
        self._mel_rows = 0
        self._pid = -1
        self._labels = np.zeros(0, dtype=np.int32)
        self._paths: List[str] = []
        self.label_names: List[str] = []
        self.attrs: Dict[str, Any] = {}
        self._load_index(0)

    # -- metadata ---------------------------------------------------------

    def _load_index(self, have: int) -> None:
        """(Re)reads rows `have..` of `label` and `path`, the label names and
        the root attributes, through a fresh handle of this process."""
        self._close()
        f, swmr = _open(self.path, self._swmr_request, self._rdcc_nbytes)
        self.swmr = swmr
        self.frames_layout = "features" in f and "mel" not in f
        mel = f["features"] if self.frames_layout else f["mel"]
        _plugins_for(mel, self.path)
        label = f["label"]
        per_row = [label] + ([f["offsets"], f["lengths"]] if self.frames_layout else [mel])
        if self.frames_layout and "pad_value" in f:
            per_row.append(f["pad_value"])
        n = min([d.shape[0] for d in per_row] + [_column_len(f, "path")])
        if n < have:
            # The file shrank (a serve restarted after a crash and cut
            # unconfirmed rows): start over.
            have = 0
            self._labels = np.zeros(0, dtype=np.int32)
            self._paths = []
        if n > have:
            self._labels = np.concatenate([self._labels[:have], label[have:n]])
            self._paths = self._paths[:have] + _column(f, "path", have, n)
        if self.frames_layout:
            self._load_frames(f, have, n)
        if "label_names" in f or "label_names_end" in f:
            self.label_names = _column(f, "label_names")
        else:
            self.label_names = _decode(f.attrs.get("label_names", []))
        self.attrs = {k: f.attrs[k] for k in f.attrs.keys()}
        self.row_shape: Tuple[int, ...] = tuple(mel.shape[1:])
        self.dtype = mel.dtype
        self._n: int = int(n)
        self._adopt(f)

    def _load_frames(self, f: h5py.File, have: int, n: int) -> None:
        """Reads rows `have..n` of `offsets`, `lengths` and `pad_value`."""
        self._offsets = np.concatenate([self._offsets[:have], f["offsets"][have:n]])
        self._lengths = np.concatenate([self._lengths[:have], f["lengths"][have:n]])
        if "pad_value" in f:
            self._pads = np.concatenate([self._pads[:have], f["pad_value"][have:n]])
        padded = f.attrs.get("padded_frames")
        self.padded_frames = None if padded is None else int(padded)

    def _adopt(self, f: h5py.File) -> None:
        self._file, self._mel = f, f["features" if self.frames_layout else "mel"]
        self._mel_rows = self._mel.shape[0]
        self._pid = os.getpid()
        direct = self._fast and not self.frames_layout
        self._direct = _DirectRows.of(self.path, self._mel) if direct else None

    def _close(self) -> None:
        if self._pid == os.getpid():
            if self._file is not None:
                self._file.close()
            if self._direct is not None:
                self._direct.close()
        # A handle inherited through fork is left to the parent (closing it
        # here is not needed: the child only drops its reference).
        self._file, self._mel, self._pid, self._direct = None, None, -1, None

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

    @property
    def lengths(self) -> np.ndarray:
        """Frames of each row as stored (int32): a variable-length file's
        `lengths`; for librosa's fixed rows, every row's `n_frames`."""
        if self.frames_layout:
            return self._lengths[: self._n]
        frames = int(self.attrs.get("n_frames", self.row_shape[-1] if self.row_shape else 0))
        return np.full(self._n, frames, dtype=np.int32)

    def meta(self, i: Index) -> Dict[str, Any]:
        """What is known of row `i`'s file: `path` (relative to the build's
        input; a manifest's path as written), `label` (id, -1 for none),
        `label_name` (None for none) and `num_frames` (frames stored). A
        manifest build adds every field of the row's manifest line (NeMo:
        `audio_filepath`, `duration`, `offset`, `text`, … as written; lhotse:
        the cut's `id`, `start`, `duration`, `channel`, `recording_id`, its
        first supervision's `text`, `speaker`, `language` and its `custom`
        fields) and `line`, the 1-based manifest line. A stored corpus adds
        its sample's: WebDataset's `shard`, `key` and siblings (`json`,
        `txt`, `cls`, …), parquet's `file`, `row` and columns, Shar's cut
        fields and `shard` (no `line`). A file `serve` wrote
        adds the fields of the dropped file's sidecar (`<file>.json`), when
        it had one."""
        j = self._index(i)
        label = int(self._labels[j])
        out: Dict[str, Any] = {
            "path": self._paths[j],
            "label": label,
            "label_name": self.label_names[label] if 0 <= label < len(self.label_names) else None,
            "num_frames": int(self.lengths[j]),
        }
        f = self._file
        if f is None or self._pid != os.getpid():
            f, _ = _open(self.path, self.swmr, self._rdcc_nbytes)
            self._adopt(f)
            f = self._file
        if f is not None and _has_meta(f) and j < _column_len(f, "meta"):
            # The manifest's (or sidecar's) own fields win over the ones
            # derived above; serve stores "" for a file without a sidecar.
            out.update(_meta_doc(_column(f, "meta", j, j + 1)[0]))
            if "line" in f:
                out["line"] = int(f["line"][j])
        return out

    def rows_by(self, field: str = "id") -> Dict[Any, int]:
        """Row index by a manifest field's value (a manifest build's `meta`):
        `ds.rows_by("id")[cut.id]` finds a lhotse cut's row,
        `ds.rows_by("audio_filepath")` a NeMo item's. Rows without the field
        are left out; a value shared by several rows maps to the last."""
        f = self._file
        if f is None or self._pid != os.getpid():
            f, _ = _open(self.path, self.swmr, self._rdcc_nbytes)
            self._adopt(f)
            f = self._file
        if f is None or not _has_meta(f):
            raise KeyError(f"{self.path} has no `meta` (neither built from a manifest nor served)")
        out: Dict[Any, int] = {}
        for i, raw in enumerate(_column(f, "meta", 0, self._n)):
            doc = _meta_doc(raw)
            if field in doc:
                out[doc[field]] = i
        return out

    # -- rows -------------------------------------------------------------

    def cmvn_stats(self) -> Tuple[int, np.ndarray, np.ndarray]:
        """The split's global CMVN statistics as the file stores them:
        `(frames, sum, sum_square)`, the sums float64 arrays of one value per
        feature bin (docs/FORMAT.md, "CMVN statistics"). Raises `KeyError`
        for a file without them (an older melforge's), and `ValueError` when
        they do not cover every stored frame: rows appended by a `melforge
        serve` older than this one (which did not update them), or a flush
        of a running serve read half-way; stale statistics are refused
        rather than returned."""
        mel = self._dataset(0)
        f = mel.file
        if "cmvn_frames" not in f:
            raise KeyError(f"{self.path} holds no CMVN statistics (cmvn_frames)")
        frames = int(f["cmvn_frames"][()])
        if self.frames_layout:
            held = int(np.asarray(f["lengths"][: self._n], dtype=np.int64).sum())
        else:
            shape = mel.shape
            held = self._n * int(np.prod(shape[1:3])) * int(shape[4])
        if frames != held:
            raise ValueError(
                f"{self.path}: the CMVN statistics cover {frames} frames but the file holds {held}: "
                "rows were appended by a melforge serve older than this one, which did not update them "
                "(rebuild the split, or let a current serve append to it once), or a running serve's "
                "flush was read half-way (open the file again)"
            )
        return frames, f["cmvn_sum"][:].astype(np.float64), f["cmvn_sum_square"][:].astype(np.float64)

    def cmvn(self, eps: float = 1e-20) -> Tuple[np.ndarray, np.ndarray]:
        """Per-bin `(mean, std)` over every stored frame of the split, float64:
        `mean = sum / n`, `std = sqrt(max(sum_square / n - mean**2, eps))`
        (the variance floored at `eps`, as WeNet's `load_cmvn` floors it).
        Normalise a row with `(x - mean) / std`; a bin is a column of a
        variable-length row, a mel band of a librosa row (axis -2)."""
        frames, s, q = self.cmvn_stats()
        n = float(max(frames, 1))
        mean = s / n
        var = np.maximum(q / n - mean * mean, eps)
        return mean, np.sqrt(var)

    def _dataset(self, need: int) -> h5py.Dataset:
        """This process's `mel` dataset, holding at least `need` rows (for a
        variable-length file: `features`, holding at least `need` frames)."""
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
        if self.frames_layout:
            return self._frames_row(j), int(self._labels[j])
        d = self._dataset(j + 1)
        direct = self._direct
        if direct is not None and j < direct.rows:
            out = np.empty(self.row_shape, dtype=self.dtype)
            direct.read(j, out)
            return out, int(self._labels[j])
        return d[j], int(self._labels[j])

    def _frames_row(self, j: int) -> np.ndarray:
        """Row `j` of a variable-length file as its recipe's reference
        returns it (see the module doc)."""
        start, n = int(self._offsets[j]), int(self._lengths[j])
        d = self._dataset(start + n)
        x = np.asarray(d[start : start + n], dtype=np.float32)
        padded = self.padded_frames
        if padded is None:
            return x
        out = np.empty((x.shape[1], padded), dtype=np.float32)
        n = min(n, padded)
        out[:, :n] = x[:n].T
        out[:, n:] = self._pads[j]
        return out

    def batch(self, rows: Sequence[Index]) -> Tuple[np.ndarray, np.ndarray]:
        """Many rows at once: `(mel[len(rows), ...], labels[len(rows)])`, in
        the order given (one HDF5 read per row, without per-call overhead
        beyond that). Variable-length rows are padded with zeros at the end of
        their time axis, as `collate` does (their lengths: `ds.lengths[rows]`)."""
        if self.frames_layout:
            from ._batching import collate

            got = collate([self[i] for i in rows], time_axis=0 if self.padded_frames is None else -1)
            return got.features, got.labels
        idx = [self._index(i) for i in rows]
        out = np.empty((len(idx),) + self.row_shape, dtype=self.dtype)
        if idx:
            d = self._dataset(max(idx) + 1)
            direct = self._direct
            for k, j in enumerate(idx):
                if direct is not None and j < direct.rows:
                    direct.read(j, out[k])
                else:
                    out[k] = d[j]
        return out, self._labels[idx].astype(np.int64)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(len(self)):
            yield self[i]

    # -- pickling (spawned workers) ----------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"], state["_mel"], state["_pid"], state["_mel_rows"] = None, None, -1, 0
        state["_direct"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"MelDataset({self.path!r}, rows={self._n}, labels={len(self.label_names)})"
