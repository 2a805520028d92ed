"""The PEP 517 build backend of `pip install .`: maturin's, set up the way a
wheel of melforge has to be built.

* **Vendored libraries, manylinux tag.** maturin's own PEP 517 hook passes
  `--compatibility off`, which tags the wheel `linux_x86_64` and skips the
  auditwheel repair, so the wheel's binary needs the system's libhdf5,
  libhwloc, libsoxr and libudev. This backend passes `--compatibility pypi`
  (the manylinux tag of the newest glibc symbol any vendored library needs,
  checked uploadable) and `--auditwheel repair` (those libraries copied into
  `melforge.libs/` under hashed names), as `scripts/build-wheel` always has:
  that script builds through this backend too, so there is one recipe.
* **Never touches `target/`.** Cargo compiles into `build/wheel/`, a target
  directory of its own (`MELFORGE_WHEEL_TARGET_DIR` overrides it). maturin
  builds with its own flags (`-C strip=symbols` through `cargo rustc`), so in
  `target/` it would rebuild and overwrite `target/release/melforge`; and the
  repair rewrites the binary in place with patchelf, which reaches every hard
  link of the file, cargo's own copy in `release/deps/` included.
* **A patched binary is never reused.** After each build (or failed build)
  the binary and its staged copy are deleted from that target directory, so
  the next build links a fresh one instead of reusing (and re-patching) a
  binary whose library names were already rewritten. Relinking costs seconds;
  the dependencies stay built.

* **The in-process extension.** maturin packs one kind of artefact per
  wheel (here the binary), so the backend builds the features extension
  (crates/py, the cdylib `melforge._native`, abi3 for CPython >= 3.9) with
  cargo in the same target directory and adds it to the repaired wheel as
  `melforge/_native.abi3.so`, with its RECORD line. Its one system library
  is libsoxr (`melforge.decode(sr=)`), which the repair has already copied
  into `melforge.libs/` for the binary: the backend rewrites the
  extension's NEEDED entry to that copy's hashed name and its RPATH to
  `$ORIGIN/../melforge.libs` (patchelf), so both use the one vendored copy
  (and its vendored libgomp).
  An editable install gets it beside the sources instead
  (python/melforge/_native.abi3.so, ignored by git), linked to the
  system's libsoxr.

An editable install (`pip install -e .`) goes the same way. Everything else
(sdist, metadata) is maturin's, unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any, Mapping

import maturin
from maturin import (  # noqa: F401  (the hooks this backend passes through)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

# What every wheel of melforge is built with (scripts/build-wheel included).
WHEEL_ARGS = ["--compatibility", "pypi", "--auditwheel", "repair"]

# The binary's name (Cargo.toml's [[bin]]); the only artefact the repair patches.
BINARY = "melforge"

# The features extension: its cargo package, the file cargo links, and its
# name inside the package.
EXTENSION_PACKAGE = "melforge-py"
EXTENSION_BUILT = "lib_native.so"
EXTENSION_NAME = "melforge/_native.abi3.so"


def _build_extension(target: Path) -> Path:
    """Builds the features extension (release, symbols stripped) into
    `target`; returns the shared object."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), CARGO_PROFILE_RELEASE_STRIP="symbols")
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", EXTENSION_PACKAGE], check=True, env=env)
    return target / "release" / EXTENSION_BUILT


def _vendored(wheel: Path, library: str) -> tuple[str, str] | None:
    """Where the repair put `library` (e.g. "libsoxr") in the wheel: its
    `*.libs/` directory and hashed file name; None where the repair was
    skipped."""
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            parts = n.split("/")
            if len(parts) == 2 and parts[0].endswith(".libs") and parts[1].startswith(library + "-"):
                return parts[0], parts[1]
    return None


def _pointed_at_vendored(extension: Path, wheel: Path) -> bytes:
    """The extension's bytes with its libsoxr NEEDED entry renamed to the
    wheel's vendored copy and RPATH `$ORIGIN/../melforge.libs`; unchanged
    where the wheel vendors no libsoxr (the repair skipped)."""
    found = _vendored(wheel, "libsoxr")
    if found is None:
        return extension.read_bytes()
    libs, vendored = found
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        raise RuntimeError("patchelf is not on PATH: the extension cannot be pointed at the wheel's libsoxr")
    patched = extension.with_name(extension.name + ".wheel")
    shutil.copyfile(extension, patched)
    try:
        needed = subprocess.run([patchelf, "--print-needed", str(patched)], check=True,
                                capture_output=True, text=True).stdout.split()
        soxr = [n for n in needed if n.startswith("libsoxr.")]
        if len(soxr) != 1:
            raise RuntimeError(f"{extension}: expected one libsoxr among its NEEDED entries, got {needed}")
        # Two calls: patchelf 0.14 applies only the last of several
        # operations given at once, and in the wrong place.
        subprocess.run([patchelf, "--replace-needed", soxr[0], vendored, str(patched)], check=True)
        # DT_RPATH, not RUNPATH: the vendored libsoxr needs the vendored
        # libgomp and has no path of its own, and only an RPATH reaches the
        # libraries a library loads.
        subprocess.run([patchelf, "--force-rpath", "--set-rpath", f"$ORIGIN/../{libs}", str(patched)],
                       check=True)
        needed = subprocess.run([patchelf, "--print-needed", str(patched)], check=True,
                                capture_output=True, text=True).stdout.split()
        if vendored not in needed:
            raise RuntimeError(f"patchelf left {extension} needing {needed}, not {vendored}")
        return patched.read_bytes()
    finally:
        patched.unlink()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Rewrites `wheel` with `name` added (mode 755) and its RECORD line."""
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            body = src.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = [ln for ln in body.decode().splitlines() if ln and not ln.startswith(name + ",")]
                lines.insert(len(lines) - 1, _record_line(name, data))
                body = ("\n".join(lines) + "\n").encode()
                extension = zipfile.ZipInfo(name, date_time=item.date_time)
                extension.external_attr = 0o100755 << 16
                extension.compress_type = zipfile.ZIP_DEFLATED
                dst.writestr(extension, data)
            if item.filename != name:
                dst.writestr(item, body)
    tmp.replace(wheel)


def _target_dir() -> Path:
    """The wheel builds' own cargo target directory."""
    given = os.environ.get("MELFORGE_WHEEL_TARGET_DIR")
    # PEP 517 runs hooks in the source tree's root.
    return Path(given).resolve() if given else Path.cwd() / "build" / "wheel"


def _forget_patched_binary(target: Path) -> None:
    """Deletes every copy of the binary the repair may have rewritten: cargo's
    (`release/deps/melforge-<hash>` and its `release/melforge` link) and
    maturin's staged one (`maturin/`)."""
    release = target / "release"
    doomed = [release / BINARY, target / "maturin" / BINARY]
    deps = release / "deps"
    if deps.is_dir():
        prefix = BINARY + "-"
        # The binary has no extension; `.d` files and the library's
        # `libmelforge-*.rlib` stay.
        doomed += [p for p in deps.iterdir() if p.name.startswith(prefix) and "." not in p.name]
    for p in doomed:
        if p.is_file() or p.is_symlink():
            p.unlink()


def _build(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None,
    metadata_directory: str | None,
    editable: bool,
) -> str:
    settings = dict(config_settings or {})
    extra = settings.pop("maturin.build-args", settings.pop("build-args", None))
    if extra is None:
        extra = os.environ.get("MATURIN_PEP517_ARGS", "")
    args = list(WHEEL_ARGS)
    args += shlex.split(extra) if isinstance(extra, str) else list(extra)
    settings["maturin.build-args"] = args
    target = _target_dir()
    previous = os.environ.get("CARGO_TARGET_DIR")
    os.environ["CARGO_TARGET_DIR"] = str(target)
    hook = maturin.build_editable if editable else maturin.build_wheel
    try:
        name = hook(wheel_directory, settings, metadata_directory)
        extension = _build_extension(target)
        if editable:
            shutil.copy(extension, Path.cwd() / "python" / EXTENSION_NAME)
        else:
            wheel = Path(wheel_directory) / name
            _add_to_wheel(wheel, EXTENSION_NAME, _pointed_at_vendored(extension, wheel))
        return name
    finally:
        _forget_patched_binary(target)
        if previous is None:
            del os.environ["CARGO_TARGET_DIR"]
        else:
            os.environ["CARGO_TARGET_DIR"] = previous


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _build(wheel_directory, config_settings, metadata_directory, editable=False)


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _build(wheel_directory, config_settings, metadata_directory, editable=True)


__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]
