"""Finding and running the `melforge` executable.

Search order: `$MELFORGE_BIN`; the executable the wheel installs next to the
package (`<site-packages>/melforge.scripts/melforge`, which finds its vendored
libraries in `melforge.libs/` through its RUNPATH); `melforge` on PATH (the
wheel's launcher script, or a cargo-installed binary).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Sequence


class BinaryNotFound(RuntimeError):
    """No `melforge` executable was found."""


def find_binary() -> str:
    """The path of the `melforge` executable the API runs."""
    env = os.environ.get("MELFORGE_BIN")
    if env:
        return env
    wheel_exe = Path(__file__).resolve().parent.parent / "melforge.scripts" / "melforge"
    if wheel_exe.is_file() and os.access(wheel_exe, os.X_OK):
        return str(wheel_exe)
    on_path = shutil.which("melforge")
    if on_path:
        return on_path
    raise BinaryNotFound(
        "no melforge executable: install the wheel (pip install melforge), put "
        "melforge on PATH, or set MELFORGE_BIN"
    )


def command(args: Sequence[str]) -> List[str]:
    """`melforge ARGS...` as an argv list."""
    return [find_binary(), *args]


def site_dirs() -> List[str]:
    """The site-packages folders of this interpreter, the one holding this
    package first: where pip put the `nvidia-*` CUDA wheels (NVRTC, cuFFT)
    that PyTorch brings, which the binary's GPU backend loads from
    `nvidia/<wheel>/lib` (it reads them from `$MELFORGE_PYTHON_SITE`, so a
    venv works without being activated)."""
    dirs = [str(Path(__file__).resolve().parent.parent)]
    try:
        import site

        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some embedded interpreters lack these
        pass
    return list(dict.fromkeys(dirs))


def child_env() -> "dict[str, str]":
    """The environment for the child: ours, without RUST_LOG (the API chooses
    the log level) and without colours, with this interpreter's site-packages
    added to `$MELFORGE_PYTHON_SITE` (see `site_dirs`)."""
    env = dict(os.environ, NO_COLOR="1")
    env.pop("RUST_LOG", None)
    sites = [p for p in env.get("MELFORGE_PYTHON_SITE", "").split(os.pathsep) if p]
    env["MELFORGE_PYTHON_SITE"] = os.pathsep.join(list(dict.fromkeys(sites + site_dirs())))
    return env


def run_quick(args: Sequence[str], timeout: float = 60.0) -> "subprocess.CompletedProcess[str]":
    """Runs a short command (check-config, ctl) to completion, capturing both
    streams as text."""
    return subprocess.run(
        command(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        timeout=timeout,
        check=False,
    )
