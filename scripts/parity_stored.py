#!/usr/bin/env python3
"""Stored-input parity: WebDataset shards and parquet build to the tree's rows,
bit for bit, and damaged shards and parquet are rejected item by item.

Usage: parity_stored.py --melforge BIN [--utterances 200] [--shards 8]
                        [--parquet-files 2] [--seed 1] [--corpus DIR]
                        [--work DIR] [--after-bad-header any|rows|absent]

A corpus from scripts/make_stored_corpus.py (made in WORK, or `--corpus` to
reuse one with at least 4 shards) holds the same FLAC bytes as a tree
(`tree/train/<cls>/<key>.flac`), as WebDataset shards and as Hugging Face
parquet. melforge builds each under `recipe = "kaldi-fbank"` (80 bins), and:

* every build has one row per utterance and rejects nothing;
* for every key (tree: the path's stem; shards: `meta.key`; parquet:
  `meta.id`, its `id` column), the shard build's row and the parquet build's
  row equal the tree build's row bit for bit (same frames, same float32
  bytes): the container changes, the samples and so the numbers do not;
* the tree's label is the sample's `cls`;
* a shard row's `path` is `<shard file name>/<key>.flac` and its meta is
  `{"shard", "key", "json": {"speaker", "text"}, "txt", "cls": int}` as the
  sample's siblings hold them; a parquet row's meta has the scalar columns
  `id`, `text`, `speaker`, `cls`.

Then the negative inputs, copies of the first four shards and the first
parquet file, each damaged at its middle sample:

* `neg-000000.tar`: truncated in the middle of that sample's FLAC member;
* `neg-000001.tar`: one byte of that FLAC member's header name flipped (its
  checksum no longer matches);
* `neg-000002.tar`: that sample has only `.json` and `.txt` (no audio);
* `neg-000003.tar`: that sample has `KEY.flac` and `KEY.wav` (two audio);
* `negpq-00000-of-00001.parquet`: that row's `audio.bytes` is null.
* `crc-00000-of-00001.parquet` (written with page checksums): its middle row
  group's audio page damaged; that group's rows are one rejection naming the
  checksum, the others build.
* the shards gzipped (`train-*.tar.gz`): the same rows as the tree's.

Each set is built; `rejected.jsonl` must name each bad item (a line holding
the shard's file name and the sample's key or member, or for the header
the key, the member name as damaged, or the header's byte offset; the
parquet file's name and the row's 0-based index in the file or its id) with
a reason that says what is wrong (the REASONS patterns below, matched on
`kind` and `reason`); every good sample must be a row equal to its tree row,
no bad sample a row, and no good sample named in a rejection. The samples
after the damaged header have intact bytes: `--after-bad-header` says what
is required of them (any: rows or absent, reported; rows: a reader that
resyncs; absent: a reader that stops the shard there).

Exit status 1 on any failure, each printed as a FAIL line.
"""

import argparse
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import h5py
import numpy as np
import pyarrow as pa
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_stored_corpus import (  # noqa: E402
    load_corpus, make_corpus, parquet_table, write_parquet_table)

CONFIG = '[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 80\n'
# What a specific reason says, per damage (matched case-insensitively on
# "<kind> <reason>" of the rejected.jsonl line).
REASONS = {
    "truncated": r"truncat|unexpected end|end of (file|archive|data)|\beof\b|incomplete|short",
    "checksum": r"checksum",
    "no_audio": r"no audio|without (an )?audio|missing audio|lacks? (an )?audio",
    "two_audio": r"two audio|2 audio|multiple|more than one|several|ambiguous",
    "null_bytes": r"null|missing|\bnone\b|empty|no (audio )?bytes",
}


class Failures(list):
    def check(self, ok, message):
        if not ok:
            self.append(message)
        return ok


def sh_build(melforge, source, out, config):
    """`melforge build SOURCE --out OUT` under CONFIG; (json doc, None) or (None, why)."""
    cmd = [melforge, "build", source, "--out", out, "--config", config, "--json", "--progress", "none"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NO_COLOR="1"))
    if done.returncode != 0:
        tail = "\n    ".join(done.stderr.strip().splitlines()[-6:])
        return None, f"`{' '.join(cmd)}` exited {done.returncode}:\n    {tail}"
    try:
        return json.loads(done.stdout), None
    except json.JSONDecodeError as e:
        return None, f"`{' '.join(cmd)}`: its --json output does not parse ({e})"


class Split:
    """The one split file of a build, read whole (the corpus is small)."""

    def __init__(self, out):
        files = sorted(p for p in glob.glob(os.path.join(out, "*.h5")))
        if not files:
            raise ValueError(f"{out}: no split file")
        if len(files) > 1:
            raise ValueError(f"{out}: {len(files)} split files ({', '.join(map(os.path.basename, files))})"
                             ", expected one")
        self.file = files[0]
        with h5py.File(self.file, "r") as f:
            self.features = f["features"][:]
            self.offsets = f["offsets"][:]
            self.lengths = f["lengths"][:]
            self.paths = [p.decode() if isinstance(p, bytes) else p for p in f["path"][:]]
            self.labels = f["label"][:] if "label" in f else np.full(len(self.paths), -1)
            self.label_names = [str(x.decode() if isinstance(x, bytes) else x)
                                for x in f.attrs.get("label_names", [])]
            self.meta = [json.loads(m) if m else {} for m in f["meta"][:]] if "meta" in f else None

    def __len__(self):
        return len(self.paths)

    def row(self, i):
        return self.features[self.offsets[i]: self.offsets[i] + self.lengths[i]]

    def label_name(self, i):
        return self.label_names[self.labels[i]] if 0 <= self.labels[i] < len(self.label_names) else None


def stem(path):
    return os.path.basename(path).split(".", 1)[0]


def tree_key(split, i):
    return stem(split.paths[i])


def wds_key(split, i):
    m = split.meta[i] if split.meta is not None else {}
    return m.get("key") or stem(split.paths[i])


def parquet_key(split, i):
    m = split.meta[i] if split.meta is not None else {}
    return m.get("id") or stem(split.paths[i])


def index(split, key_of, name, fails):
    """{key: row}; a key twice is a failure."""
    out = {}
    for i in range(len(split)):
        k = key_of(split, i)
        fails.check(k not in out, f"{name}: key {k} is rows {out.get(k)} and {i}")
        out[k] = i
    return out


def same_row(a, b):
    """Bit for bit: same shape, same float32 bytes."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def compare_rows(name, split, keys, tree, tree_ix, fails, limit=10):
    bad = 0
    for k, i in keys.items():
        if k not in tree_ix:
            fails.append(f"{name}: row {i} ({k}) has no tree row")
            continue
        a, b = split.row(i), tree.row(tree_ix[k])
        if not same_row(a, b):
            bad += 1
            if bad <= limit:
                detail = (f"{a.shape} vs tree {b.shape}" if a.shape != b.shape else
                          f"max |diff| {np.abs(a.astype(np.float64) - b).max():.3g}")
                fails.append(f"{name}: row {i} ({k}) differs from the tree's row {tree_ix[k]}: {detail}")
    if bad > limit:
        fails.append(f"{name}: {bad - limit} more rows differ")
    return bad


def check_wds_meta(split, keys, samples, fails, limit=10):
    bad = 0
    for k, i in keys.items():
        s = samples.get(k)
        if s is None:
            continue
        m = split.meta[i] if split.meta is not None else None
        want = {"shard": s["shard"], "key": k, "json": {"speaker": s["speaker"], "text": s["text"]},
                "txt": s["text"], "cls": s["cls"]}
        problems = []
        if m is None:
            problems.append("no meta dataset")
        else:
            for field, v in want.items():
                if field not in m:
                    problems.append(f"no `{field}`")
                elif m[field] != v or type(m[field]) is not type(v):
                    problems.append(f"`{field}` is {m[field]!r}, expected {v!r}")
        if split.paths[i] != f"{s['shard']}/{k}.flac":
            problems.append(f"path {split.paths[i]!r}, expected {s['shard'] + '/' + k + '.flac'!r}")
        if problems:
            bad += 1
            if bad <= limit:
                fails.append(f"shards: row {i} ({k}): " + "; ".join(problems))
    if bad > limit:
        fails.append(f"shards: {bad - limit} more rows with wrong meta or path")


def check_parquet_meta(split, keys, samples, fails, limit=10):
    bad = 0
    for k, i in keys.items():
        s = samples.get(k)
        m = split.meta[i] if split.meta is not None else None
        if s is None:
            continue
        want = {"id": k, "text": s["text"], "speaker": s["speaker"], "cls": s["cls"]}
        problems = ["no meta dataset"] if m is None else [
            f"`{f}` is {m.get(f)!r}, expected {v!r}" for f, v in want.items() if m.get(f) != v]
        if problems:
            bad += 1
            if bad <= limit:
                fails.append(f"parquet: row {i} ({k}): " + "; ".join(problems))
    if bad > limit:
        fails.append(f"parquet: {bad - limit} more rows with wrong meta")


def read_rejected(out):
    p = os.path.join(out, "rejected.jsonl")
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------- negative inputs


def members(path):
    """[(TarInfo, bytes)] of a tar, in order."""
    with tarfile.open(path) as t:
        return [(m, t.extractfile(m).read()) for m in t.getmembers()]


def by_key(ms):
    """Sample keys in order of first appearance."""
    keys = []
    for m, _ in ms:
        k = stem(m.name)
        if k not in keys:
            keys.append(k)
    return keys


def write_tar(path, ms):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for m, data in ms:
            t.addfile(m, io.BytesIO(data))


def wav_of(flac):
    y, rate = sf.read(io.BytesIO(flac), dtype="int16")
    buf = io.BytesIO()
    sf.write(buf, y, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def negative_shards(corpus, doc, d):
    """Writes neg-00000{0..3}.tar in d; returns (their brace pattern, good keys,
    bad items, optional keys: the samples after the corrupted header)."""
    if len(doc["shards"]) < 4:
        raise SystemExit("the negative section needs a corpus of at least 4 shards")
    os.makedirs(d)
    good, bad, optional = [], [], []
    for k, src in enumerate(doc["shards"][:4]):
        src = os.path.join(corpus, "wds", src)
        name = f"neg-{k:06d}.tar"
        dst = os.path.join(d, name)
        ms = members(src)
        keys = by_key(ms)
        mid = keys[len(keys) // 2]
        flac = next(m for m, _ in ms if m.name == f"{mid}.flac")
        before = keys[: keys.index(mid)]
        after = keys[keys.index(mid) + 1:]
        if k == 0:
            # Cut half-way through the middle sample's FLAC data: the samples
            # after it are not in the file at all.
            with open(src, "rb") as f:
                data = f.read(flac.offset_data + flac.size // 2)
            with open(dst, "wb") as f:
                f.write(data)
            good += before
            bad.append(dict(what="truncated shard", must=[name], any=[mid], reason="truncated"))
        elif k == 1:
            # Flip a byte of the FLAC member's header name ("utt…" → "uut…"):
            # the header checksum no longer matches.
            with open(src, "rb") as f:
                data = bytearray(f.read())
            data[flac.offset + 1] ^= 0x01
            damaged = bytes(data[flac.offset: flac.offset + 100]).split(b"\0", 1)[0].decode("latin-1")
            with open(dst, "wb") as f:
                f.write(data)
            good += before
            optional += after
            bad.append(dict(what="corrupted header", must=[name],
                            any=[mid, damaged, str(flac.offset)], reason="checksum"))
        elif k == 2:
            write_tar(dst, [(m, b) for m, b in ms
                            if stem(m.name) != mid or m.name.endswith((".json", ".txt"))])
            good += before + after
            bad.append(dict(what="sample without audio", must=[name], any=[mid], reason="no_audio"))
        else:
            out = []
            for m, b in ms:
                out.append((m, b))
                if m.name == f"{mid}.flac":
                    wav = wav_of(b)
                    w = tarfile.TarInfo(f"{mid}.wav")
                    w.size, w.mtime, w.mode, w.uname, w.gname = len(wav), m.mtime, m.mode, m.uname, m.gname
                    out.append((w, wav))
            write_tar(dst, out)
            good += before + after
            bad.append(dict(what="sample with two audio members", must=[name], any=[mid],
                            reason="two_audio"))
        bad[-1]["key"] = mid
    pattern = os.path.join(d, "neg-{000000..000003}.tar")
    return pattern, good, bad, optional


def negative_parquet(corpus, doc, d):
    """negpq-00000-of-00001.parquet: the first parquet file, its middle row's
    audio.bytes null; returns (its glob, good keys, bad items)."""
    os.makedirs(d)
    samples = [s for s in doc["samples"] if s["parquet"] == doc["parquet_files"][0]]
    samples.sort(key=lambda s: s["parquet_row"])
    mid = len(samples) // 2
    rows = []
    for s in samples:
        p = os.path.join(corpus, "tree", doc["split"], str(s["cls"]), s["key"] + ".flac")
        with open(p, "rb") as f:
            rows.append(dict(s, flac=f.read()))
    table = parquet_table(rows)
    audio = table.column("audio").combine_chunks()
    bytes_col = audio.field("bytes").to_pylist()
    bytes_col[mid] = None
    audio = pa.StructArray.from_arrays([pa.array(bytes_col, pa.binary()), audio.field("path")],
                                       fields=list(table.schema.field("audio").type))
    table = table.set_column(table.schema.get_field_index("audio"), table.schema.field("audio"), audio)
    name = "negpq-00000-of-00001.parquet"
    write_parquet_table(os.path.join(d, name), table, 100)
    key = samples[mid]["key"]
    good = [s["key"] for i, s in enumerate(samples) if i != mid]
    bad = [dict(what="null audio bytes", must=[name], any=[str(mid), key], reason="null_bytes",
                key=key, row=mid)]
    return os.path.join(d, "negpq-*.parquet"), good, bad


def corrupt_page(melforge, corpus, doc, d, config, tree, tree_ix, fails):
    """A parquet file written with page checksums (pyarrow's
    write_page_checksum=True) whose middle row group's `audio` data page is
    damaged: that row group's rows are one rejection naming the file, the
    row range and the checksum; every row of the other groups builds, equal
    to the tree's. (Without a checksum, damage inside a snappy literal is
    undetectable by any reader: the bytes decode, altered.)"""
    import pyarrow.parquet as pq
    os.makedirs(d)
    samples = [s for s in doc["samples"] if s["parquet"] == doc["parquet_files"][-1]]
    samples.sort(key=lambda s: s["parquet_row"])
    rows = []
    for s in samples:
        p = os.path.join(corpus, "tree", doc["split"], str(s["cls"]), s["key"] + ".flac")
        with open(p, "rb") as f:
            rows.append(dict(s, flac=f.read()))
    group = max(1, len(rows) // 3)
    name = "crc-00000-of-00001.parquet"
    path = os.path.join(d, name)
    pq.write_table(parquet_table(rows), path, row_group_size=group, compression="snappy",
                   write_page_checksum=True)
    md = pq.ParquetFile(path).metadata
    g = 1
    audio = next(i for i in range(md.num_columns)
                 if md.schema.column(i).path.startswith("audio.bytes"))
    col = md.row_group(g).column(audio)
    # pyarrow dictionary-encodes the bytes: the chunk starts at its
    # dictionary page, which holds them.
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    at = start + col.total_compressed_size // 2
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(16)
        f.seek(at)
        f.write(bytes(x ^ 0x5A for x in b))
    lo = sum(md.row_group(i).num_rows for i in range(g))
    hi = lo + md.row_group(g).num_rows
    out = os.path.join(d, "out")
    report, why = sh_build(melforge, path, out, config)
    if not fails.check(why is None, f"corrupt page build: {why}"):
        return
    rejected = read_rejected(out)
    print(f"corrupt parquet page: {report['report']['files_ok']} rows, {len(rejected)} rejected:")
    for r in rejected:
        print("   ", json.dumps(r, ensure_ascii=False))
    fails.check(len(rejected) == 1 and rejected[0]["path"] == f"{name}/{lo}..{hi}"
                and re.search(r"checksum|crc", rejected[0]["reason"], re.I),
                f"corrupt page: expected one rejection of {name}/{lo}..{hi} naming the checksum, "
                f"got {rejected}")
    split = Split(out)
    keys = index(split, parquet_key, "corrupt page", fails)
    want = [s["key"] for i, s in enumerate(samples) if not lo <= i < hi]
    fails.check(sorted(keys) == sorted(want),
                f"corrupt page: rows {len(keys)}, expected the {len(want)} outside rows {lo}..{hi}")
    compare_rows("corrupt page", split, {k: keys[k] for k in want if k in keys}, tree, tree_ix, fails)


def gzipped(melforge, corpus, doc, d, config, tree, tree_ix, fails):
    """The shards gzipped (`.tar.gz`, as WebDataset accepts them): streamed
    once through gunzip, the same rows as the tree's."""
    import gzip
    os.makedirs(d)
    shards = sorted(glob.glob(os.path.join(corpus, "wds", "*.tar")))
    for p in shards:
        with open(p, "rb") as f, gzip.open(os.path.join(d, os.path.basename(p) + ".gz"), "wb", 1) as g:
            shutil.copyfileobj(f, g)
    out = os.path.join(d, "out")
    report, why = sh_build(melforge, os.path.join(d, doc["split"] + "-*.tar.gz"), out, config)
    if not fails.check(why is None, f"gzipped shards build: {why}"):
        return
    split = Split(out)
    keys = index(split, wds_key, "gzipped shards", fails)
    fails.check(sorted(keys) == sorted(s["key"] for s in doc["samples"]) and not report["rejected"],
                f"gzipped shards: {len(keys)} rows, {len(report['rejected'])} rejected")
    compare_rows("gzipped shards", split, keys, tree, tree_ix, fails)
    print(f"gzipped shards: {len(keys)} rows equal the tree's; {report['planned']['spill_bytes']} "
          "bytes of tar spilled")


def names(record, word):
    """Whether a rejected.jsonl line names `word` (as a whole token)."""
    text = json.dumps(record, ensure_ascii=False)
    return re.search(r"(?<![\w.-])" + re.escape(word) + r"(?![\w-])", text) is not None


def check_negative(label, split, rejected, good, bad, optional, key_of, tree, tree_ix, fails, policy):
    keys = index(split, key_of, label, fails) if split is not None else {}
    missing = [k for k in good if k not in keys]
    fails.check(not missing, f"{label}: {len(missing)} good samples are not rows: {missing[:8]}")
    compare_rows(label, split, {k: keys[k] for k in good if k in keys}, tree, tree_ix, fails)
    for b in bad:
        fails.check(b["key"] not in keys, f"{label}: the {b['what']} ({b['key']}) became a row")
    bad_keys = {b["key"] for b in bad}
    unexpected = [k for k in keys if k not in good and k not in optional and k not in bad_keys]
    fails.check(not unexpected, f"{label}: rows for samples that are not in the input: {unexpected[:8]}")
    for b in bad:
        named = [r for r in rejected if all(names(r, w) for w in b["must"])
                 and any(names(r, w) for w in b["any"])]
        if not fails.check(named, f"{label}: no rejected.jsonl line names the {b['what']} "
                                  f"({' + '.join(b['must'])} and one of {b['any']})"):
            continue
        why = [f"{r.get('kind', '')} {r.get('reason', '')}" for r in named]
        fails.check(any(re.search(REASONS[b["reason"]], w, re.I) for w in why),
                    f"{label}: the {b['what']} is rejected, but not with a specific reason "
                    f"(/{REASONS[b['reason']]}/): {why}")
    wrongly = [k for k in good if any(names(r, k) for r in rejected)]
    fails.check(not wrongly, f"{label}: good samples named in rejected.jsonl: {wrongly[:8]}")
    if optional:
        rows = sum(k in keys for k in optional)
        print(f"  {label}: {rows} of the {len(optional)} samples after the corrupted header are rows")
        if policy == "rows":
            fails.check(rows == len(optional), f"{label}: {len(optional) - rows} samples after the "
                                               "corrupted header are not rows (--after-bad-header rows)")
        elif policy == "absent":
            fails.check(rows == 0, f"{label}: {rows} samples after the corrupted header are rows "
                                   "(--after-bad-header absent)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--utterances", type=int, default=200)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--parquet-files", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", help="reuse this make_stored_corpus.py directory instead of making one")
    ap.add_argument("--work", help="work here (kept) instead of a temporary folder")
    ap.add_argument("--after-bad-header", choices=["any", "rows", "absent"], default="any")
    a = ap.parse_args()
    melforge = os.path.abspath(a.melforge)
    t0 = time.perf_counter()
    work = a.work or tempfile.mkdtemp(prefix="melforge-parity-stored-")
    os.makedirs(work, exist_ok=True)
    fails = Failures()
    try:
        if a.corpus:
            corpus = os.path.abspath(a.corpus)
            doc = load_corpus(corpus)
        else:
            corpus = os.path.join(work, "corpus")
            doc = make_corpus(corpus, a.utterances, a.shards, a.parquet_files, a.seed)
        samples = {s["key"]: s for s in doc["samples"]}
        config = os.path.join(work, "kaldi.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        t_corpus = time.perf_counter() - t0

        splits = {}
        for name in ("tree", "wds", "parquet"):
            out = os.path.join(work, f"out-{name}")
            shutil.rmtree(out, ignore_errors=True)
            report, why = sh_build(melforge, os.path.join(corpus, doc["inputs"][name]), out, config)
            if not fails.check(why is None, f"{name} build: {why}"):
                continue
            r = report["report"]
            fails.check(r["files_ok"] == doc["utterances"] and not report["rejected"],
                        f"{name} build: {r['files_ok']} rows and {len(report['rejected'])} rejected "
                        f"for {doc['utterances']} utterances: {report['rejected'][:3]}")
            try:
                splits[name] = Split(out)
            except (ValueError, KeyError, OSError) as e:
                fails.append(f"{name} build: {e}")
        tree = splits.get("tree")
        tree_ix = index(tree, tree_key, "tree", fails) if tree else {}
        if tree:
            fails.check(sorted(tree_ix) == sorted(samples),
                        f"tree: {len(tree_ix)} keys, the corpus has {len(samples)}")
            wrong = [k for k, i in tree_ix.items() if k in samples
                     and tree.label_name(i) != str(samples[k]["cls"])]
            fails.check(not wrong, f"tree: label is not cls for {wrong[:8]}")
        for name, key_of, meta_check in (("wds", wds_key, check_wds_meta),
                                         ("parquet", parquet_key, check_parquet_meta)):
            s = splits.get(name)
            if s is None:
                continue
            label = "shards" if name == "wds" else name
            fails.check(len(s) == doc["utterances"],
                        f"{label}: {len(s)} rows for {doc['utterances']} utterances")
            fails.check(s.meta is not None, f"{label}: the split file has no `meta` dataset")
            keys = index(s, key_of, label, fails)
            fails.check(sorted(keys) == sorted(samples),
                        f"{label}: keys differ from the corpus: missing "
                        f"{sorted(set(samples) - set(keys))[:5]}, extra {sorted(set(keys) - set(samples))[:5]}")
            if tree:
                bad = compare_rows(label, s, keys, tree, tree_ix, fails)
                print(f"{label}: {len(keys) - bad} of {len(keys)} rows equal the tree's bit for bit")
            meta_check(s, keys, samples, fails)
        t_builds = time.perf_counter() - t0 - t_corpus

        # Negative inputs.
        neg = os.path.join(work, "negative")
        shutil.rmtree(neg, ignore_errors=True)
        pattern, good, bad, optional = negative_shards(corpus, doc, os.path.join(neg, "wds"))
        pq_pattern, pq_good, pq_bad = negative_parquet(corpus, doc, os.path.join(neg, "parquet"))
        for label, src, g, b, opt, key_of in (
                ("negative shards", pattern, good, bad, optional, wds_key),
                ("negative parquet", pq_pattern, pq_good, pq_bad, [], parquet_key)):
            out = os.path.join(neg, "out-" + label.split()[1])
            report, why = sh_build(melforge, src, out, config)
            if not fails.check(why is None, f"{label} build: {why}"):
                continue
            try:
                split = Split(out)
            except (ValueError, KeyError, OSError) as e:
                fails.append(f"{label} build: {e}")
                continue
            rejected = read_rejected(out)
            print(f"{label}: {len(split)} rows, {len(rejected)} rejected:")
            for r in rejected:
                print("   ", json.dumps(r, ensure_ascii=False))
            if tree:
                check_negative(label, split, rejected, g, b, opt, key_of, tree, tree_ix, fails,
                               a.after_bad_header)
        if tree:
            corrupt_page(melforge, corpus, doc, os.path.join(neg, "crc"), config, tree, tree_ix,
                         fails)
            gzipped(melforge, corpus, doc, os.path.join(neg, "gz"), config, tree, tree_ix, fails)
        elapsed = time.perf_counter() - t0
        print(f"stored parity: {doc['utterances']} utterances, {len(doc['shards'])} shards, "
              f"{len(doc['parquet_files'])} parquet files; corpus {t_corpus:.1f} s, builds and "
              f"checks {t_builds:.1f} s, negative inputs {elapsed - t_corpus - t_builds:.1f} s, "
              f"{elapsed:.1f} s in all")
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    for f in fails:
        print("FAIL", f)
    print("stored parity:", "FAILED" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
