#!/usr/bin/env python3
"""melforge's lhotse extractors (`melforge.lhotse.Fbank`, `Mfcc`,
`WhisperFbank`) inside lhotse.

Runs in the venv scripts/lhotse-venv makes (lhotse and torch from PyPI), with
melforge imported from python/ and its extension copied beside it
(`--native`, what `cargo build --release -p melforge-py` links). On the cuts
of scripts/parity_lhotse.py (espeak-ng speech; whole and truncated cuts,
channel 1 of a stereo file, a 22,050 Hz file resampled by lhotse):

* every cut's `Fbank().extract` has lhotse's frame count and stays within
  the Kaldi recipes' tolerance of lhotse's own `Fbank` (docs/FORMAT.md: 1e-3
  in bands within 1e-6 of the frame's loudest, 0.5 below); `Mfcc` within
  1e-3 of lhotse's `Mfcc` relative to the frame's largest value;
* `extract_batch` (a list, and a padded batch with lengths) gives the rows
  of `extract`, on 1 and 2 threads;
* `K2SpeechRecognitionDataset(input_strategy=OnTheFlyFeatures(Fbank()))` in
  a DataLoader with 2 workers batches every cut once, each padded row the
  cut's own `extract` bit for bit, and within the tolerance of the same
  dataset over lhotse's `Fbank` (but for each cut's last 3 frames, which
  lhotse's batch path computes over the zero padding of the longer cuts);
* `CutSet.compute_and_store_features(Fbank(), ...)` stores features that a
  fresh process reads back (`import melforge.lhotse` registers the
  extractor's name) equal to `extract` bit for bit;
* `melforge.torch.fbank` / `mfcc` (torchaudio.compliance.kaldi's signature)
  give melforge.features' rows bit for bit for the chosen channel, with
  torchaudio's subtract_mean, min_duration, dtype and too-short results,
  and refuse VTLN and htk_compat by name. (No torchaudio builds for this
  venv's torch, so the numbers are checked against kaldi-native-fbank, by
  scripts/parity_features.py, which computes torchaudio's.)
* `WhisperFbank` (80 and 128 bins) against lhotse's `WhisperFbank` (which
  needs librosa in the venv) within 1e-4 with its frame counts, then on the
  fly in the same DataLoader and through `compute_and_store_features`, bit
  for bit with its own `extract`; a CUDA device is refused by name.
* `melforge.hf.WhisperFeatureExtractor` with `return_tensors="pt"` (the one
  environment with torch and transformers both): transformers' keys,
  shapes, dtypes and masks as torch tensors, within 1e-4 of transformers'
  own torch path, each row `whisper_log_mel`'s bit for bit.

Usage: parity_lhotse_features.py --native lib_native.so
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import native_package  # noqa: E402
import parity_lhotse as pl  # noqa: E402

MFCC_TOL = 1e-3
# docs/FORMAT.md's Whisper tolerance (transformers' extractor). lhotse's
# WhisperFbank runs torch's float32 FFT where melforge keeps librosa's
# float64 one; on log10 / 4 values that is a few 1e-5.
WHISPER_TOL = 1e-4


def mfcc_error(got, want):
    assert got.shape == want.shape, f"Mfcc shape {got.shape}, lhotse's {want.shape}"
    scale = np.maximum(1.0, np.abs(want).max(axis=1, keepdims=True))
    return float((np.abs(got.astype(np.float64) - want) / scale).max(initial=0.0))


def per_cut(cuts, ours, theirs, ours_mfcc, theirs_mfcc):
    """Every cut's rows against lhotse's; returns our rows by cut id."""
    from lhotse.utils import compute_num_frames

    rows, worst_fb, worst_mfcc = {}, 0.0, 0.0
    for cut in cuts:
        audio = cut.load_audio()
        got = ours.extract(audio, cut.sampling_rate)
        assert got.dtype == np.float32 and got.shape[1] == ours.feature_dim(16000), got.shape
        want_frames = compute_num_frames(cut.duration, 0.01, cut.sampling_rate)
        assert got.shape[0] == want_frames, f"{cut.id}: {got.shape[0]} frames, lhotse says {want_frames}"
        why, worst = pl.compare(cut.id, got, theirs.extract(audio, cut.sampling_rate))
        assert why is None, why
        worst_fb = max(worst_fb, worst)
        e = mfcc_error(ours_mfcc.extract(audio, cut.sampling_rate), theirs_mfcc.extract(audio, cut.sampling_rate))
        assert e <= MFCC_TOL, f"{cut.id}: Mfcc differs from lhotse's by {e:.3g} (tolerance {MFCC_TOL})"
        worst_mfcc = max(worst_mfcc, e)
        rows[cut.id] = got
    return rows, worst_fb, worst_mfcc


def batches(cuts, rows, Fbank):
    import torch

    audios = [cut.load_audio()[0] for cut in cuts]
    for threads in (1, 2):
        got = Fbank(threads=threads).extract_batch(audios, 16000)
        for cut, g in zip(cuts, got):
            assert g.tobytes() == rows[cut.id].tobytes(), f"{cut.id}: extract_batch ({threads} threads)"
    lengths = torch.tensor([len(a) for a in audios])
    padded = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(a) for a in audios], batch_first=True)
    got = Fbank().extract_batch(padded, 16000, lengths=lengths)
    for cut, g in zip(cuts, got):
        assert isinstance(g, torch.Tensor), type(g)
        assert g.numpy().tobytes() == rows[cut.id].tobytes(), f"{cut.id}: padded extract_batch"


def whisper_fbank(cuts):
    """melforge.lhotse.WhisperFbank against lhotse's WhisperFbank, 80 and 128
    bins, every cut: lhotse's shapes, within WHISPER_TOL; extract_batch on 2
    threads gives extract's rows. Returns the 80-bin rows by cut id."""
    from lhotse.features.whisper_fbank import WhisperFbank, WhisperFbankConfig

    import melforge.lhotse as ml

    rows, worst = {}, 0.0
    for n in (80, 128):
        config = WhisperFbankConfig(num_filters=n)
        ours, theirs = ml.WhisperFbank(config), WhisperFbank(config)
        for cut in cuts:
            audio = cut.load_audio()
            got, want = ours.extract(audio, 16000), theirs.extract(audio, 16000)
            assert got.dtype == np.float32 and got.shape == want.shape, f"{cut.id}: {got.shape} vs {want.shape}"
            e = float(np.abs(got - want).max())
            assert e <= WHISPER_TOL, f"{cut.id}: WhisperFbank({n}) differs from lhotse's by {e:.3g}"
            worst = max(worst, e)
            if n == 80:
                rows[cut.id] = got
    audios = [cut.load_audio()[0] for cut in cuts]
    for cut, g in zip(cuts, ml.WhisperFbank(threads=2).extract_batch(audios, 16000)):
        assert g.tobytes() == rows[cut.id].tobytes(), f"{cut.id}: WhisperFbank extract_batch"
    try:
        ml.WhisperFbank(WhisperFbankConfig(device="cuda"))
    except ValueError as e:
        assert "device" in str(e), e
    else:
        raise AssertionError("melforge.lhotse.WhisperFbank took device='cuda'")
    return rows, worst


def hf_torch(cuts):
    """melforge.hf.WhisperFeatureExtractor where torch imports (transformers
    then takes its torch path): `return_tensors="pt"` gives torch tensors
    with transformers' keys, shapes, dtypes and masks, within WHISPER_TOL of
    its own, each row whisper_log_mel's bit for bit."""
    import torch
    from transformers import WhisperFeatureExtractor as Reference

    import melforge.features as F
    from melforge.hf import WhisperFeatureExtractor

    batch = [cut.load_audio()[0] for cut in list(cuts)[:5]]
    worst = 0.0
    for n_mels in (80, 128):
        kw = dict(sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        want = Reference(feature_size=n_mels)(batch, **kw)
        got = WhisperFeatureExtractor(feature_size=n_mels, threads=2)(batch, **kw)
        assert sorted(got.keys()) == sorted(want.keys()), (got.keys(), want.keys())
        for k in want:
            assert isinstance(got[k], torch.Tensor), f"{k}: {type(got[k])}"
            assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, \
                (k, got[k].shape, got[k].dtype, want[k].shape, want[k].dtype)
        assert torch.equal(got["attention_mask"], want["attention_mask"]), "attention masks differ"
        e = float((got["input_features"] - want["input_features"]).abs().max())
        assert e <= WHISPER_TOL, f"hf WhisperFeatureExtractor({n_mels}), pt: {e} from transformers' torch path"
        worst = max(worst, e)
        for i, y in enumerate(batch):
            row = F.whisper_log_mel(y, n_mels=n_mels)
            assert got["input_features"][i].numpy().tobytes() == row.tobytes(), f"hf pt row {i}"
    return worst


def on_the_fly(cuts, rows, ours, theirs=None):
    import torch
    from lhotse.dataset import K2SpeechRecognitionDataset, OnTheFlyFeatures, SimpleCutSampler

    def run(extractor):
        ds = K2SpeechRecognitionDataset(input_strategy=OnTheFlyFeatures(extractor), return_cuts=True)
        sampler = SimpleCutSampler(cuts, max_cuts=5, shuffle=False)
        dl = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
        out = {}
        for batch in dl:
            sups = batch["supervisions"]
            for i, cut in enumerate(sups["cut"]):
                j, n = int(sups["sequence_idx"][i]), rows[cut.id].shape[0]
                assert int(sups["num_frames"][i]) == n, f"{cut.id}: {sups['num_frames'][i]} vs {n} frames"
                assert batch["inputs"].shape[1] >= n, (cut.id, batch["inputs"].shape)
                out[cut.id] = batch["inputs"][j, :n].numpy()
        return out

    got = run(ours)
    assert sorted(got) == sorted(rows), f"cuts batched: {sorted(got)} vs {sorted(rows)}"
    for cid, g in got.items():
        assert g.tobytes() == rows[cid].tobytes(), f"{cid}: on-the-fly row is not extract's"
    if theirs is None:
        return len(got)
    # lhotse's own batch path zero-pads the waveforms to the longest before
    # its frames, so a cut's last frames (whose windows reach past its end:
    # Kaldi reflects there, snip_edges=False) differ from its own `extract`;
    # every frame before them must agree.
    want = run(theirs)
    edge = 3
    for cid in got:
        why, _ = pl.compare(cid, got[cid][:-edge], want[cid][:-edge])
        assert why is None, f"on the fly: {why}"
    return len(got)


def torch_adapter(cuts):
    """melforge.torch: torchaudio.compliance.kaldi's signature over the same
    rows as melforge.features (bit for bit), its channel, subtract_mean,
    min_duration, dtype and too-short semantics."""
    import torch

    import melforge.features as F
    import melforge.torch as kaldi

    n = 0
    for cut in list(cuts)[:6]:
        y = cut.load_audio()[0]
        both = torch.from_numpy(np.stack([y * 0.5, y]))
        opts = dict(num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0, energy_floor=0.0,
                    sample_frequency=16000)
        got = kaldi.fbank(both * 32768, channel=1, **opts)
        want = F.kaldi_fbank(y * np.float32(32768), **opts)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        assert got.numpy().tobytes() == want.tobytes(), f"{cut.id}: melforge.torch.fbank"
        got = kaldi.mfcc(both.double(), channel=-1, num_ceps=13, subtract_mean=True)
        want = F.kaldi_mfcc(y * np.float32(0.5))
        assert got.dtype == torch.float64 and got.shape == want.shape, (got.dtype, got.shape)
        # The mean is summed in another order than numpy's: float32 rounding.
        centred = want - want.mean(axis=0)
        e = float(np.abs(got.numpy() - centred).max() / max(1.0, float(np.abs(want).max())))
        assert e < 1e-5, f"{cut.id}: subtract_mean differs by {e}"
        n += 1
    short = torch.zeros((1, 300))
    assert kaldi.fbank(short).shape == (0, 0), "too short: torchaudio's empty (0, 0)"
    assert kaldi.fbank(torch.zeros((1, 16000)), min_duration=2.0).numel() == 0
    for bad, why in ((dict(vtln_warp=0.9), "vtln_warp"), (dict(htk_compat=True), "htk_compat"),
                     (dict(channel=3), "channel"), (dict(nmels=3), "num_mel_bins")):
        try:
            kaldi.fbank(torch.zeros((1, 16000)), **bad)
        except (ValueError, TypeError) as e:
            assert why in str(e), f"{bad}: {e}"
        else:
            raise AssertionError(f"melforge.torch.fbank took {bad}")
    return n


STORED = r"""
import sys
import numpy as np
import melforge.lhotse
from lhotse import CutSet
cuts = CutSet.from_file(sys.argv[1])
for c in cuts:
    x = c.load_features()
    want = np.load(sys.argv[2] + "/" + c.id + ".npy")
    assert x.tobytes() == want.tobytes(), c.id
print(len(cuts))
"""


def stored(cuts, rows, extractor, work, pkg):
    """`compute_and_store_features` with `extractor`; a fresh process reads
    every cut's features back as `rows`."""
    from lhotse import NumpyFilesWriter

    d = os.path.join(work, extractor.name)
    with_feats = cuts.compute_and_store_features(
        extractor, storage_path=f"{d}/feats", storage_type=NumpyFilesWriter, num_jobs=1
    )
    with_feats.to_file(f"{d}/with_feats.jsonl.gz")
    os.makedirs(f"{d}/want")
    for cid, r in rows.items():
        np.save(f"{d}/want/{cid}.npy", r)
    env = dict(os.environ, PYTHONPATH=pkg)
    out = subprocess.run([sys.executable, "-c", STORED, f"{d}/with_feats.jsonl.gz", f"{d}/want"],
                         check=True, capture_output=True, text=True, env=env).stdout
    assert int(out.strip().splitlines()[-1]) == len(rows), out
    return len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--native", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="parity-lhotse-features-")
    try:
        pkg = native_package.install(args.native, work)
        import melforge.lhotse as ml
        from lhotse import Fbank, Mfcc

        cuts = pl.make_cuts(pl.recordings(work)).resample(16000)
        rows, worst_fb, worst_mfcc = per_cut(cuts, ml.Fbank(), Fbank(), ml.Mfcc(), Mfcc())
        batches(list(cuts), rows, ml.Fbank)
        n_fly = on_the_fly(cuts, rows, ml.Fbank(), Fbank())
        n_stored = stored(cuts, rows, ml.Fbank(), work, pkg)
        n_torch = torch_adapter(cuts)
        wrows, worst_wf = whisper_fbank(cuts)
        on_the_fly(cuts, wrows, ml.WhisperFbank())
        stored(cuts, wrows, ml.WhisperFbank(), work, pkg)
        worst_hf = hf_torch(cuts)
        print(f"parity_lhotse_features: {len(rows)} cuts; Fbank within {worst_fb:.2e} of lhotse's, "
              f"Mfcc within {worst_mfcc:.2e}; extract_batch on 1 and 2 threads and padded; "
              f"{n_fly} cuts on the fly in 2 DataLoader workers; {n_stored} stored and read back; "
              f"melforge.torch on {n_torch} cuts; WhisperFbank (80, 128) within {worst_wf:.2e} of "
              f"lhotse's, on the fly and stored too; melforge.hf with return_tensors='pt' within "
              f"{worst_hf:.2e} of transformers' torch path")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"parity_lhotse_features: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
