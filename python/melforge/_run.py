"""Running a long `melforge` command (build, merge) as a child process.

The child writes its JSON report on stdout (read by a thread, so a large
report never blocks it) and, on stderr, JSON log events (`--log-format
json`) and `--progress json` events, read here line by line: progress goes
to the display, log events to the `melforge` logger, and the last error
sentence is kept for the exception.

KeyboardInterrupt (Ctrl-C in a terminal or Jupyter's interrupt): the child
gets SIGINT (in a terminal it usually already has it, being in the same
process group; a second one is harmless), stops its stages, deletes its
partial files and exits with 130; then the KeyboardInterrupt propagates.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
from typing import IO, Any, Callable, Dict, List, Optional, Sequence

from ._binary import child_env, command
from ._errors import BuildError
from ._report import ProgressEvent

log = logging.getLogger("melforge")

#: Exit status of a command stopped by SIGINT/SIGTERM.
INTERRUPTED = 130

_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}


def _read_all(stream: IO[str], into: List[str]) -> None:
    into.append(stream.read())


def _log_event(doc: Dict[str, Any]) -> Optional[str]:
    """Forwards a tracing JSON event to the logger; returns its error text
    when it is an ERROR event."""
    fields = doc.get("fields")
    if not isinstance(fields, dict):
        return None
    message = str(fields.get("message", ""))
    rest = " ".join(f"{k}={v}" for k, v in fields.items() if k != "message")
    level = _LEVELS.get(str(doc.get("level", "INFO")).upper(), logging.INFO)
    log.log(level, "%s%s", message, f" ({rest})" if rest else "")
    if level >= logging.ERROR:
        err = fields.get("error")
        return str(err) if err is not None else message
    return None


def run_streaming(
    args: Sequence[str], on_progress: Optional[Callable[[ProgressEvent], None]]
) -> Dict[str, Any]:
    """Runs `melforge --log-format json ARGS` (ARGS must ask for `--json`);
    returns its JSON document. Raises BuildError with the binary's sentence
    on failure, KeyboardInterrupt after stopping the child cleanly."""
    proc = subprocess.Popen(
        command(["--log-format", "json", *args]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=child_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: List[str] = []
    reader = threading.Thread(target=_read_all, args=(proc.stdout, out), daemon=True)
    reader.start()
    last_error: Optional[str] = None
    other: List[str] = []
    try:
        for line in proc.stderr:
            line = line.strip()
            if not line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                other.append(line)
                continue
            if not isinstance(doc, dict):
                other.append(line)
            elif doc.get("event") == "progress":
                if on_progress is not None:
                    on_progress(ProgressEvent.from_json(doc))
            else:
                last_error = _log_event(doc) or last_error
        proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        if proc.poll() is None:  # an exception other than KeyboardInterrupt
            _stop(proc)
        reader.join()
    stdout = out[0] if out else ""
    doc = _parse(stdout)
    if proc.returncode == 0 and doc is not None and doc.get("ok", True) is not False:
        return doc
    sentence = None
    if doc is not None and isinstance(doc.get("error"), str):
        sentence = doc["error"]
    sentence = sentence or last_error or "\n".join(other[-5:]) or "no message"
    raise BuildError(sentence, proc.returncode)


def _parse(stdout: str) -> Optional[Dict[str, Any]]:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _stop(proc: "subprocess.Popen[str]") -> None:
    """SIGINT to the child, then wait for it to clean up (a second Ctrl-C
    while waiting kills it)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.stderr is not None:
            proc.stderr.close()


class Display:
    """The progress display: tqdm (tqdm.auto, so Jupyter gets its widget)
    when installed, else one plain line rewritten on stderr."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: Any = None
        self.plain_shown = False
        try:
            from tqdm.auto import tqdm

            self.tqdm: Any = tqdm
        except ImportError:
            self.tqdm = None

    def __call__(self, e: ProgressEvent) -> None:
        if self.tqdm is not None:
            if self.bar is None:
                self.bar = self.tqdm(total=e.files_total, desc=self.desc, unit="file")
            self.bar.update(e.files_done - self.bar.n)
            self.bar.set_postfix(rejected=e.rejected, refresh=False)
            return
        eta = "?" if e.eta_s is None else f"{e.eta_s:.0f}s"
        sys.stderr.write(
            f"\r{self.desc}: {e.files_done}/{e.files_total} files, {e.rejected} rejected, "
            f"{e.files_per_s:.0f} files/s, eta {eta}   "
        )
        sys.stderr.flush()
        self.plain_shown = True

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.plain_shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
