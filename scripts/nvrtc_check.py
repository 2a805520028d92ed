#!/usr/bin/env python3
"""Compile every kernels/*.cu with NVRTC (no GPU needed) and check the kernels exist.

Uses libnvrtc from the `nvidia-cuda-nvrtc-cu12` wheel (pip install
nvidia-cuda-nvrtc-cu12), else CUDA 13's `nvidia-cuda-nvrtc` (nvidia/cu13/lib),
or the path in $MELFORGE_NVRTC, or the system loader.
Compiles with the options the CUDA backend uses and fails (exit 1) on any error,
warning-free log not required; prints the log. Exit 2 when libnvrtc is missing.

    python3 scripts/nvrtc_check.py [--arch compute_80] [FILE.cu ...]
"""
import argparse
import ctypes
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Options the backend passes; --fmad=false is belt and braces (the kernels already
# use _rn intrinsics where rounding matters).
OPTIONS = ["--std=c++17", "--fmad=false"]


def load_nvrtc():
    candidates = []
    if os.environ.get("MELFORGE_NVRTC"):
        candidates.append(os.environ["MELFORGE_NVRTC"])
    try:
        import nvidia.cuda_nvrtc  # type: ignore

        for base in nvidia.cuda_nvrtc.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    try:
        import nvidia  # type: ignore  # CUDA 13 wheels share nvidia/cu13/lib

        for base in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "cu13", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    candidates += ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"]
    errors = []
    for c in candidates:
        if ".alt." in c:
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            errors.append(f"{c}: {e}")
    print("libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)", file=sys.stderr)
    for e in errors:
        print("  " + e, file=sys.stderr)
    sys.exit(2)


def compile_one(nvrtc, path, arch):
    src = open(path, "rb").read()
    prog = ctypes.c_void_p()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(path).encode(), 0, None, None), "create")
    kernels = re.findall(rb'extern\s+"C"\s+__global__\s+void\s+(\w+)', src)
    for k in kernels:
        check(nvrtc, nvrtc.nvrtcAddNameExpression(prog, k), "name " + k.decode())
    opts = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in OPTIONS]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace").strip()
    ok = rc == 0
    ptx_size = ctypes.c_size_t()
    if ok:
        check(nvrtc, nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size)), "ptx size")
        for k in kernels:
            lowered = ctypes.c_char_p()
            check(nvrtc, nvrtc.nvrtcGetLoweredName(prog, k, ctypes.byref(lowered)), "lowered " + k.decode())
            if lowered.value != k:
                print(f"  {k.decode()}: lowered name {lowered.value!r} is mangled (missing extern \"C\"?)")
                ok = False
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    status = "ok" if ok else "FAILED"
    print(f"{os.path.relpath(path, ROOT)} [{arch}]: {status}; {len(kernels)} kernels: "
          f"{', '.join(k.decode() for k in kernels)}; PTX {ptx_size.value} bytes")
    if text:
        print("  log: " + text.replace("\n", "\n       "))
    return ok


def check(nvrtc, rc, what):
    if rc != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"nvrtc {what}: {nvrtc.nvrtcGetErrorString(rc).decode()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", help="default: compute_75, compute_80, compute_90")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    nvrtc, where = load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(f"libnvrtc {major.value}.{minor.value} from {where}")
    files = a.files or sorted(glob.glob(os.path.join(ROOT, "kernels", "*.cu")))
    if not files:
        sys.exit("no kernels/*.cu found")
    ok = True
    for f in files:
        for arch in a.arch or ["compute_75", "compute_80", "compute_90"]:
            ok &= compile_one(nvrtc, f, arch)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
