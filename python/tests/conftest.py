"""Fixtures: the melforge binary, a small synthetic corpus and its build.

The binary is `$MELFORGE_BIN`, else the one the installed wheel brings
(`melforge.find_binary()`, which the build API runs too), else the
repository's target/release or target/debug build (newest first); tests are
skipped with the reason when there is none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[2]


def melforge_bin() -> str:
    env = os.environ.get("MELFORGE_BIN")
    if env:
        return env
    try:
        import melforge

        return melforge.find_binary()
    except Exception:  # BinaryNotFound: fall back to the repository's build
        pass
    found = [REPO / "target" / p / "melforge" for p in ("release", "debug")]
    found = [p for p in found if p.is_file()]
    if not found:
        pytest.skip("no melforge binary: set MELFORGE_BIN or cargo build")
    return str(max(found, key=lambda p: p.stat().st_mtime))


def run(*args: str) -> None:
    env = dict(os.environ, NO_COLOR="1")
    env.pop("RUST_LOG", None)
    subprocess.run([melforge_bin(), *args], check=True, env=env, stdout=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus") / "c"
    run("synth", str(d), "--files", "40", "--seed", "5")
    return d


@pytest.fixture(scope="session")
def built(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    run("build", str(corpus), "--out", str(out))
    return out


def wavs(corpus: Path) -> List[str]:
    """Relative paths of the corpus's files, sorted."""
    return sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*.wav"))


def copy_into(corpus: Path, rel: str, drop: Path, stage: Path) -> None:
    """Writes `rel` into `stage/`, then renames it into `drop/` (the writer
    contract of `serve`)."""
    tmp = stage / rel.replace("/", "_")
    shutil.copyfile(corpus / rel, tmp)
    to = drop / rel
    to.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, to)
