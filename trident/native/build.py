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


def _build(kind: str, files: dict, cmd_for, what: str) -> Path:
    """Build `files` ({name: text}; the first is compiled with the others
    beside it) unless a build with the same hash exists; return the .so."""
    import torch

    source_name = next(iter(files))
    tag = _digest(*files.values(), " ".join(cmd_for(["SRC"], "OUT")), sys.version,
                  torch.__version__)
    out_dir = config.cache_dir() / kind / tag
    so = out_dir / (Path(source_name).stem + ".so")
    if so.exists():
        return so
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Build in a private directory, then rename: concurrent processes never
    # see (or load) a half-written .so.
    tmp = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=out_dir.parent))
    for name, text in files.items():
        (tmp / name).write_text(text)
    tmp_so = tmp / so.name
    cmd = cmd_for([str(tmp / n) for n in files if n.endswith((".c", ".cpp"))], str(tmp_so))
    (tmp / "cmd.txt").write_text(shlex.join(cmd) + "\n")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    except OSError as e:  # no such compiler
        raise BuildError(what, cmd, f"{type(e).__name__}: {e}") from e
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

        files = {n: (RUNTIME_DIR / n).read_text() for n in (
            "trident_rt.cpp", "trident_rt_launch.cpp", "trident_rt.h", "trident_rt_internal.h")}
        incs = cpp_extension.include_paths()
        libdir = os.path.join(os.path.dirname(cpp_extension.__file__), "..", "lib")
        libdir = os.path.normpath(libdir)
        import torch

        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        cuda = _cuda_flags()

        def cmd_for(srcs: list, out: str) -> list[str]:
            return [
                config.cxx_compiler(), "-shared", "-fPIC", "-O2", "-std=c++20",
                "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                "-DTORCH_EXTENSION_NAME=_trident_rt",
                f"-I{RUNTIME_DIR}", f"-I{_python_include()}",
                *[f"-I{i}" for i in incs], *cuda["cflags"],
                *srcs, "-o", out,
                f"-L{libdir}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
                *cuda["libs"], f"-Wl,-rpath,{libdir}",
            ]

        so = _build("runtime", files, cmd_for, "building Trident's runtime")
        spec = importlib.util.spec_from_file_location("_trident_rt", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _runtime = mod
        return mod


def _cuda_flags() -> dict:
    """Compile the Triton launch path only where torch has CUDA."""
    import torch

    if not torch.version.cuda:
        return {"cflags": [], "libs": []}
    from torch.utils import cpp_extension

    incs = []
    home = cpp_extension.CUDA_HOME
    if home:
        incs.append(os.path.join(home, "include"))
    try:  # Triton ships cuda.h; use it when no toolkit headers are found
        import triton

        incs.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia",
                                 "include"))
    except ImportError:
        pass
    return {"cflags": ["-DTRT_WITH_CUDA", *[f"-I{i}" for i in incs]], "libs": ["-lc10_cuda"]}


def build_scm(c_source: str) -> Path:
    """Compile one generated SCM (plain C) and return the path of its .so."""

    def cmd_for(srcs: list, out: str) -> list[str]:
        return [
            config.c_compiler(), "-shared", "-fPIC", "-O2", "-std=c11",
            "-fvisibility=hidden", "-Wall", "-Wno-unused-variable", "-Wno-unused-label",
            "-Wno-unused-function",
            f"-I{RUNTIME_DIR}", f"-I{_python_include()}", *srcs, "-o", out,
        ]

    # The headers travel with the source: the build directory is self-contained
    # and its hash changes when they do.
    files = {"scm.c": c_source}
    for n in ("scm_prelude.h", "trident_rt.h"):
        files[n] = (RUNTIME_DIR / n).read_text()
    return _build("scm", files, cmd_for, "compiling an SCM")
