"""Drop-to-visible latency of `melforge serve` (helper of scripts/bench-serve-latency).

Starts `melforge serve` on a fresh work directory, renames pre-made clips into
the drop directory at a steady rate, and runs an h5py SWMR reader in a separate
process that polls `path` with refresh() and notes when each path first becomes
readable. Latency of a file = (first seen by the reader) - (its rename returned),
both on CLOCK_MONOTONIC. Prints one JSON object (latencies in ms) on stdout.

All bench files go to one split (TRAINING/<label>/...), so the reader polls one
file. Clips are hard links to a small pool of synthetic clips, so 10,000 names
cost no more disk than the pool; the service reads every file in full anyway.
"""

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time

LABELS = ["LEAK", "NO_LEAK", "PUMP", "VALVE"]


def rel_of(i):
    return f"TRAINING/{LABELS[i % 4]}/f{i:06d}.wav"


def find_report(doc):
    """The stage report inside a `ctl stats --json` reply ({} if none)."""
    if isinstance(doc, dict):
        if "serial" in doc:
            return doc
        for v in doc.values():
            r = find_report(v)
            if r:
                return r
    return {}


def ctl(bin_, sock, cmd):
    out = subprocess.run(
        [bin_, "ctl", "--json", "--socket", sock, cmd],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None


def reader(path, want, limit_s, poll_s, ready, results):
    """Opens `path` SWMR, then records (rel, t_seen) for every new path row.

    serve's files store `path` as a string column (docs/FORMAT.md, layout
    version 2): `path_end` (int64, one past each path's last byte) and
    `path_utf8` (the bytes), both plain datasets SWMR covers. A row is
    visible once `path_end` holds it; its bytes are read after refreshing
    `path_utf8`. Reopens (kept from the variable-length layout, whose global
    heap SWMR did not cover) are counted and should stay 0.
    """
    import h5py

    def open_():
        f = h5py.File(path, "r", libver="latest", swmr=True)
        return f, f["path_end"], f["path_utf8"]

    f, ends, utf8 = open_()
    ends.refresh()
    seen = ends.shape[0]
    ready.set()
    out, reopens = [], 0
    deadline = time.monotonic() + limit_s
    while len(out) < want and time.monotonic() < deadline:
        ends.refresh()
        n = ends.shape[0]
        if n > seen:
            try:
                e = ends[max(seen - 1, 0):n]
                lo = int(e[0]) if seen else 0
                utf8.refresh()
                raw = bytes(utf8[lo:int(e[-1])])
            except OSError:
                f.close()
                f, ends, utf8 = open_()
                reopens += 1
                continue
            now = time.monotonic()
            bounds = [int(x) - lo for x in (e[1:] if seen else e)]
            start = 0
            for b in bounds:
                out.append((raw[start:b].decode(), now))
                start = b
            seen = n
        else:
            time.sleep(poll_s)
    results.put((out, reopens))


def pct(sorted_v, q):
    if not sorted_v:
        return None
    k = min(len(sorted_v) - 1, max(0, round(q / 100 * (len(sorted_v) - 1))))
    return sorted_v[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pool", required=True, help="directory of .wav clips")
    ap.add_argument("--work", required=True, help="emptied and reused")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--flush-ms", type=int, default=50)
    ap.add_argument("--poll-ms", type=float, default=1.0)
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument(
        "--on-success",
        default="keep",
        choices=["keep", "delete", "move"],
        help="serve.on_success (move: into <work>/done)",
    )
    a = ap.parse_args()

    pool = sorted(
        os.path.join(dp, n)
        for dp, _, ns in os.walk(a.pool)
        for n in ns
        if n.endswith(".wav")
    )
    n = int(a.rate * a.seconds)
    shutil.rmtree(a.work, ignore_errors=True)
    drop, stage = os.path.join(a.work, "drop"), os.path.join(a.work, "stage")
    for d in [drop, stage] + [os.path.join(drop, "TRAINING", l) for l in LABELS]:
        os.makedirs(d)
    for i in range(n + 1):
        os.link(pool[i % len(pool)], os.path.join(stage, f"{i}.wav"))
    cfg = os.path.join(a.work, "cfg.toml")
    sock = os.path.join(a.work, "ctl.sock")
    with open(cfg, "w") as f:
        f.write(
            f'[serve]\nwatch_dir = "drop"\noutput_dir = "out"\n'
            f"flush_interval_ms = {a.flush_ms}\n"
            f'on_success = "{a.on_success}"\n'
            + ('done_dir = "done"\n' if a.on_success == "move" else "")
            + f'[control]\nsocket = "ctl.sock"\n'
            f'[compute]\nbackend = "{a.backend}"\n'
        )
    log = open(os.path.join(a.work, "serve.log"), "w")
    svc = subprocess.Popen([a.bin, "serve", "--config", cfg], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not (ctl(a.bin, sock, "status") or {}).get("ok"):
            if svc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"serve did not start; see {a.work}/serve.log")
            time.sleep(0.05)
        # A warm-up file creates TRAINING.h5, so the reader can open it first.
        os.rename(os.path.join(stage, f"{n}.wav"), os.path.join(drop, "TRAINING/LEAK/warmup.wav"))
        h5 = os.path.join(a.work, "out", "TRAINING.h5")
        while True:
            st = ctl(a.bin, sock, "flush") or {}
            if st.get("rows", {}).get("TRAINING", 0) >= 1:
                break
            if time.monotonic() > deadline:
                sys.exit("the warm-up file never became a row")
            time.sleep(0.05)

        ready, results = mp.Event(), mp.Queue()
        limit = a.seconds + 60
        rd = mp.Process(target=reader, args=(h5, n, limit, a.poll_ms / 1000, ready, results))
        rd.start()
        if not ready.wait(30):
            sys.exit("the SWMR reader did not open the file")

        renamed = {}
        cpu0 = thread_cpu(svc.pid)
        t0 = time.monotonic()
        for i in range(n):
            due = t0 + i / a.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            rel = rel_of(i)
            os.rename(os.path.join(stage, f"{i}.wav"), os.path.join(drop, rel))
            renamed[rel] = time.monotonic()
        t1 = time.monotonic()
        cpu1 = thread_cpu(svc.pid)
        got = None
        while got is None:
            try:
                got = results.get(timeout=1)
            except Exception:  # queue.Empty
                if not rd.is_alive():
                    sys.exit("the SWMR reader died; see its traceback above")
        seen, reopens = got
        rd.join()
        status = ctl(a.bin, sock, "status") or {}
        stats = ctl(a.bin, sock, "stats") or {}
        ctl(a.bin, sock, "shutdown")
        svc.wait(timeout=60)
    finally:
        if svc.poll() is None:
            svc.kill()
            svc.wait()

    lat = sorted((t - renamed[p]) * 1000 for p, t in seen if p in renamed)
    paths = [p for p, _ in seen]
    print(
        json.dumps(
            {
                "files": n,
                "seen": len(lat),
                "duplicates": len(paths) - len(set(paths)),
                "flush_interval_ms": a.flush_ms,
                "on_success": a.on_success,
                "target_rate": a.rate,
                "achieved_rate": round(n / (t1 - t0), 1) if n else 0,
                "p50_ms": round(pct(lat, 50), 1),
                "p90_ms": round(pct(lat, 90), 1),
                "p99_ms": round(pct(lat, 99), 1),
                "max_ms": round(lat[-1], 1),
                "reader_reopens": reopens,
                "service_files_ok": status.get("files_ok"),
                "service_rejected": status.get("files_rejected"),
                "engine": status.get("engine"),
                "backend": status.get("backend"),
                # Each single-threaded stage's own CPU µs per file and the
                # ceiling they set (docs/ARCHITECTURE.md, "Serial stages").
                "serial_us_per_file": {
                    s["stage"]: round(s["cpu_us_per_file"], 1)
                    for s in (find_report(stats).get("serial") or [])
                },
                "serial_ceiling_files_per_s": find_report(stats).get("serial_ceiling_files_per_s"),
                # Cores each of serve's threads used while files were
                # dropped (by thread name, busiest first): which one caps it.
                "thread_cores": {
                    k: round((cpu1.get(k, 0) - cpu0.get(k, 0)) / (t1 - t0), 3)
                    for k in sorted(cpu1, key=lambda k: cpu0.get(k, 0) - cpu1[k])
                    if cpu1[k] > cpu0.get(k, 0)
                },
            }
        )
    )


def thread_cpu(pid):
    """CPU seconds (user + system) per thread name of process `pid`, from
    /proc/<pid>/task/*/stat; io_uring workers (`iou-wrk-<tid>`) summed."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1 : st.rindex(")")]
        if name.startswith("iou-wrk"):
            name = "iou-wrk"
        fields = st[st.rindex(")") + 2 :].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


if __name__ == "__main__":
    main()
