#!/usr/bin/env python3
"""Checks the Kubernetes manifests of a sharded build (deploy/kubernetes).

usage: scripts/check_deploy.py [DIR]   (default deploy/kubernetes)

1. Schema: every manifest validates (strict: no unknown fields) against the
   Kubernetes OpenAPI schemas shipped offline by the `kubernetes-validate`
   package (scripts/requirements-ci.txt), for the oldest and newest versions
   checked here.
2. Wiring, which no schema can see: the build Job is an Indexed Job whose
   completions, parallelism and MELFORGE_SHARDS agree; its --shard argument is
   $(JOB_COMPLETION_INDEX)/$(MELFORGE_SHARDS); the merge Job merges the build's
   --out directory; both mount the ReadWriteMany claim of pvc.yaml at a path
   that holds every input (a tree, or manifests) and the output directory.
Prints every problem and exits 1 if there is one.
"""
import sys
from pathlib import Path

import yaml

VERSIONS = ("1.27.0", "1.33.0")


def load(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    if len(docs) != 1:
        raise SystemExit(f"{path}: expected one resource, found {len(docs)}")
    return docs[0]


def schema_problems(files):
    try:
        import kubernetes_validate
    except ImportError:
        return ["kubernetes-validate is not installed "
                "(pip install -r scripts/requirements-ci.txt)"]
    out = []
    for version in VERSIONS:
        for f in files:
            try:
                kubernetes_validate.validate(load(f), version, strict=True)
            except kubernetes_validate.ValidationError as e:
                out.append(f"{f.name}: not a valid resource for Kubernetes {version}: "
                           f"{e.message} at {'.'.join(map(str, e.path))}")
            except kubernetes_validate.SchemaNotFoundError as e:
                out.append(f"{f.name}: no schema for Kubernetes {version}: {e}")
    return out


def container(job):
    cs = job["spec"]["template"]["spec"]["containers"]
    if len(cs) != 1:
        raise KeyError(f"expected one container, found {len(cs)}")
    return cs[0]


def flag(args, name):
    return args[args.index(name) + 1] if name in args[:-1] else None


def mounted_claim(job, claim, paths, bad, what):
    """The claim is a volume of the pod, mounted at a prefix of every path."""
    spec = job["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = container(job).get("volumeMounts", [])
    for m in mounts:
        if m["name"] not in vols:
            bad(f"{what}: volumeMount {m['name']!r} names no volume of the pod")
    ok = [m for m in mounts
          if vols.get(m["name"], {}).get("persistentVolumeClaim", {}).get("claimName") == claim]
    if not ok:
        bad(f"{what}: does not mount the claim {claim!r}")
        return
    for p in paths:
        if p is None or not any(p == m["mountPath"] or p.startswith(m["mountPath"].rstrip("/") + "/")
                                for m in ok):
            bad(f"{what}: {p!r} is not on the mounted claim {claim!r}")


def wiring_problems(d):
    problems = []
    bad = problems.append
    pvc, build, merge = (load(d / n) for n in ("pvc.yaml", "build-job.yaml", "merge-job.yaml"))
    if pvc.get("kind") != "PersistentVolumeClaim":
        bad(f"pvc.yaml: kind is {pvc.get('kind')!r}")
    if "ReadWriteMany" not in pvc["spec"].get("accessModes", []):
        bad("pvc.yaml: the claim is not ReadWriteMany (shard pods run on several nodes)")
    claim = pvc["metadata"]["name"]

    spec = build["spec"]
    if build.get("kind") != "Job" or spec.get("completionMode") != "Indexed":
        bad("build-job.yaml: not an Indexed Job (completionMode: Indexed)")
    c = container(build)
    env = {e["name"]: e for e in c.get("env", [])}
    shards = env.get("MELFORGE_SHARDS", {}).get("value")
    n = {spec.get("completions"), spec.get("parallelism"), int(shards) if shards and shards.isdigit() else shards}
    if len(n) != 1:
        bad(f"build-job.yaml: completions {spec.get('completions')}, parallelism "
            f"{spec.get('parallelism')} and MELFORGE_SHARDS {shards!r} must all be N")
    idx = env.get("JOB_COMPLETION_INDEX")
    if idx is not None:
        ref = idx.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        if "batch.kubernetes.io/job-completion-index" not in ref:
            bad("build-job.yaml: JOB_COMPLETION_INDEX is not the job-completion-index annotation")
    args = c.get("command", []) + c.get("args", [])
    if args[:2] != ["melforge", "build"]:
        bad(f"build-job.yaml: runs {args[:2]}, expected melforge build")
    if flag(args, "--shard") != "$(JOB_COMPLETION_INDEX)/$(MELFORGE_SHARDS)":
        bad(f"build-job.yaml: --shard is {flag(args, '--shard')!r}, "
            "expected $(JOB_COMPLETION_INDEX)/$(MELFORGE_SHARDS)")
    out = flag(args, "--out")
    # The inputs: a tree, or one or more NeMo/lhotse manifests, before the
    # first option.
    rest = args[2:]
    inputs = rest[:next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]
    if not inputs:
        bad("build-job.yaml: names no input (a tree or manifests) before its options")
    mounted_claim(build, claim, inputs + [out], bad, "build-job.yaml")

    margs = container(merge).get("command", []) + container(merge).get("args", [])
    if merge.get("kind") != "Job" or merge["spec"].get("completions", 1) != 1:
        bad("merge-job.yaml: not a one-pod Job")
    if margs[:2] != ["melforge", "merge"] or (margs[2:3] or [None])[0] != out:
        bad(f"merge-job.yaml: runs {margs}, expected melforge merge {out}")
    mounted_claim(merge, claim, [out], bad, "merge-job.yaml")
    return problems


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes")
    files = sorted(d.glob("*.yaml"))
    try:
        problems = schema_problems(files) + wiring_problems(d)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        problems = [f"{d}: a manifest lacks an expected field: {type(e).__name__}: {e}"]
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    print("FAILED" if problems else f"OK: {len(files)} manifests in {d}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
