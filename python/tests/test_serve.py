"""A MelDataset following a running `melforge serve` (SWMR): `refresh()`
picks up the rows appended after it opened, equal to a build's rows."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Optional, TypeVar

import numpy as np

import melforge
from conftest import copy_into, melforge_bin, wavs

T = TypeVar("T")


def wait_for(what: str, f: Callable[[], Optional[T]], limit: float = 60.0) -> T:
    """Polls `f` until it returns something other than None (a bounded wait,
    not a speed check)."""
    deadline = time.monotonic() + limit
    while True:
        v = f()
        if v is not None:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_refresh_follows_a_running_serve(corpus: Path, built: Path, tmp_path: Path) -> None:
    drop, stage, out = tmp_path / "drop", tmp_path / "stage", tmp_path / "out"
    for d in (drop, stage):
        d.mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        '[serve]\nwatch_dir = "drop"\noutput_dir = "out"\nflush_interval_ms = 50\n'
        '[control]\nsocket = "ctl.sock"\n'
    )
    files = [p for p in wavs(corpus) if p.startswith("TRAINING/")]
    assert len(files) >= 6
    first, rest = files[:3], files[3:]
    log = open(tmp_path / "serve.log", "wb")
    env = dict(os.environ, NO_COLOR="1")
    env.pop("RUST_LOG", None)
    svc = subprocess.Popen(
        [melforge_bin(), "serve", "--config", str(cfg)], stdout=log, stderr=log, env=env
    )
    try:
        # A sidecar for the first file, moved in before it.
        side = drop / (first[0] + ".json")
        side.parent.mkdir(parents=True, exist_ok=True)
        (stage / "side.json").write_text('{"text": "grüße", "speaker": "s1"}')
        os.rename(stage / "side.json", side)
        for rel in first:
            copy_into(corpus, rel, drop, stage)
        h5 = out / "TRAINING.h5"

        def opened() -> Optional[melforge.MelDataset]:
            assert svc.poll() is None, (tmp_path / "serve.log").read_text()
            if not h5.exists():
                return None
            try:
                ds = melforge.MelDataset(h5)
            except (OSError, KeyError):
                return None  # created but not yet flushed
            return ds if len(ds) == len(first) else None

        ds = wait_for("the first rows", opened)
        assert ds.swmr, "serve holds the file open for writing: the reader must use SWMR"
        before = ds[0][0].copy()
        for rel in rest:
            copy_into(corpus, rel, drop, stage)
        wait_for(
            "the dropped rows",
            lambda: True if (ds.refresh() or True) and len(ds) == len(files) else None,
        )
        assert sorted(ds.paths) == sorted(files)
        # The Python API's view of the daemon: `ctl status` as a dict.
        status = melforge.serve_status(tmp_path / "ctl.sock")
        assert isinstance(status, dict) and status, status
        np.testing.assert_array_equal(ds[0][0], before)
        # The sidecar's fields are that row's metadata; the others have none.
        for i, p in enumerate(ds.paths):
            m = ds.meta(i)
            assert m["path"] == p
            if p == first[0]:
                assert (m["text"], m["speaker"]) == ("grüße", "s1"), m
            else:
                assert "text" not in m and "line" not in m, m
        # Every row equals the build's row of the same file, labels by name.
        ref = melforge.MelDataset(built / "TRAINING.h5")
        by_path: Dict[str, int] = {p: i for i, p in enumerate(ref.paths)}
        for i, p in enumerate(ds.paths):
            x, y = ds[i]
            rx, ry = ref[by_path[p]]
            np.testing.assert_array_equal(x, rx)
            assert ds.label_names[y] == ref.label_names[ry]
    finally:
        # `ds` still holds the file open: serve must still reopen and close it
        # at shutdown (a reader holding a file lock made that fail, exit 1).
        svc.terminate()
        svc.wait(timeout=60)
        log.close()
    assert svc.returncode == 0, (tmp_path / "serve.log").read_text()
