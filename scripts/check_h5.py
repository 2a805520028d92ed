#!/usr/bin/env python3
"""Check every <split>.h5 in a melforge output directory against the schema.

Usage: check_h5.py OUT_DIR [--expect-rows SPLIT=N ...] [--quiet]

Opens each <split>.h5 with h5py and checks: the three datasets and their dtypes;
mel's shape against the n_long/n_short/n_mels/n_frames attributes; chunking along N
(chunk = (chunk_files, n_long, n_short, n_mels, n_frames), N resizable); label and
path lengths equal N; label in -1..len(label_names); every path decodes as a UTF-8
str (a variable-length string dataset `path`, or, in a file `serve` appends to,
layout_version 2, the column `path_utf8` + `path_end`, with `meta` and
`label_names` columns of the same kind, their ends in order and within their
bytes); every documented root attribute present with the right kind; optionally the
row count of named splits. Prints one summary line per file and every problem found;
exits 1 if there was any problem (2 for usage errors). Leftover *.h5.partial files
are reported as problems too (an interrupted build).

See docs/FORMAT.md for the schema.
"""

import argparse
import math
import re
import sys
from pathlib import Path

import h5py
import numpy as np

try:
    # Registers Blosc (filter 32001) for compact files' `features`
    # (docs/FORMAT.md, "Compact storage"); plain files need no filter.
    import hdf5plugin  # noqa: F401
except ImportError:
    pass

INT_ATTRS = [
    "sample_rate", "clip_samples", "n_fft", "hop_length", "win_length", "n_mels",
    "long_window", "long_hop", "short_window", "short_hop",
    "n_long", "n_short", "n_frames", "chunk_files",
]
REAL_ATTRS = ["clip_seconds", "power", "fmin", "fmax", "ref", "amin"]
BOOL_ATTRS = ["center", "segmentation_enabled"]
STR_ATTRS = {
    "melforge_version": None,
    "split": None,
    "window": {"hann", "hamming", "blackman", "boxcar"},
    "pad_mode": {"constant", "reflect"},
    "mel_scale": {"slaney", "htk"},
    "norm": {"slaney", "none"},
    "dtype": {"float32", "float16"},
}
MEL_DTYPES = {"float32": np.float32, "float16": np.float16}


def is_column(f, name):
    """Whether `name` is a string column of UTF-8 bytes and ends (serve's
    layout_version 2) rather than a variable-length string dataset."""
    return f"{name}_end" in f


def check_column(f, name, n, chunk_files, bad):
    """Checks string column `name` (bytes `name_utf8`, ends `name_end`):
    dtypes, `n` rows (None: any), chunking, ends in order and within the
    bytes, every string UTF-8. Returns the strings."""
    data, ends = f[f"{name}_utf8"], f[f"{name}_end"]
    if data.dtype != np.uint8 or data.ndim != 1 or data.maxshape != (None,):
        bad(f"{name}_utf8 is {data.dtype}{data.shape} max {data.maxshape}, expected resizable 1-D uint8")
    if ends.dtype != np.int64 or ends.ndim != 1 or ends.maxshape != (None,):
        bad(f"{name}_end is {ends.dtype}{ends.shape} max {ends.maxshape}, expected resizable 1-D int64")
    if n is not None and ends.shape != (n,):
        bad(f"{name}_end has shape {ends.shape}, expected ({n},)")
    if n is not None and ends.chunks != (chunk_files,):
        bad(f"{name}_end chunks {ends.chunks}, expected ({chunk_files},)")
    e = ends[:].astype(np.int64)
    if len(e) and (e[0] < 0 or (np.diff(e) < 0).any() or e[-1] > data.shape[0]):
        bad(f"{name}_end is not non-decreasing within the {data.shape[0]} bytes of {name}_utf8")
        return []
    raw = data[: int(e[-1]) if len(e) else 0].tobytes()
    out = []
    for i, (a, b) in enumerate(zip([0, *e[:-1].tolist()], e.tolist())):
        try:
            out.append(raw[a:b].decode("utf-8"))
        except UnicodeDecodeError as err:
            bad(f"{name} row {i} is not valid UTF-8: {err}")
            return out
    return out


def as_str(v):
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return v


def check_file(path, expect_rows):
    """Returns (summary line, list of problems)."""
    problems = []
    bad = problems.append
    # A shard of a sharded build (`build --shard K/N`) holds split <split>.
    split = re.sub(r"\.shard-\d+-of-\d+$", "", path.name[: -len(".h5")])
    with h5py.File(path, "r") as f:
        if as_str(f.attrs.get("layout")) == "frames":
            return check_frames(path, f, split, expect_rows)
        a = f.attrs
        # --- attributes ---
        for k in INT_ATTRS:
            if k not in a:
                bad(f"attribute {k} missing")
            elif not np.issubdtype(np.asarray(a[k]).dtype, np.integer):
                bad(f"attribute {k} is {np.asarray(a[k]).dtype}, expected an integer")
        for k in REAL_ATTRS:
            if k not in a:
                bad(f"attribute {k} missing")
            elif not np.issubdtype(np.asarray(a[k]).dtype, np.floating):
                bad(f"attribute {k} is {np.asarray(a[k]).dtype}, expected a float")
        if "top_db" in a and not (
            np.issubdtype(np.asarray(a["top_db"]).dtype, np.floating)
            and math.isfinite(a["top_db"]) and a["top_db"] >= 0
        ):
            bad(f"attribute top_db = {a['top_db']!r}, expected a float ≥ 0 or absent")
        for k in BOOL_ATTRS:
            if k not in a:
                bad(f"attribute {k} missing")
            elif np.asarray(a[k]).dtype != np.bool_:
                bad(f"attribute {k} is {np.asarray(a[k]).dtype}, expected bool")
        for k, allowed in STR_ATTRS.items():
            if k not in a:
                bad(f"attribute {k} missing")
                continue
            v = as_str(a[k])
            if not isinstance(v, str):
                bad(f"attribute {k} is {type(v).__name__}, expected str")
            elif allowed is not None and v not in allowed:
                bad(f"attribute {k} = {v!r}, expected one of {sorted(allowed)}")
        if as_str(a.get("split")) != split:
            bad(f"attribute split = {as_str(a.get('split'))!r}, file name says {split!r}")
        label_names = []
        if "label_names" not in a:
            bad("attribute label_names missing")
        else:
            label_names = [as_str(x) for x in np.asarray(a["label_names"]).reshape(-1)]
            # serve appends names in arrival order (ids never change): only
            # a build's list is sorted.
            served = "label_names" in f or "label_names_end" in f
            if served and len(set(label_names)) != len(label_names):
                bad("label_names are not distinct")
            elif not served and label_names != sorted(set(label_names)):
                bad("label_names are not sorted and distinct")
        if problems:
            return f"{path}: unreadable attributes", problems

        row_shape = tuple(int(a[k]) for k in ("n_long", "n_short", "n_mels", "n_frames"))
        chunk_files = int(a["chunk_files"])
        if a["segmentation_enabled"]:
            for k, want in (
                ("n_long", (a["clip_samples"] - a["long_window"]) // a["long_hop"] + 1),
                ("n_short", (a["long_window"] - a["short_window"]) // a["short_hop"] + 1),
            ):
                if a[k] != want:
                    bad(f"attribute {k} = {a[k]}, the window/hop attributes give {want}")
        elif row_shape[:2] != (1, 1):
            bad(f"segmentation off but (n_long, n_short) = {row_shape[:2]}")

        # --- datasets ---
        column_paths = is_column(f, "path")
        for name in ("mel", "label") + (() if column_paths else ("path",)):
            if name not in f or not isinstance(f[name], h5py.Dataset):
                bad(f"dataset {name} missing")
        if problems:
            return f"{path}: missing datasets", problems
        mel, label = f["mel"], f["label"]
        paths = None if column_paths else f["path"]
        n = mel.shape[0] if mel.ndim == 5 else -1

        want_dtype = MEL_DTYPES[as_str(a["dtype"])]
        if mel.dtype != want_dtype:
            bad(f"mel is {mel.dtype}, attribute dtype says {as_str(a['dtype'])}")
        if mel.ndim != 5 or mel.shape[1:] != row_shape:
            bad(f"mel shape {mel.shape}, attributes give (N, {', '.join(map(str, row_shape))})")
        if label.dtype != np.int32:
            bad(f"label is {label.dtype}, expected int32")
        if paths is not None:
            info = h5py.check_string_dtype(paths.dtype)
            if info is None or info.encoding != "utf-8" or info.length is not None:
                bad(f"path is {paths.dtype}, expected variable-length UTF-8 strings")
        served = served_columns(f, n, chunk_files, bad)
        for name in manifest_datasets(f):
            if f[name].shape != (n,):
                bad(f"{name} has shape {f[name].shape}, mel has {n} rows")
        problems += missing_sources(path, f, manifest_datasets(f))
        for name, ds, chunk in (
            ("mel", mel, (chunk_files,) + row_shape),
            ("label", label, (chunk_files,)),
        ) + ((("path", paths, (chunk_files,)),) if paths is not None else ()):
            if ds.shape[0] != n:
                bad(f"{name} has {ds.shape[0]} rows, mel has {n}")
            if ds.is_virtual:
                # `melforge merge`: a fixed-size virtual dataset over the
                # shard files, which must all be there.
                for vs in ds.virtual_sources():
                    if not (path.parent / vs.file_name).is_file():
                        bad(f"{name} maps {vs.file_name}, which does not exist")
                continue
            if ds.chunks != chunk:
                bad(f"{name} chunks {ds.chunks}, expected {chunk}")
            if ds.maxshape[0] is not None:
                bad(f"{name} is not resizable along N (maxshape {ds.maxshape})")
        if problems:
            return f"{path}: bad layout", problems

        # --- contents ---
        labels = label[:]
        lo, hi = -1, len(label_names)
        out = labels[(labels < lo) | (labels >= hi)]
        if out.size:
            bad(f"{out.size} labels outside -1..{hi}, e.g. {out[0]}")
        if not label_names and (labels != -1).any():
            bad("labels set but label_names is empty")
        if paths is None:
            strs = served.get("path", [])
        else:
            try:
                strs = paths.asstr()[:]
            except UnicodeDecodeError as e:
                bad(f"a path is not valid UTF-8: {e}")
                strs = []
        for p in strs:
            if not p or p.startswith("/") or "\\" in p:
                bad(f"path {p!r} is not a relative '/'-separated path")
                break
        if n > 0:
            # Spot-check the data: first and last rows readable and finite.
            for i in sorted({0, n - 1}):
                row = mel[i]
                if not np.isfinite(row).all():
                    bad(f"mel[{i}] has non-finite values")
        if split in expect_rows and expect_rows[split] != n:
            bad(f"{n} rows, expected {expect_rows[split]}")
        if n and mel.ndim == 5 and not problems:
            # One frame: mel[i, l, s, :, t] (docs/FORMAT.md, "CMVN statistics").
            frames = np.moveaxis(mel[:].astype(np.float64), 3, 4).reshape(-1, mel.shape[3])
            check_cmvn(f, frames, bad)

        used = np.unique(labels[labels >= 0]) if n else []
        summary = (
            f"{path.name}: split={split} N={n} mel={mel.dtype}{tuple(mel.shape)} "
            f"chunk={chunk_files} labels={len(label_names)} (used {len(used)}) "
            f"unlabelled={int((labels == -1).sum())} version={as_str(a['melforge_version'])}"
        )
        return summary, problems


def served_columns(f, n, chunk_files, bad):
    """Checks the string columns of a file `serve` appends to (none in a
    build file): `path` and `meta` with `n` rows, `label_names`, and that
    the file says layout_version 2. Returns the strings by column."""
    out = {}
    for name in ("path", "meta", "label_names"):
        if is_column(f, name):
            rows = None if name == "label_names" else n
            out[name] = check_column(f, name, rows, chunk_files, bad)
    if out and int(f.attrs.get("layout_version", 0)) != 2:
        bad(f"string columns {sorted(out)} but layout_version = {f.attrs.get('layout_version')}")
    if "meta" in out:
        for i, m in enumerate(out["meta"]):
            if m and not m.startswith("{"):
                bad(f"meta row {i} is not a JSON object: {m[:40]!r}")
                break
    return out


def manifest_datasets(f):
    """A manifest build's per-row `meta` and `line` (FORMAT.md "Manifests")."""
    return [n for n in ("meta", "line") if n in f]


def missing_sources(path, f, names):
    """Problems with the virtual datasets among `names`: a shard file they
    map that is not there (reads would give fill values)."""
    problems = []
    for name in names:
        if f[name].is_virtual:
            for vs in f[name].virtual_sources():
                if not (path.parent / vs.file_name).is_file():
                    problems.append(f"{name} maps {vs.file_name}, which does not exist")
    return problems


def check_cmvn(f, frames, bad):
    """The CMVN datasets, where the file has them, against every frame of
    its rows (`frames`, (count, bins) float64): the count exactly, the sums
    within float64 rounding (docs/FORMAT.md: they are summed row by row and
    the rows added in order, so they differ from numpy's order by at most
    (frames + rows) · 2^-53 of the sum of absolute values; 1e-9 of it is far
    above that and far below any row counted twice or left out)."""
    if "cmvn_frames" not in f:
        return
    count = int(f["cmvn_frames"][()])
    if count != frames.shape[0]:
        bad(f"cmvn_frames = {count}, the rows hold {frames.shape[0]} frames")
        return
    for name, want, scale in (
        ("cmvn_sum", frames.sum(axis=0), np.abs(frames).sum(axis=0)),
        ("cmvn_sum_square", (frames * frames).sum(axis=0), (frames * frames).sum(axis=0)),
    ):
        got = f[name][:]
        if got.shape != want.shape or (np.abs(got - want) > 1e-9 * (scale + 1.0)).any():
            bad(f"{name} is not the rows' (first bins {got[:3]}, the rows give {want[:3]})")


def check_frames(path, f, split, expect_rows):
    """A file of variable-length rows (FORMAT.md "Variable-length rows")."""
    problems = []
    bad = problems.append
    a = f.attrs
    for k in ("layout_version", "sample_rate", "n_bins", "chunk_frames", "chunk_files"):
        if k not in a or not np.issubdtype(np.asarray(a[k]).dtype, np.integer):
            bad(f"attribute {k} missing or not an integer")
    for k in ("recipe", "dtype", "split", "melforge_version"):
        if not isinstance(as_str(a.get(k)), str):
            bad(f"attribute {k} missing or not a string")
    if "frame_step_seconds" not in a:
        bad("attribute frame_step_seconds missing")
    if as_str(a.get("split")) != split:
        bad(f"attribute split = {as_str(a.get('split'))!r}, file name says {split!r}")
    padded = "padded_frames" in a
    column_paths = is_column(f, "path")
    names = ["features", "offsets", "lengths", "label"] + ([] if column_paths else ["path"])
    names += ["pad_value"] if padded else []
    for name in names:
        if name not in f:
            bad(f"dataset {name} missing")
    if problems:
        return f"{path}: bad variable-length file", problems
    bins, chunk_frames = int(a["n_bins"]), int(a["chunk_frames"])
    feats, offsets, lengths = f["features"], f["offsets"][:], f["lengths"][:]
    if feats.dtype != MEL_DTYPES.get(as_str(a["dtype"])):
        bad(f"features is {feats.dtype}, attribute dtype says {as_str(a['dtype'])}")
    if feats.ndim != 2 or feats.shape[1] != bins:
        bad(f"features shape {feats.shape}, expected (frames, {bins})")
    if feats.is_virtual:
        # `melforge merge`: `features` and the per-row datasets but
        # `offsets` map the shard files, which must all be there.
        problems += missing_sources(path, f, names + manifest_datasets(f))
    elif feats.chunks != (chunk_frames, bins):
        bad(f"features chunks {feats.chunks}, expected {(chunk_frames, bins)}")
    n = len(offsets)
    served_columns(f, n, int(a["chunk_files"]), bad)
    for name in names[1:] + manifest_datasets(f):
        if f[name].shape != (n,):
            bad(f"{name} has shape {f[name].shape}, offsets has {n} rows")
    if "line" in f and f["line"].dtype != np.uint32:
        bad(f"line is {f['line'].dtype}, expected uint32")
    if offsets.dtype != np.int64 or lengths.dtype != np.int32:
        bad(f"offsets/lengths are {offsets.dtype}/{lengths.dtype}, expected int64/int32")
    ends = np.cumsum(lengths.astype(np.int64))
    if n and (offsets[0] != 0 or (offsets[1:] != ends[:-1]).any()):
        bad("rows are not back to back: offsets[i+1] != offsets[i] + lengths[i]")
    if n and ends[-1] != feats.shape[0]:
        bad(f"rows cover {ends[-1]} frames, features has {feats.shape[0]}")
    if n and not np.isfinite(feats[: min(feats.shape[0], 4096)]).all():
        bad("features has non-finite values")
    if split in expect_rows and expect_rows[split] != n:
        bad(f"{n} rows, expected {expect_rows[split]}")
    if n and not problems:
        check_cmvn(f, feats[: int(ends[-1])].astype(np.float64), bad)
    summary = (
        f"{path.name}: split={split} N={n} recipe={as_str(a.get('recipe'))} "
        f"features={feats.dtype}{tuple(feats.shape)} version={as_str(a.get('melforge_version'))}"
    )
    return summary, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--expect-rows", nargs="*", default=[], metavar="SPLIT=N",
                    help="fail unless SPLIT.h5 has exactly N rows (and exists)")
    ap.add_argument("--quiet", action="store_true", help="print problems only")
    args = ap.parse_args()

    expect = {}
    for item in args.expect_rows:
        name, sep, num = item.partition("=")
        if not sep or not num.isdigit():
            ap.error(f"--expect-rows takes SPLIT=N, got {item!r}")
        expect[name] = int(num)

    if not args.out_dir.is_dir():
        print(f"{args.out_dir}: not a directory", file=sys.stderr)
        return 1
    files = sorted(args.out_dir.glob("*.h5"))
    failed = False
    if not files:
        print(f"{args.out_dir}: no *.h5 files", file=sys.stderr)
        failed = True
    for leftover in sorted(args.out_dir.glob("*.h5.partial")):
        print(f"{leftover}: unfinished .partial file", file=sys.stderr)
        failed = True
    for name in sorted(set(expect) - {p.name[:-3] for p in files}):
        print(f"{args.out_dir}/{name}.h5: missing (expected {expect[name]} rows)",
              file=sys.stderr)
        failed = True
    for path in files:
        try:
            summary, problems = check_file(path, expect)
        except Exception as e:  # noqa: BLE001 - any failure to read is a problem
            summary, problems = f"{path}: cannot be read", [f"{type(e).__name__}: {e}"]
        if not args.quiet:
            print(summary)
        for p in problems:
            print(f"  PROBLEM {path.name}: {p}", file=sys.stderr)
        failed |= bool(problems)
    if not args.quiet:
        print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
