#!/usr/bin/env python3
"""What planning a long manifest costs in memory: peak RSS per line.

Usage: bench_plan_memory.py MELFORGE_BIN WORK [--lines N] [--kind good|bad|segments]
                            [--json]

Writes one 0.5 s 16 kHz WAV and a NeMo manifest of N lines (default
10,000,000) into WORK (kept: a manifest of the same kind and length is
reused), then runs `melforge build MANIFEST --out WORK/out` (kaldi-fbank,
40 bins) and reads its JSON log:

* good: every line names the WAV whole, with a `text` (about 70 bytes a
  line, as a NeMo ASR manifest's). The build is stopped with SIGINT as soon
  as "Read the manifests." is logged, and the peak RSS (VmHWM) is read from
  /proc just before: what planning the rows cost, with the writer's files
  created and nothing computed.
* segments: every line is a 0.25 s segment of the WAV (`offset`), which the
  planner gives a byte range (a WAV header rewritten for the part); stopped
  as `good` is.
* bad: every line is rejected at parse (`"duration": 0`); the build runs to
  its end, and the peak is the process's (wait4's ru_maxrss), so writing
  `rejected.jsonl` is counted.

Prints a markdown row (or JSON) with the planning seconds the build logs,
the peak RSS and the peak per line.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import wave

CONFIG = '[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 40\n'


def write_wav(path):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(2 * 8000))


def line(kind, i):
    text = f"utterance {i:09d} of the corpus"
    if kind == "good":
        return f'{{"audio_filepath": "a.wav", "duration": 0.5, "text": "{text}"}}\n'
    if kind == "segments":
        return (
            f'{{"audio_filepath": "a.wav", "offset": 0.25, "duration": 0.25, '
            f'"text": "{text}"}}\n'
        )
    return f'{{"audio_filepath": "a.wav", "duration": 0, "text": "{text}"}}\n'


def manifest(work, kind, lines):
    path = os.path.join(work, f"{kind}-{lines}.jsonl")
    if os.path.exists(path):
        return path
    part = path + ".partial"
    with open(part, "w") as f:
        block = 100_000
        for start in range(0, lines, block):
            f.write("".join(line(kind, i) for i in range(start, min(lines, start + block))))
    os.rename(part, path)
    return path


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith("VmHWM:"):
                return int(row.split()[1])
    raise RuntimeError("no VmHWM")


def run(binary, work, kind, lines):
    write_wav(os.path.join(work, "a.wav"))
    path = manifest(work, kind, lines)
    config = os.path.join(work, "melforge.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    out = os.path.join(work, "out")
    cmd = [binary, "build", path, "--out", out, "--config", config,
           "--log-format", "json", "--progress", "none"]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seconds = None
    peak_kib = None
    for row in p.stderr:
        try:
            event = json.loads(row)
        except json.JSONDecodeError:
            continue
        if event.get("message") == "Read the manifests.":
            seconds = float(event["seconds"])
            if kind != "bad":
                peak_kib = vm_hwm_kib(p.pid)
                p.send_signal(signal.SIGINT)
    p.stderr.close()
    _, status, usage = os.wait4(p.pid, 0)
    if peak_kib is None:
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"the build failed: {status}")
        peak_kib = usage.ru_maxrss
    if seconds is None:
        sys.exit("the build logged no 'Read the manifests.'")
    return {
        "kind": kind,
        "lines": lines,
        "manifest_bytes": os.path.getsize(path),
        "planning_s": seconds,
        "peak_rss_mib": peak_kib / 1024,
        "bytes_per_line": peak_kib * 1024 / lines,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("work")
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--kind", choices=["good", "bad", "segments"], default="good")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    r = run(a.binary, a.work, a.kind, a.lines)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"| {r['kind']} | {r['lines']:,} | {r['manifest_bytes'] / 1e6:,.0f} MB "
              f"| {r['planning_s']:.1f} s | {r['peak_rss_mib']:,.0f} MiB "
              f"| {r['bytes_per_line']:.0f} B |")


if __name__ == "__main__":
    main()
