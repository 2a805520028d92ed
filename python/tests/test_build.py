"""The build API: `melforge.build`/`merge`/`Config` over the binary, the
shape of its JSON report, progress events, errors and KeyboardInterrupt."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

import melforge
from melforge._run import run_streaming
from conftest import melforge_bin, run


@pytest.fixture(autouse=True)
def same_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API runs the binary the other tests use."""
    monkeypatch.setenv("MELFORGE_BIN", melforge_bin())


def no_extra(x: Any, where: str = "report") -> None:
    """Fails on any JSON field the dataclasses do not know (`extra`), at
    every level: a field added to the binary's report must be added here."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if f.name == "extra":
                assert v == {}, f"{where}: fields unknown to the Python API: {sorted(v)}"
            else:
                no_extra(v, f"{where}.{f.name}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            no_extra(v, f"{where}[{i}]")


def test_build_returns_the_typed_report_and_the_files_read_back(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = melforge.build(corpus, out, backend="cpu", progress=False)
    assert isinstance(r, melforge.BuildReport)
    # The binary's --json document has exactly the fields the API knows: a
    # field renamed or removed raises in from_json, one added lands in extra.
    no_extra(r)
    assert r.backend == "cpu"
    assert r.report.files_ok + r.report.files_rejected == 40
    assert {o.split for o in r.outputs} == {"TRAINING", "VALIDATION", "TESTING"}
    assert r.rows == r.report.files_ok
    for o in r.outputs:
        ds = melforge.MelDataset(o.path)
        assert len(ds) == o.rows
    assert r.rejected_log.is_file()
    assert [x.name for x in r.report.rings] == ["jobs", "loaded", "features"]
    # Every single-threaded stage reports its own CPU time; the ceiling is
    # 1e6 / the largest per-file cost.
    stages = {s.stage for s in r.report.serial}
    assert "writer" in stages and any(s.startswith("reader-") for s in stages), stages
    worst = max(s.cpu_us_per_file for s in r.report.serial)
    assert r.report.serial_ceiling_files_per_s == pytest.approx(1e6 / worst)


def test_report_parsing_refuses_a_renamed_field(corpus: Path, tmp_path: Path) -> None:
    import json
    import subprocess

    doc = json.loads(
        subprocess.run(
            [melforge_bin(), "build", str(corpus), "--out", str(tmp_path), "--json"],
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ).stdout
    )
    melforge.BuildReport.from_json(doc)
    doc["report"]["files_accepted"] = doc["report"].pop("files_ok")
    with pytest.raises(melforge.BuildError, match="files_ok"):
        melforge.BuildReport.from_json(doc)


def test_progress_events_count_up_to_the_total(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    run("synth", str(corpus), "--files", "300", "--seed", "2")
    events: List[melforge.ProgressEvent] = []
    args = ["build", str(corpus), "--out", str(tmp_path / "o"), "--json", "--progress", "json"]
    doc = run_streaming(args, events.append)
    assert events, "no progress events"
    for e in events:
        no_extra(e, "progress event")
        assert e.files_total == 300
    done = [e.files_done for e in events]
    assert done == sorted(done)
    assert done[-1] == 300
    assert events[-1].eta_s == 0.0
    assert doc["report"]["files_ok"] == 300


def test_a_failed_build_raises_build_error_with_the_binary_sentence(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(melforge.BuildError, match=r"no audio files found under") as e:
        melforge.build(empty, tmp_path / "out", progress=False)
    assert e.value.returncode == 1


def test_config_from_a_dict_is_validated_by_the_binary(corpus: Path, tmp_path: Path) -> None:
    cfg = melforge.Config({"compute": {"backend": "cpu"}, "output": {"dtype": "float16"}})
    assert "float16" in cfg.resolved
    r = melforge.build(corpus, tmp_path / "out", config=cfg, progress=False)
    assert melforge.MelDataset(r.outputs[0].path)[0][0].dtype == np.float16
    with pytest.raises(melforge.ConfigError, match="no_such_key"):
        melforge.Config({"compute": {"no_such_key": 1}})
    toml = tmp_path / "c.toml"
    toml.write_text('[compute]\nbackend = "cpu"\n')
    assert melforge.Config(toml).path == toml


def test_keyboard_interrupt_stops_the_build_and_leaves_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    run("synth", str(corpus), "--files", "2000", "--seed", "3")
    out = tmp_path / "out"

    def interrupt(e: melforge.ProgressEvent) -> None:
        # The first event comes once the stages run and the writer has
        # created its .partial files; Ctrl-C lands here.
        raise KeyboardInterrupt

    args = ["build", str(corpus), "--out", str(out), "--json", "--progress", "json"]
    with pytest.raises(KeyboardInterrupt):
        run_streaming(args, interrupt)
    assert sorted(os.listdir(out)) == []


def test_sharded_build_and_merge(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for k in range(2):
        melforge.build(corpus, out, shard=(k, 2), progress=False)
    m = melforge.merge(out)
    no_extra(m, "merge report")
    assert m.mode == "virtual" and m.shards == 2
    ref = melforge.build(corpus, tmp_path / "whole", progress=False)
    rows = {o.split: o.rows for o in ref.outputs}
    assert {o.split: o.rows for o in m.outputs} == rows
    merged = melforge.MelDataset(out / "TRAINING.h5")
    whole = melforge.MelDataset(tmp_path / "whole" / "TRAINING.h5")
    np.testing.assert_array_equal(merged[0][0], whole[0][0])


def test_version_is_the_binary_version() -> None:
    import subprocess

    v = subprocess.run([melforge_bin(), "--version"], check=True, stdout=subprocess.PIPE, text=True)
    if melforge.__version__ != "unknown":  # a source checkout has no metadata
        assert v.stdout.split() == ["melforge", melforge.__version__]


def test_the_child_sees_this_interpreters_site_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU backend finds NVRTC/cuFFT from pip's nvidia-* wheels through
    $MELFORGE_PYTHON_SITE, so a venv need not be activated."""
    from melforge._binary import child_env

    monkeypatch.setenv("MELFORGE_PYTHON_SITE", "/opt/x")
    sites = child_env()["MELFORGE_PYTHON_SITE"].split(os.pathsep)
    assert sites[0] == "/opt/x"
    assert str(Path(melforge.__file__).resolve().parent.parent) in sites


def test_webdataset_shards_build_from_a_pattern(corpus: Path, tmp_path: Path) -> None:
    """A brace pattern of WebDataset shards (written with tarfile, as
    webdataset's TarWriter does) builds the same rows as the loose files,
    each with its shard, key and siblings in `meta`."""
    import io
    import json
    import tarfile

    files = sorted(p for p in corpus.rglob("*.wav"))[:12]
    for s in range(3):
        with tarfile.open(tmp_path / f"train-{s:06d}.tar", "w") as t:
            for i, f in enumerate(files[s::3]):
                key = f"k{s}{i:02d}"
                t.add(f, arcname=f"{key}.wav")
                meta = json.dumps({"src": str(f.relative_to(corpus))}).encode()
                info = tarfile.TarInfo(f"{key}.json")
                info.size = len(meta)
                t.addfile(info, io.BytesIO(meta))
    r = melforge.build(str(tmp_path / "train-{000000..000002}.tar"), tmp_path / "out", backend="cpu", progress=False)
    no_extra(r)
    assert [o.split for o in r.outputs] == ["train"]
    assert r.planned is not None and r.planned.bytes_read > 0
    tree = melforge.build(corpus, tmp_path / "tree", backend="cpu", progress=False)
    by_path = {}
    for o in tree.outputs:
        ds = melforge.MelDataset(o.path)
        for i, p in enumerate(ds.paths):
            by_path[p] = ds[i][0]
    ds = melforge.MelDataset(r.outputs[0].path)
    assert len(ds) == r.report.files_ok
    for i in range(len(ds)):
        m = ds.meta(i)
        assert m["shard"].startswith("train-00000") and m["key"].startswith("k")
        np.testing.assert_array_equal(ds[i][0], by_path[m["json"]["src"]])
