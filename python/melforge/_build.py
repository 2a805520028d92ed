"""The build API: `build`, `merge` and `serve_status` over the binary."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from ._binary import run_quick
from ._config import Config, PathLike
from ._errors import BuildError
from ._report import BuildReport, MergeReport
from ._run import Display, run_streaming

Shard = Union[str, Tuple[int, int]]

_BACKENDS = ("auto", "cpu", "cuda")


def _shard_arg(shard: Shard) -> str:
    if isinstance(shard, str):
        return shard
    k, n = shard
    return f"{k}/{n}"


def build(
    input: Union[PathLike, Sequence[PathLike]],
    out: PathLike,
    *,
    config: Union[None, Config, PathLike] = None,
    backend: str = "auto",
    shard: Optional[Shard] = None,
    progress: bool = True,
    split: Optional[str] = None,
    tarred_audio: Optional[str] = None,
) -> BuildReport:
    """Builds `input` into one HDF5 file per split in `out`; returns the
    typed report. `input` is a directory (split/label folders of audio
    files), or a NeMo / lhotse manifest (`.json`/`.jsonl`, gzipped or not) or
    a list of them: one split per manifest, named after its stem, rows in
    line order, each row's manifest fields stored beside it (`meta(i)`) and
    the manifest written back as `out/<split>.jsonl`. Stored corpora build
    in place: WebDataset shards or Hugging Face parquet files as a pattern
    melforge expands (`"data/train-{000000..000127}.tar"`,
    `"data/train-*.parquet"`), or a lhotse Shar folder; each pattern is one
    split, named by its stem or by `split`. `tarred_audio`: NeMo's
    `tarred_audio_filepaths` pattern, whose members the manifests name.

    `config`: a `Config`, or a TOML path (validated first). `backend`:
    "auto", "cpu" or "cuda". `shard`: `(k, n)` or "k/n" to build one shard
    of the walk, or of each manifest's lines (join them with `merge`).
    `progress`: show a bar (tqdm when
    installed, else a plain line on stderr).

    Raises `BuildError` with the binary's sentence when the build fails.
    KeyboardInterrupt stops the build, which deletes its partial files, and
    is re-raised.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, not {backend!r}")
    inputs = [input] if isinstance(input, (str, bytes, os.PathLike)) else list(input)
    args = ["build", *[os.fspath(i) for i in inputs]]
    args += ["--out", os.fspath(out), "--json", "--backend", backend]
    args += ["--progress", "json" if progress else "none"]
    cfg = config if isinstance(config, Config) or config is None else Config(config)
    if cfg is not None:
        args += ["--config", str(cfg.path)]
    if shard is not None:
        args += ["--shard", _shard_arg(shard)]
    if split is not None:
        args += ["--split", split]
    if tarred_audio is not None:
        args += ["--tarred-audio", tarred_audio]
    display = Display("melforge build") if progress else None
    try:
        doc = run_streaming(args, display)
    finally:
        if display is not None:
            display.close()
    return BuildReport.from_json(doc)


def merge(out: PathLike, *, copy: bool = False) -> MergeReport:
    """Joins the shard files of a sharded build in `out` into one file per
    split (virtual datasets, or standalone copies with `copy=True`)."""
    args = ["merge", os.fspath(out), "--json"]
    if copy:
        args.append("--copy")
    return MergeReport.from_json(run_streaming(args, None))


def serve_status(socket: PathLike, *, timeout: float = 35.0) -> Dict[str, Any]:
    """The status of a running `melforge serve` (`melforge ctl status` over
    its control socket), as the JSON object the daemon replies with."""
    secs = max(1, int(timeout))
    done = run_quick(
        ["ctl", "status", "--socket", os.fspath(socket), "--json", "--timeout", str(secs)],
        timeout=secs + 5,
    )
    text = done.stdout.strip()
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    if done.returncode != 0 or not isinstance(doc, dict):
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        msg = lines[-1] if lines else text or "ctl status failed"
        raise BuildError(msg.removeprefix("error: "), done.returncode)
    return doc
