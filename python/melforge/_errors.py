"""The exceptions of the build API."""

from __future__ import annotations

from typing import Optional


class BuildError(RuntimeError):
    """A `melforge` command failed; `str(e)` is the binary's own sentence
    (e.g. "no audio files found under /data"), `returncode` its exit status."""

    def __init__(self, message: str, returncode: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode


class ConfigError(BuildError):
    """`melforge check-config` refused a config; the sentence names the key
    and line."""
