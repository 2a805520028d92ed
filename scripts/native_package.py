"""The melforge package from python/, with the extension beside it, for the
scripts that test and time `melforge.features` without building a wheel.

`install(native, work)` copies python/melforge to `work/pkg/melforge`, puts
the cdylib `cargo build --release -p melforge-py` made (`native`) in it as
`_native.abi3.so`, puts `work/pkg` first on sys.path and returns it (a child
process can be given it as PYTHONPATH).
"""

import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def install(native, work):
    pkg = os.path.join(work, "pkg")
    shutil.copytree(os.path.join(REPO, "python", "melforge"), os.path.join(pkg, "melforge"))
    shutil.copy(native, os.path.join(pkg, "melforge", "_native.abi3.so"))
    sys.path.insert(0, pkg)
    return pkg
