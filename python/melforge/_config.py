"""`melforge.Config`: a build config from a dict or a TOML file, validated
by the binary itself (`melforge check-config`), so Python accepts exactly
what the CLI accepts and refuses with the same sentence.

A dict is written to a private TOML file that lives as long as the Config.
Relative paths inside it (e.g. `control.socket`) resolve against that file's
directory, as for any config file; give absolute paths in a dict.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import weakref
from pathlib import Path
from typing import Any, Mapping, Union

from ._binary import run_quick
from ._errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ConfigError(f"{where}: {v} is not a finite number")
        return repr(v)
    if isinstance(v, (str, os.PathLike)):
        # A JSON string is a valid TOML basic string.
        return json.dumps(os.fspath(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, where) for x in v) + "]"
    raise ConfigError(f"{where}: cannot write a {type(v).__name__} to TOML")


def to_toml(settings: Mapping[str, Any]) -> str:
    """The TOML text of a config dict: top-level scalars, then one `[table]`
    per nested mapping (nested tables as dotted headers)."""
    lines: list[str] = []

    def table(prefix: str, m: Mapping[str, Any]) -> None:
        subs = []
        for k, v in m.items():
            if not isinstance(k, str):
                raise ConfigError(f"config key {k!r} is not a string")
            if isinstance(v, Mapping):
                subs.append((k, v))
            elif v is not None:
                lines.append(f"{_key(k)} = {_value(v, prefix + k)}")
        for k, v in subs:
            name = prefix + _key(k)
            lines.append(f"\n[{name}]")
            table(name + ".", v)

    table("", settings)
    return "\n".join(lines).lstrip("\n") + "\n"


class Config:
    """A validated melforge config.

    `Config({"compute": {"backend": "cpu"}, "output": {"dtype": "float16"}})`
    or `Config("melforge.toml")`; raises `ConfigError` with the binary's
    sentence (naming the key and line) when `melforge check-config` refuses
    it. `path` is the TOML file the binary reads; `resolved` is the resolved
    settings as `check-config` prints them.
    """

    def __init__(self, source: Union[Mapping[str, Any], PathLike]) -> None:
        if isinstance(source, Mapping):
            fd, name = tempfile.mkstemp(prefix="melforge-config-", suffix=".toml")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(to_toml(source))
            self.path = Path(name)
            self._cleanup = weakref.finalize(self, _unlink, name)
        else:
            self.path = Path(os.fspath(source))
        done = run_quick(["check-config", str(self.path)])
        if done.returncode != 0:
            raise ConfigError(_sentence(done.stderr), done.returncode)
        self.resolved: str = done.stdout

    def __repr__(self) -> str:
        return f"Config({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _sentence(stderr: str) -> str:
    """The binary's error, without its `error: ` prefix: from that line to
    the end (a TOML parse error shows the line and the reason below it)."""
    lines = stderr.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("error: "):
            return "\n".join([lines[i][len("error: ") :], *lines[i + 1 :]])
    return stderr.strip() or "check-config failed"
