"""Typed reports parsed from the binary's JSON (`build --json`,
`merge --json`, `--progress json` events).

Parsing is strict about what it knows: a field that is missing or has the
wrong type raises `BuildError` (the binary and this package disagree, which
an upgrade of one without the other causes), so a rename in the Rust report
cannot pass silently. Fields this package does not know yet are kept in
`extra` at each level; python/tests/test_build.py fails when any appear, so
the dataclasses are updated with the binary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from ._errors import BuildError

Json = Mapping[str, Any]


class _Fields:
    """Typed access to one JSON object; records which keys were read."""

    def __init__(self, doc: Any, what: str) -> None:
        if not isinstance(doc, dict):
            raise BuildError(f"{what}: expected a JSON object, got {type(doc).__name__}")
        self.doc: Dict[str, Any] = doc
        self.what = what
        self.used: set[str] = set()

    def _get(self, key: str) -> Any:
        if key not in self.doc:
            raise BuildError(f"{self.what}: field `{key}` is missing (melforge binary and package differ?)")
        self.used.add(key)
        return self.doc[key]

    def _bad(self, key: str, want: str) -> BuildError:
        return BuildError(f"{self.what}: field `{key}` should be {want}, got {self.doc[key]!r}")

    def text(self, key: str) -> str:
        v = self._get(key)
        if not isinstance(v, str):
            raise self._bad(key, "a string")
        return v

    def integer(self, key: str) -> int:
        v = self._get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            raise self._bad(key, "an integer")
        return v

    def number(self, key: str) -> float:
        v = self._get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise self._bad(key, "a number")
        return float(v)

    def opt_number(self, key: str) -> Optional[float]:
        return None if self._get(key) is None else self.number(key)

    def opt_integer(self, key: str) -> Optional[int]:
        return None if self._get(key) is None else self.integer(key)

    def flag(self, key: str) -> bool:
        v = self._get(key)
        if not isinstance(v, bool):
            raise self._bad(key, "true or false")
        return v

    def items(self, key: str) -> List[Any]:
        v = self._get(key)
        if not isinstance(v, list):
            raise self._bad(key, "a list")
        return v

    def obj(self, key: str) -> Dict[str, Any]:
        v = self._get(key)
        if not isinstance(v, dict):
            raise self._bad(key, "an object")
        return v

    def opt_obj(self, key: str) -> Optional[Dict[str, Any]]:
        return None if self._get(key) is None else self.obj(key)

    def absent_or_obj(self, key: str) -> Optional[Dict[str, Any]]:
        """A field the binary writes only for some builds."""
        return self.obj(key) if key in self.doc else None

    def absent_or_paths(self, key: str) -> List[Path]:
        """A list of paths the binary writes only when it has any."""
        if key not in self.doc:
            return []
        v = self.items(key)
        if not all(isinstance(p, str) for p in v):
            raise self._bad(key, "a list of paths")
        return [Path(p) for p in v]

    def extra(self) -> Dict[str, Any]:
        return {k: v for k, v in self.doc.items() if k not in self.used}


@dataclass(frozen=True)
class Planned:
    """What a manifest or stored-corpus build's planner read beside the
    readers (headers, tar headers and metadata members, parquet pages), and
    what it spilled (gzipped shards, parquet audio)."""

    bytes_read: int
    spilled: int
    spill_bytes: int
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "Planned":
        f = _Fields(doc, "planned")
        return Planned(f.integer("bytes_read"), f.integer("spilled"), f.integer("spill_bytes"), f.extra())


@dataclass(frozen=True)
class OutputFile:
    """One file a build or merge wrote."""

    split: str
    path: Path
    rows: int
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "OutputFile":
        f = _Fields(doc, "output")
        return OutputFile(f.text("split"), Path(f.text("path")), f.integer("rows"), f.extra())


@dataclass(frozen=True)
class Rejection:
    """A file the build could not use, and why (a line of rejected.jsonl)."""

    path: str
    kind: str
    reason: str
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "Rejection":
        f = _Fields(doc, "rejection")
        return Rejection(f.text("path"), f.text("kind"), f.text("reason"), f.extra())


@dataclass(frozen=True)
class BusySeconds:
    """Seconds each stage was busy, summed over its threads."""

    read: float
    decode: float
    mel: float
    write: float
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "BusySeconds":
        f = _Fields(doc, "report.busy_s")
        return BusySeconds(f.number("read"), f.number("decode"), f.number("mel"), f.number("write"), f.extra())


@dataclass(frozen=True)
class SerialStage:
    """One single-threaded stage's own CPU time (CLOCK_THREAD_CPUTIME_ID, not
    time spent waiting) and what it costs each file of the run."""

    stage: str
    cpu_s: float
    files: int
    cpu_us_per_file: float
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "SerialStage":
        f = _Fields(doc, "report.serial[]")
        return SerialStage(f.text("stage"), f.number("cpu_s"), f.integer("files"), f.number("cpu_us_per_file"),
                           f.extra())


@dataclass(frozen=True)
class Ring:
    """Counters of one ring between stages."""

    name: str
    capacity: int
    pushed: int
    popped: int
    max_depth: int
    mean_depth: float
    wakes: int
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "Ring":
        f = _Fields(doc, "report.rings[]")
        return Ring(
            f.text("name"),
            f.integer("capacity"),
            f.integer("pushed"),
            f.integer("popped"),
            f.integer("max_depth"),
            f.number("mean_depth"),
            f.integer("wakes"),
            f.extra(),
        )


@dataclass(frozen=True)
class Stats:
    """The stage report: counts, throughput, busy time, rings."""

    files_ok: int
    files_rejected: int
    rejected_by_kind: Dict[str, int]
    bytes_read: int
    elapsed_s: float
    files_per_s: float
    busy_s: BusySeconds
    serial: List[SerialStage]
    serial_ceiling_files_per_s: Optional[float]
    rings: List[Ring]
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "Stats":
        f = _Fields(doc, "report")
        by_kind = f.obj("rejected_by_kind")
        kinds = _Fields(by_kind, "report.rejected_by_kind")
        return Stats(
            files_ok=f.integer("files_ok"),
            files_rejected=f.integer("files_rejected"),
            rejected_by_kind={k: kinds.integer(k) for k in by_kind},
            bytes_read=f.integer("bytes_read"),
            elapsed_s=f.number("elapsed_s"),
            files_per_s=f.number("files_per_s"),
            busy_s=BusySeconds.from_json(f.obj("busy_s")),
            serial=[SerialStage.from_json(s) for s in f.items("serial")],
            serial_ceiling_files_per_s=f.opt_number("serial_ceiling_files_per_s"),
            rings=[Ring.from_json(r) for r in f.items("rings")],
            extra=f.extra(),
        )


@dataclass(frozen=True)
class Startup:
    """Seconds each start-up step of a build took (they overlap: the device
    probe runs beside the walk, the kernels beside the first reads), and when
    the first read went out after the process started."""

    walk: float
    device: float
    arena: float
    kernels: float
    first_read: Optional[float]
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "Startup":
        f = _Fields(doc, "build report.startup_s")
        return Startup(
            walk=f.number("walk"),
            device=f.number("device"),
            arena=f.number("arena"),
            kernels=f.number("kernels"),
            first_read=f.opt_number("first_read"),
            extra=f.extra(),
        )


@dataclass(frozen=True)
class BuildReport:
    """What `melforge build` did (its `--json` document)."""

    engine: str
    """Reader engine: "uring" or "std"."""
    backend: str
    """Compute backend that ran: "cpu" or "cuda"."""
    backend_reason: str
    direct: bool
    """Whether inputs were read with O_DIRECT."""
    direct_reason: str
    typical_file_bytes: Optional[int]
    """The mean size of the inputs `io.direct = "auto"` sampled, which sized
    the read arena; None when nothing was sampled."""
    arena_bytes: Optional[int]
    """The read arena's size; None with the std engine."""
    startup_s: Startup
    """How long each start-up step took (`Startup`)."""
    cuda: Optional[Dict[str, Any]]
    """The CUDA stage's report (device, batches, transfer rates) when it ran."""
    outputs: List[OutputFile]
    rejected: List[Rejection]
    rejected_log: Path
    report: Stats
    planned: Optional[Planned] = None
    """The planner's reads and spills (manifests and stored corpora; None
    for a tree)."""
    cuts: List[Path] = field(default_factory=list)
    """The lhotse cuts written (`out/<split>.cuts.jsonl.gz`), with
    `output.lhotse`; empty otherwise."""
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Rows written, over all splits."""
        return sum(o.rows for o in self.outputs)

    @staticmethod
    def from_json(doc: Any) -> "BuildReport":
        f = _Fields(doc, "build report")
        return BuildReport(
            engine=f.text("engine"),
            backend=f.text("backend"),
            backend_reason=f.text("backend_reason"),
            direct=f.flag("direct"),
            direct_reason=f.text("direct_reason"),
            typical_file_bytes=f.opt_integer("typical_file_bytes"),
            arena_bytes=f.opt_integer("arena_bytes"),
            startup_s=Startup.from_json(f.obj("startup_s")),
            cuda=f.opt_obj("cuda"),
            outputs=[OutputFile.from_json(o) for o in f.items("outputs")],
            rejected=[Rejection.from_json(r) for r in f.items("rejected")],
            rejected_log=Path(f.text("rejected_log")),
            report=Stats.from_json(f.obj("report")),
            planned=_planned(f.absent_or_obj("planned")),
            cuts=f.absent_or_paths("cuts"),
            extra=f.extra(),
        )


def _planned(doc: Optional[Dict[str, Any]]) -> Optional[Planned]:
    return None if doc is None else Planned.from_json(doc)


@dataclass(frozen=True)
class MergeReport:
    """What `melforge merge` did (its `--json` document)."""

    mode: str
    """"virtual" or "copy"."""
    shards: int
    outputs: List[OutputFile]
    rejected: int
    rejected_log: Path
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "MergeReport":
        f = _Fields(doc, "merge report")
        return MergeReport(
            mode=f.text("mode"),
            shards=f.integer("shards"),
            outputs=[OutputFile.from_json(o) for o in f.items("outputs")],
            rejected=f.integer("rejected"),
            rejected_log=Path(f.text("rejected_log")),
            extra=f.extra(),
        )


@dataclass(frozen=True)
class ProgressEvent:
    """One `--progress json` event of a running build."""

    files_done: int
    files_total: int
    rejected: int
    bytes_read: int
    elapsed_s: float
    files_per_s: float
    eta_s: Optional[float]
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_json(doc: Any) -> "ProgressEvent":
        f = _Fields(doc, "progress event")
        if f.text("event") != "progress":
            raise BuildError(f"not a progress event: {doc!r}")
        return ProgressEvent(
            files_done=f.integer("files_done"),
            files_total=f.integer("files_total"),
            rejected=f.integer("rejected"),
            bytes_read=f.integer("bytes_read"),
            elapsed_s=f.number("elapsed_s"),
            files_per_s=f.number("files_per_s"),
            eta_s=f.opt_number("eta_s"),
            extra=f.extra(),
        )
