#!/usr/bin/env python3
"""Writer rows/s of h5py's `write_direct_chunk` on the rows `benches/writer.rs` writes.

The same file layout as melforge's writer (libver latest, no time stamps,
`mel` (N, 79, 3, 32) chunked by 64 rows, `label` int32 and `path` UTF-8
strings chunked alike, every dataset grown chunk by chunk) and the same
4096 synthetic rows, already in memory; only the writing is timed (create
to close). Prints one line per dtype: best and median rows/s over --repeat
runs, for docs/BENCHMARKS.md next to the criterion figures.

Usage: scripts/bench-writer-h5py.py [--rows 4096] [--repeat 7] [--dir /dev/shm]
                                   [--dtype float32|float16|both] [--fsync] [--json]
--fsync syncs each file before its time is taken, as melforge's writer does
at finish (a build's exit 0 means its output is durable); --json prints one
JSON object per dtype instead (gpu-bench reads them).
Needs python3, h5py and numpy.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import h5py
import numpy as np

ROW_SHAPE = (79, 3, 32)
CHUNK = 64


def rows(n):
    r = np.arange(n, dtype=np.int64)[:, None]
    i = np.arange(int(np.prod(ROW_SHAPE)), dtype=np.int64)[None, :]
    vals = -80.0 + ((r * 31 + i * 7) % 800).astype(np.float32) * np.float32(0.1)
    return vals.astype(np.float32).reshape((n,) + ROW_SHAPE)


def write(path, mel, labels, paths):
    n = mel.shape[0]
    f = h5py.File(path, "w", libver="latest", track_order=False)
    d_mel = f.create_dataset(
        "mel", shape=(0,) + ROW_SHAPE, maxshape=(None,) + ROW_SHAPE,
        chunks=(CHUNK,) + ROW_SHAPE, dtype=mel.dtype, track_times=False)
    d_label = f.create_dataset(
        "label", shape=(0,), maxshape=(None,), chunks=(CHUNK,), dtype="i4",
        track_times=False)
    d_path = f.create_dataset(
        "path", shape=(0,), maxshape=(None,), chunks=(CHUNK,),
        dtype=h5py.string_dtype("utf-8"), track_times=False)
    pad = np.zeros((CHUNK,) + ROW_SHAPE, dtype=mel.dtype)
    for start in range(0, n, CHUNK):
        end = min(start + CHUNK, n)
        d_mel.resize(end, axis=0)
        block = mel[start:end]
        if end - start < CHUNK:
            pad[: end - start] = block
            pad[end - start:] = 0
            block = pad
        d_mel.id.write_direct_chunk((start, 0, 0, 0), np.ascontiguousarray(block).tobytes())
        d_label.resize(end, axis=0)
        d_label[start:end] = labels[start:end]
        d_path.resize(end, axis=0)
        d_path[start:end] = paths[start:end]
    f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    default_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    ap.add_argument("--dir", default=default_dir)
    ap.add_argument("--dtype", choices=("float32", "float16", "both"), default="both")
    ap.add_argument("--fsync", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    labels = (np.arange(a.rows) % 2).astype(np.int32)
    paths = [f"train/{['leak', 'noleak'][i % 2]}/clip{i:06d}.wav" for i in range(a.rows)]
    base = rows(a.rows)
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        for dtype in ("float32", "float16") if a.dtype == "both" else (a.dtype,):
            mel = base.astype(dtype)
            times = []
            for k in range(a.repeat):
                p = os.path.join(d, f"h5py-{dtype}-{k}.h5")
                t = time.perf_counter()
                write(p, mel, labels, paths)
                if a.fsync:
                    fd = os.open(p, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)
                times.append(time.perf_counter() - t)
                os.unlink(p)
            best, med = min(times), statistics.median(times)
            if a.json:
                print(json.dumps({"dtype": dtype, "rows": a.rows, "repeat": a.repeat, "fsync": a.fsync,
                                  "best_rows_per_s": a.rows / best, "median_rows_per_s": a.rows / med,
                                  "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version}))
                continue
            print(f"h5py write_direct_chunk {dtype}: {a.rows / best:,.0f} rows/s best, "
                  f"{a.rows / med:,.0f} rows/s median ({a.repeat} runs of {a.rows} rows, "
                  f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version})")


if __name__ == "__main__":
    main()
