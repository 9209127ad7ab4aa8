"""Compile C/C++ into shared objects, cached by content hash.

Each build lives in `<cache>/<kind>/<hash>/` holding the source, the exact
command (`cmd.txt`), the compiler's output (`build.log`) and the `.so`, so a
build can be inspected and rerun by hand.  The hash covers the source text,
the command and the versions of Python and torch, so a change of any of them
builds anew.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from .. import config
from ..errors import BuildError

RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
_lock = threading.Lock()
_runtime = None


def _python_include() -> str:
    return sysconfig.get_paths()["include"]


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _build(kind: str, source_name: str, source: str, cmd_for, what: str) -> Path:
    """Build `source` unless a build with the same hash exists; return the .so."""
    import torch

    tag = _digest(source, " ".join(cmd_for("SRC", "OUT")), sys.version, torch.__version__)
    out_dir = config.cache_dir() / kind / tag
    so = out_dir / (Path(source_name).stem + ".so")
    if so.exists():
        return so
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Build in a private directory, then rename: concurrent processes never
    # see (or load) a half-written .so.
    tmp = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=out_dir.parent))
    src = tmp / source_name
    src.write_text(source)
    tmp_so = tmp / so.name
    cmd = cmd_for(str(src), str(tmp_so))
    (tmp / "cmd.txt").write_text(shlex.join(cmd) + "\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    log = proc.stdout + proc.stderr
    (tmp / "build.log").write_text(log)
    if proc.returncode != 0:
        raise BuildError(what, cmd, log)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        if not so.exists():  # another process won the race with a good build
            raise
    return so


def runtime_module():
    """Build (once per torch version) and import the C++ runtime `_trident_rt`."""
    global _runtime
    if _runtime is not None:
        return _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        from torch.utils import cpp_extension

        source = (RUNTIME_DIR / "trident_rt.cpp").read_text()
        header = (RUNTIME_DIR / "trident_rt.h").read_text()
        incs = cpp_extension.include_paths()
        libdir = os.path.join(os.path.dirname(cpp_extension.__file__), "..", "lib")
        libdir = os.path.normpath(libdir)
        import torch

        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)

        def cmd_for(src: str, out: str) -> list[str]:
            return [
                config.cxx_compiler(), "-shared", "-fPIC", "-O2", "-std=c++20",
                "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                "-DTORCH_EXTENSION_NAME=_trident_rt",
                f"-I{RUNTIME_DIR}", f"-I{_python_include()}",
                *[f"-I{i}" for i in incs],
                src, "-o", out,
                f"-L{libdir}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
                f"-Wl,-rpath,{libdir}",
            ]

        # The header is part of the ABI: hash it with the source.
        so = _build("runtime", "trident_rt.cpp", header + "\n//--\n" + source, cmd_for,
                    "building Trident's runtime")
        spec = importlib.util.spec_from_file_location("_trident_rt", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _runtime = mod
        return mod


def build_scm(c_source: str) -> Path:
    """Compile one generated SCM (plain C) and return the path of its .so."""

    def cmd_for(src: str, out: str) -> list[str]:
        return [
            config.c_compiler(), "-shared", "-fPIC", "-O2", "-std=c11",
            "-fvisibility=hidden", "-Wall", "-Wno-unused-variable", "-Wno-unused-label",
            "-Wno-unused-function",
            f"-I{RUNTIME_DIR}", f"-I{_python_include()}", src, "-o", out,
        ]

    return _build("scm", "scm.c", c_source, cmd_for, "compiling an SCM")
