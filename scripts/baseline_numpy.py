#!/usr/bin/env python3
"""The numpy + h5py baseline that melforge's throughput is compared against.

Usage: baseline_numpy.py INPUT OUT [--json] [--batch N] [--all-frames]
                         [--fft-dtype float32|float64] [--check OUT_MELFORGE]

A well-written, vectorised, single-process implementation of melforge's *default*
pipeline (docs/DESIGN.md "Mel definition" with the default spec), the way a careful
Python user would write it:

* walk INPUT, keep every *.wav (case-insensitive, hidden entries skipped), sort
  the relative paths; split = first folder, label = last folder (one folder:
  split "all"; none: split "all", label -1); label ids index the sorted set of
  label names of the whole run;
* read each file, parse the canonical 44-byte PCM16 mono header with a fixed-offset
  check (anything else goes through the `wave` module), np.frombuffer the samples,
  int16 / 32768, pad with zeros / trim to 40960 samples;
* per batch of files (default 64): the 159 distinct STFT frames (a short segment
  (l, s) starts at l*512 + s*256, so frame k = 2l + s starts at k*256) as a strided
  view, periodic Hann window, np.fft.rfft on float32 input (`--fft-dtype float64`
  for the other: on a 2-core EPYC under load neither was consistently faster), |X|^2
  in float32, the slaney mel filterbank (librosa.filters.mel when librosa imports,
  else an own numpy port),
  10*log10(max(1e-10, M)), then gathered into (79, 3, 32, 1) rows;
  `--all-frames` instead transforms all 237 segment frames (no sharing);
* write <OUT>/<split>.h5 with h5py: `mel` (N, 79, 3, 32, 1) float32 chunked 64
  rows along N, `label` int32, `path` variable-length UTF-8, attr `label_names`.

Prints files/s and elapsed (Python start-up and imports excluded; the walk, reads,
compute and writes included); `--json` prints one JSON line instead.

`--check OUT_MELFORGE` compares the baseline's output with melforge's for the same
input: identical paths and labels per split, and the max / mean absolute dB
difference of `mel`. Exits 1 if paths or labels differ or a value is not finite.
"""

import argparse
import json
import os
import sys
import time
import wave
from pathlib import Path

import h5py
import numpy as np

# The default spec (docs/DESIGN.md "Defaults").
SR = 4096
CLIP = 40960
N_FFT = 512
LONG_WIN, LONG_HOP = 1024, 512
SHORT_WIN, SHORT_HOP = 512, 256
N_MELS = 32
FMIN, FMAX = 0.0, 2048.0
AMIN = 1e-10
N_LONG = (CLIP - LONG_WIN) // LONG_HOP + 1  # 79
N_SHORT = (LONG_WIN - SHORT_WIN) // SHORT_HOP + 1  # 3
CHUNK = 64

# Short segment (l, s) starts at l*LONG_HOP + s*SHORT_HOP = (2l + s) * 256: frame
# index k = 2l + s into the distinct frames, which start every SHORT_HOP samples.
assert LONG_HOP % SHORT_HOP == 0
FRAME_OF = (np.arange(N_LONG)[:, None] * (LONG_HOP // SHORT_HOP) + np.arange(N_SHORT)[None, :])
N_DISTINCT = int(FRAME_OF.max()) + 1  # 159


# ---------------------------------------------------------------- filterbank


def _hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


def own_mel_filterbank(sr, n_fft, n_mels, fmin, fmax):
    """librosa.filters.mel(htk=False, norm="slaney", dtype=float32), in numpy."""
    fftfreqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, None]
    return weights.astype(np.float32)


def mel_filterbank():
    """(n_mels, n_fft/2+1) float32 and where it came from."""
    try:
        import librosa  # noqa: PLC0415 (optional, slow import)

        fb = librosa.filters.mel(sr=SR, n_fft=N_FFT, n_mels=N_MELS, fmin=FMIN, fmax=FMAX, htk=False, norm="slaney")
        return fb.astype(np.float32), f"librosa {librosa.__version__}"
    except ImportError:
        return own_mel_filterbank(SR, N_FFT, N_MELS, FMIN, FMAX), "own numpy port"


def hann_periodic(n):
    k = np.arange(n, dtype=np.float64)
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * k / n)).astype(np.float32)


# ---------------------------------------------------------------- walk + read


def walk(root):
    """Sorted relative paths of every non-hidden *.wav below root."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            if name.startswith(".") or not name.lower().endswith(".wav"):
                continue
            found.append(name if rel_dir == "." else f"{rel_dir}/{name}")
    found.sort()
    return found


def split_and_label(rel):
    parts = rel.split("/")[:-1]
    if not parts:
        return "all", None
    if len(parts) == 1:
        return "all", parts[0]
    return parts[0], parts[-1]


def read_samples(path, out):
    """Fills out (CLIP float32) with the clip's samples in [-1, 1), zero-padded."""
    with open(path, "rb") as f:
        data = f.read()
    if (
        len(data) >= 44
        and data[0:4] == b"RIFF"
        and data[8:16] == b"WAVEfmt "
        and data[16:20] == b"\x10\x00\x00\x00"  # fmt chunk of 16 bytes
        and data[20:24] == b"\x01\x00\x01\x00"  # PCM, mono
        and int.from_bytes(data[24:28], "little") == SR
        and data[34:36] == b"\x10\x00"  # 16 bits
        and data[36:40] == b"data"
    ):
        n = min(int.from_bytes(data[40:44], "little"), len(data) - 44) // 2
        pcm = np.frombuffer(data, dtype="<i2", count=min(n, CLIP), offset=44)
        channels = 1
    else:
        # Not canonical: let the standard library find the chunks (PCM only).
        with wave.open(str(path), "rb") as w:
            if w.getframerate() != SR:
                raise ValueError(f"sample rate {w.getframerate()} Hz, expected {SR} Hz")
            if w.getsampwidth() != 2:
                raise ValueError(f"{8 * w.getsampwidth()}-bit samples; the baseline reads 16-bit only")
            channels = w.getnchannels()
            pcm = np.frombuffer(w.readframes(CLIP), dtype="<i2")
    if channels > 1:
        samples = pcm.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    else:
        samples = pcm
    n = len(samples)
    np.multiply(samples, np.float32(1.0 / 32768.0), out=out[:n], casting="unsafe")
    out[n:] = 0.0


# ---------------------------------------------------------------- compute


class Mel:
    """The batched feature computation, with its work buffers allocated once.

    Reusing the buffers (ufunc / rfft `out=`) matters: fresh arrays of this size
    come straight from mmap and every batch would page-fault them in again."""

    def __init__(self, all_frames, fft_dtype, batch):
        fb, self.fb_source = mel_filterbank()
        self.fb_t = np.ascontiguousarray(fb.T)  # (257, 32)
        self.fft_dtype = np.dtype(fft_dtype)
        self.window = hann_periodic(N_FFT).astype(self.fft_dtype)
        self.all_frames = all_frames
        n_frames = N_LONG * N_SHORT if all_frames else N_DISTINCT
        n_bins = N_FFT // 2 + 1
        cplx = np.result_type(self.fft_dtype, np.complex64)
        self.windowed = np.empty((batch, n_frames, N_FFT), self.fft_dtype)
        self.spec = np.empty((batch, n_frames, n_bins), cplx)
        self.tmp = np.empty((batch, n_frames, n_bins), self.fft_dtype)
        self.power = np.empty((batch, n_frames, n_bins), np.float32)
        self.mel = np.empty((batch * n_frames, N_MELS), np.float32)
        self.rows = np.empty((batch, N_LONG, N_SHORT, N_MELS, 1), np.float32)

    def __call__(self, clips):
        """clips (B, CLIP) float32 → (B, N_LONG, N_SHORT, N_MELS, 1) float32 dB
        (a view of an internal buffer, valid until the next call)."""
        b = clips.shape[0]
        # (B, CLIP - N_FFT + 1, N_FFT) view, every SHORT_HOP-th start kept.
        view = np.lib.stride_tricks.sliding_window_view(clips, N_FFT, axis=-1)[:, ::SHORT_HOP]
        if self.all_frames:
            frames = view[:, FRAME_OF.reshape(-1)]  # (B, 237, 512), a copy
        else:
            frames = view[:, :N_DISTINCT]  # (B, 159, 512), still a view
        # The window product is where the FFT's input dtype is chosen.
        windowed = np.multiply(frames, self.window, out=self.windowed[:b])
        spec = np.fft.rfft(windowed, n=N_FFT, axis=-1, out=self.spec[:b])
        tmp = self.tmp[:b]
        power = self.power[:b]
        np.multiply(spec.real, spec.real, out=tmp)
        np.add(tmp, np.square(spec.imag), out=tmp)
        power[...] = tmp
        # One 2-D GEMM: numpy's stacked (3-D) matmul can fall off the BLAS path
        # and was measured ~70x slower here.
        mel = np.matmul(power.reshape(-1, power.shape[-1]), self.fb_t, out=self.mel[: b * power.shape[1]])
        np.maximum(mel, np.float32(AMIN), out=mel)
        np.log10(mel, out=mel)
        mel *= np.float32(10.0)
        db = mel.reshape(b, -1, N_MELS)
        rows = self.rows[:b]
        if self.all_frames:
            rows[..., 0] = db.reshape(b, N_LONG, N_SHORT, N_MELS)
        else:
            rows[..., 0] = db[:, FRAME_OF]  # (B, 79, 3, 32)
        return rows


# ---------------------------------------------------------------- run


def build(input_dir, out_dir, batch, mel):
    t0 = time.perf_counter()
    busy = {"walk": 0.0, "read": 0.0, "mel": 0.0, "write": 0.0}
    rels = walk(input_dir)
    assigned = [(rel, *split_and_label(rel)) for rel in rels]
    label_names = sorted({lab for _, _, lab in assigned if lab is not None})
    label_id = {name: i for i, name in enumerate(label_names)}
    splits = {}
    for rel, split, lab in assigned:
        splits.setdefault(split, []).append((rel, -1 if lab is None else label_id[lab]))
    busy["walk"] = time.perf_counter() - t0

    out_dir.mkdir(parents=True, exist_ok=True)
    clips = np.zeros((batch, CLIP), dtype=np.float32)
    files_ok = 0
    rejected = []
    outputs = []
    for split in sorted(splits):
        files = splits[split]
        t = time.perf_counter()
        path = out_dir / f"{split}.h5"
        h5 = h5py.File(path, "w")
        n = len(files)
        shape = (N_LONG, N_SHORT, N_MELS, 1)
        d_mel = h5.create_dataset(
            "mel", shape=(n, *shape), maxshape=(None, *shape), dtype="f4", chunks=(min(CHUNK, max(n, 1)), *shape)
        )
        d_label = h5.create_dataset("label", shape=(n,), maxshape=(None,), dtype="i4")
        d_path = h5.create_dataset("path", shape=(n,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"))
        h5.attrs["label_names"] = label_names
        h5.attrs["split"] = split
        busy["write"] += time.perf_counter() - t
        row = 0
        for start in range(0, n, batch):
            chunk = files[start : start + batch]
            t = time.perf_counter()
            ok = []
            for rel, lab in chunk:
                try:
                    read_samples(input_dir / rel, clips[len(ok)])
                    ok.append((rel, lab))
                except (OSError, ValueError, wave.Error, EOFError) as e:
                    rejected.append({"path": rel, "reason": str(e)})
            t1 = time.perf_counter()
            busy["read"] += t1 - t
            rows = mel(clips[: len(ok)])
            t2 = time.perf_counter()
            busy["mel"] += t2 - t1
            k = len(ok)
            d_mel[row : row + k] = rows
            d_label[row : row + k] = np.array([lab for _, lab in ok], dtype=np.int32)
            d_path[row : row + k] = [rel for rel, _ in ok]
            row += k
            busy["write"] += time.perf_counter() - t2
            files_ok += k
        t = time.perf_counter()
        if row != n:
            for d in (d_mel, d_label, d_path):
                d.resize(row, axis=0)
        h5.close()
        busy["write"] += time.perf_counter() - t
        outputs.append({"split": split, "path": str(path), "rows": row})
    elapsed = time.perf_counter() - t0
    return {
        "report": {
            "files_ok": files_ok,
            "files_rejected": len(rejected),
            "elapsed_s": elapsed,
            "files_per_s": files_ok / elapsed if elapsed > 0 else 0.0,
            "busy_s": busy,
        },
        "outputs": outputs,
        "rejected": rejected,
        "fft_dtype": str(mel.fft_dtype),
        "frames": f"all {N_LONG * N_SHORT}" if mel.all_frames else f"{N_DISTINCT} distinct",
        "batch": batch,
        "filterbank": mel.fb_source,
        "numpy": np.__version__,
        "h5py": h5py.__version__,
    }


def check(ours, theirs):
    """Compares two output directories split by split. Returns (summary, ok)."""
    ok = True
    lines = []
    worst = 0.0
    total_abs = 0.0
    count = 0
    names = sorted(p.name for p in ours.glob("*.h5"))
    other = sorted(p.name for p in theirs.glob("*.h5"))
    if names != other:
        lines.append(f"different split files: {names} vs {other}")
        ok = False
    for name in names:
        if name not in other:
            continue
        with h5py.File(ours / name, "r") as a, h5py.File(theirs / name, "r") as b:
            pa = [p.decode() if isinstance(p, bytes) else p for p in a["path"][:]]
            pb = [p.decode() if isinstance(p, bytes) else p for p in b["path"][:]]
            if pa != pb:
                lines.append(f"{name}: paths differ ({len(pa)} vs {len(pb)} rows)")
                ok = False
                continue
            la = [list(a.attrs["label_names"])[i] if i >= 0 else None for i in a["label"][:]]
            names_b = [x.decode() if isinstance(x, bytes) else x for x in b.attrs["label_names"]]
            lb = [names_b[i] if i >= 0 else None for i in b["label"][:]]
            if la != lb:
                lines.append(f"{name}: labels differ")
                ok = False
            if a["mel"].shape != b["mel"].shape:
                lines.append(f"{name}: mel shapes differ: {a['mel'].shape} vs {b['mel'].shape}")
                ok = False
                continue
            split_worst = 0.0
            n = a["mel"].shape[0]
            for start in range(0, n, 1024):
                xa = a["mel"][start : start + 1024].astype(np.float64)
                xb = b["mel"][start : start + 1024].astype(np.float64)
                if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
                    lines.append(f"{name}: non-finite values in rows {start}..")
                    ok = False
                d = np.abs(xa - xb)
                split_worst = max(split_worst, float(d.max(initial=0.0)))
                total_abs += float(d.sum())
                count += d.size
            worst = max(worst, split_worst)
            lines.append(f"{name}: {n} rows, max abs diff {split_worst:.3g} dB")
    mean = total_abs / count if count else 0.0
    summary = {"max_abs_db": worst, "mean_abs_db": mean, "values": count, "ok": ok, "details": lines}
    return summary, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--batch", type=int, default=64, help="files per vectorised batch (default 64)")
    ap.add_argument("--all-frames", action="store_true", help="transform all 237 segment frames (no sharing)")
    ap.add_argument(
        "--fft-dtype",
        choices=["float32", "float64"],
        default="float32",
        help="FFT input precision (default float32)",
    )
    ap.add_argument("--check", type=Path, metavar="OUT_MELFORGE", help="compare with melforge's output directory")
    args = ap.parse_args()
    if args.batch < 1:
        ap.error("--batch must be ≥ 1")
    if not args.input.is_dir():
        ap.error(f"{args.input} is not a directory")

    # Imports and the filterbank (librosa's import is slow) are set up untimed.
    result = build(args.input, args.out, args.batch, Mel(args.all_frames, args.fft_dtype, args.batch))
    ok = True
    if args.check is not None:
        t = time.perf_counter()
        summary, ok = check(args.out, args.check)
        summary["check_s"] = time.perf_counter() - t
        result["check"] = summary
    if args.json:
        print(json.dumps(result))
    else:
        r = result["report"]
        print(
            f"numpy baseline: {r['files_ok']} files ok, {r['files_rejected']} rejected in "
            f"{r['elapsed_s']:.2f} s ({r['files_per_s']:.0f} files/s); busy s: "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["busy_s"].items())
        )
        print(f"  fft: {result['fft_dtype']}, frames: {result['frames']}, batch {result['batch']}, filterbank: {result['filterbank']}")
        for rej in result["rejected"][:10]:
            print(f"  rejected {rej['path']}: {rej['reason']}")
        if "check" in result:
            c = result["check"]
            for line in c["details"]:
                print(f"  check {line}")
            print(f"  check vs {args.check}: max abs diff {c['max_abs_db']:.3g} dB, mean {c['mean_abs_db']:.3g} dB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
