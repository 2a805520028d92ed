#!/usr/bin/env python3
"""One speech corpus stored three ways: WebDataset shards, a tree, Hugging Face parquet.

Usage: make_stored_corpus.py OUT_DIR [--utterances 2000] [--shards 64]
                             [--parquet-files 4] [--seed 1] [--min-s 1] [--max-s 6]

Large corpora ship as WebDataset tar shards or as Hugging Face parquet files,
not as a tree of files. To measure and check melforge on those inputs against
the same audio as a tree, this writes N utterances (16 kHz mono 16-bit FLAC,
1-6 s of espeak-ng speech as scripts/make_speech_corpus.py makes it: a few
sentences spoken once, cut and mixed per utterance with gains, pauses and a
little noise; a synthetic harmonic stand-in where espeak-ng is missing) and
stores the SAME FLAC bytes as

* `OUT_DIR/wds/train-{000000..S-1}.tar`: S WebDataset shards written by
  `webdataset.TarWriter` (a contiguous block of utterances each), every
  sample `KEY.cls` (int), `KEY.flac`, `KEY.json` ({"speaker", "text"}) and
  `KEY.txt` (the text), members in that (TarWriter's sorted) order;
* `OUT_DIR/tree/train/<cls>/<KEY>.flac`: the extracted tree (melforge's tree
  rule: split `train`, label `<cls>`);
* `OUT_DIR/parquet/train-0000i-of-0000P.parquet`: P files in the layout the
  Hugging Face `datasets` library writes (and the Hub serves): columns `id`
  (the key), `audio` struct {bytes: binary, path: string (`KEY.flac`)},
  `text`, `speaker`, `cls` (int64), the `huggingface` features in the schema
  metadata, snappy compression, row groups of `--row-group` rows (100).

Keys are `utt000000`, `utt000001`, ... (no dot: WebDataset splits a member
name at its first dot). `OUT_DIR/corpus.json` records what was written (the
input patterns for `melforge build`, every sample's key, shard, parquet file
and row, cls, speaker, text, seconds and FLAC size, and the sizes on disk of
each form), which scripts/bench_stored.py and scripts/parity_stored.py read.
The same summary less the samples is printed as JSON.

Deterministic for a given seed and espeak-ng / libsndfile versions (tar
mtimes fixed, no timestamps in FLAC or parquet; a parquet file also names
the pyarrow version that wrote it). OUT_DIR's wds/, tree/,
parquet/ and corpus.json are replaced; nothing else in it is touched.
"""

import argparse
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_speech_corpus import SENTENCES, VOICES, speak  # noqa: E402

RATE = 16000
SPLIT = "train"
CLASSES = 10
SPEAKERS = 24
# A fixed tar mtime (2024-01-01T00:00:00Z): the shards are byte-identical
# from run to run.
MTIME = 1704067200


def synthetic_piece(i, rate):
    """A speech-like stand-in when espeak-ng is missing: voiced harmonics of a
    gliding pitch under a syllable-rate envelope, about 2-3 s."""
    rng = np.random.default_rng(1000 + i)
    n = int(rng.uniform(2.0, 3.0) * rate)
    t = np.arange(n) / rate
    f0 = 110 + 60 * (i % 4) + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    env = np.clip(np.sin(2 * np.pi * rng.uniform(3.0, 5.0) * t), 0, None) ** 0.5
    return 0.3 * x * env / np.abs(x).max()


def pieces(count, rate):
    """[(samples, sentence)]: espeak-ng's recordings, or synthetic ones."""
    if shutil.which("espeak-ng") is None:
        print("make_stored_corpus: no espeak-ng, using synthetic speech-like pieces", file=sys.stderr)
        return [(synthetic_piece(i, rate), SENTENCES[i % len(SENTENCES)]) for i in range(count)]
    with tempfile.TemporaryDirectory() as tmp:
        return [
            (speak(SENTENCES[i % len(SENTENCES)], VOICES[i % len(VOICES)], 140 + 10 * (i % 5), rate, tmp),
             SENTENCES[i % len(SENTENCES)])
            for i in range(count)
        ]


def flac_bytes(x, rate):
    buf = io.BytesIO()
    pcm = np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)
    sf.write(buf, pcm, rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def utterances(n, seed, min_s, max_s, rate, voices):
    """[{key, cls, speaker, text, seconds, flac}] in key order."""
    rng = np.random.default_rng(seed)
    recorded = pieces(voices, rate)
    out = []
    for i in range(n):
        want = int(rng.uniform(min_s, max_s) * rate)
        parts, words, have = [], [], 0
        while have < want:
            p, sentence = recorded[rng.integers(len(recorded))]
            gap = np.zeros(int(rng.uniform(0.05, 0.4) * rate))
            parts += [p * rng.uniform(0.3, 1.0), gap]
            words.append(sentence)
            have += len(p) + len(gap)
        x = np.concatenate(parts)[:want] + rng.normal(0.0, 1e-3, want)
        out.append({
            "key": f"utt{i:06d}",
            "cls": int(i % CLASSES),
            "speaker": f"spk{(7 * i) % SPEAKERS:02d}",
            "text": " ".join(words),
            "seconds": want / rate,
            "flac": flac_bytes(x, rate),
        })
    return out


def blocks(n, parts):
    """Contiguous [start, end) blocks of n items over `parts` parts."""
    return [(n * k // parts, n * (k + 1) // parts) for k in range(parts)]


def brace(prefix, count, width, suffix):
    """The brace pattern melforge expands itself, e.g. train-{000000..000063}.tar."""
    if count == 1:
        return f"{prefix}{0:0{width}d}{suffix}"
    return f"{prefix}{{{0:0{width}d}..{count - 1:0{width}d}}}{suffix}"


def write_shards(d, samples, shards):
    import webdataset as wds

    os.makedirs(d)
    names = []
    for k, (a, b) in enumerate(blocks(len(samples), shards)):
        name = f"{SPLIT}-{k:06d}.tar"
        with wds.TarWriter(os.path.join(d, name), mtime=MTIME) as w:
            for s in samples[a:b]:
                w.write({"__key__": s["key"], "flac": s["flac"],
                         "json": {"speaker": s["speaker"], "text": s["text"]},
                         "txt": s["text"], "cls": s["cls"]})
                s["shard"] = name
        names.append(name)
    return names


def write_tree(d, samples):
    for s in samples:
        p = os.path.join(d, SPLIT, str(s["cls"]), s["key"] + ".flac")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(s["flac"])


def hf_features():
    """The `huggingface` schema metadata `datasets` writes for these columns."""
    value = lambda dtype: {"dtype": dtype, "_type": "Value"}  # noqa: E731
    return {"info": {"features": {
        "id": value("string"),
        "audio": {"sampling_rate": RATE, "_type": "Audio"},
        "text": value("string"),
        "speaker": value("string"),
        "cls": value("int64"),
    }}}


def parquet_table(rows):
    """A pyarrow table of `rows` (samples) in the Hugging Face audio layout."""
    import pyarrow as pa

    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("id", pa.string()), ("audio", audio), ("text", pa.string()),
                        ("speaker", pa.string()), ("cls", pa.int64())],
                       metadata={"huggingface": json.dumps(hf_features())})
    return pa.table({
        "id": [s["key"] for s in rows],
        "audio": [{"bytes": s["flac"], "path": s["key"] + ".flac"} for s in rows],
        "text": [s["text"] for s in rows],
        "speaker": [s["speaker"] for s in rows],
        "cls": [s["cls"] for s in rows],
    }, schema=schema)


def write_parquet_table(path, table, row_group):
    import pyarrow.parquet as pq

    pq.write_table(table, path, row_group_size=row_group, compression="snappy")


def write_parquet(d, samples, files, row_group):
    os.makedirs(d)
    names = []
    for k, (a, b) in enumerate(blocks(len(samples), files)):
        name = f"{SPLIT}-{k:05d}-of-{files:05d}.parquet"
        write_parquet_table(os.path.join(d, name), parquet_table(samples[a:b]), row_group)
        for row, s in enumerate(samples[a:b]):
            s["parquet"], s["parquet_row"] = name, row
        names.append(name)
    return names


def du(d):
    """Bytes of the files under d (their sizes, not blocks)."""
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def make_corpus(out, utterances_n=2000, shards=64, parquet_files=4, seed=1, min_s=1.0, max_s=6.0,
                voices=12, row_group=100):
    """Writes the three forms and corpus.json under `out`; returns corpus.json's document."""
    if shards < 1 or parquet_files < 1 or utterances_n < max(shards, parquet_files):
        raise SystemExit("need at least one utterance per shard and per parquet file")
    os.makedirs(out, exist_ok=True)
    for sub in ("wds", "tree", "parquet"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    samples = utterances(utterances_n, seed, min_s, max_s, RATE, voices)
    shard_names = write_shards(os.path.join(out, "wds"), samples, shards)
    write_tree(os.path.join(out, "tree"), samples)
    pq_names = write_parquet(os.path.join(out, "parquet"), samples, parquet_files, row_group)
    doc = {
        "utterances": len(samples),
        "sample_rate": RATE,
        "audio_seconds": round(sum(s["seconds"] for s in samples), 3),
        "split": SPLIT,
        "seed": seed,
        "inputs": {
            "tree": "tree",
            "wds": "wds/" + brace(f"{SPLIT}-", shards, 6, ".tar"),
            "parquet": f"parquet/{SPLIT}-*.parquet",
        },
        "shards": shard_names,
        "parquet_files": pq_names,
        "sizes": {
            "flac_bytes": sum(len(s["flac"]) for s in samples),
            "tree": du(os.path.join(out, "tree")),
            "wds": du(os.path.join(out, "wds")),
            "parquet": du(os.path.join(out, "parquet")),
        },
        "samples": [{k: v for k, v in s.items() if k != "flac"} | {"flac_bytes": len(s["flac"])}
                    for s in samples],
    }
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return doc


def load_corpus(d):
    """corpus.json of a corpus directory, with a clear error when it is missing."""
    p = os.path.join(d, "corpus.json")
    if not os.path.exists(p):
        raise SystemExit(f"{p} is missing: make the corpus with scripts/make_stored_corpus.py {d}")
    with open(p) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("out", help="the corpus directory (wds/, tree/, parquet/, corpus.json)")
    ap.add_argument("--utterances", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=64, help="WebDataset tar shards")
    ap.add_argument("--parquet-files", type=int, default=4)
    ap.add_argument("--row-group", type=int, default=100, help="parquet rows per row group")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-s", type=float, default=1.0, help="shortest utterance, seconds")
    ap.add_argument("--max-s", type=float, default=6.0, help="longest utterance, seconds")
    a = ap.parse_args()
    doc = make_corpus(a.out, a.utterances, a.shards, a.parquet_files, a.seed, a.min_s, a.max_s,
                      row_group=a.row_group)
    print(json.dumps({k: v for k, v in doc.items() if k != "samples"}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
