"""Compile C/C++ into objects and shared objects, cached by content hash.

Each build lives in `<cache>/<kind>/<hash>/` holding the source, the exact
command (`cmd.txt`), the compiler's output (`build.log`) and the product (a
`.o` or `.so`), so a build can be inspected and rerun by hand.  The hash
covers the source text, the command and the versions of Python and torch, so
a change of any of them builds anew.

An SCM is built in two steps: each version's unit is compiled to an object
in `obj/<hash>/` (reused while its text is unchanged, which is always for
the versions a rebuild keeps), then the small dispatcher unit is compiled
and linked with those objects into `scm/<hash>/scm.so`.
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
from dataclasses import dataclass
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


def _build(kind: str, files: dict, cmd_for, what: str, suffix: str = ".so") -> tuple[Path, bool]:
    """Build `files` ({name: text}; the first is compiled with the others
    beside it) unless a build with the same hash exists.  Returns the
    product (named after the first file, with `suffix`) and whether this
    call compiled it."""
    import torch

    source_name = next(iter(files))
    tag = _digest(*files.values(), " ".join(cmd_for(["SRC"], "OUT")), sys.version,
                  torch.__version__)
    out_dir = config.cache_dir() / kind / tag
    so = out_dir / (Path(source_name).stem + suffix)
    if so.exists():
        return so, False
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
    return so, True


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

        so, _ = _build("runtime", files, cmd_for, "building Trident's runtime")
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


@dataclass(frozen=True)
class SCMBuild:
    """A built SCM: its shared object, the objects linked into it (one per
    version, in order, then scm_main.o) and the units this build compiled
    (the others' objects came from the cache)."""

    so: Path
    objects: tuple
    compiled: tuple


_SCM_HEADERS = ("scm_prelude.h", "scm_dispatch.h", "trident_rt.h")


# Version units are compiled at -O1: a FlagGems wrapper's unit is one function of a hundred
# guard blocks (60 KB of C), which gcc 13 compiled in 2.7 s at -O2 on the H200 machine (3.2 s
# at -O2 and 1.1 s at -O1 on the 2-core CI machine), and its hot path is calls, loads and
# compares that -O2 does not make faster.
# scm_main.c (compiled once per cache) and the small dispatcher unit stay at -O2.
VERSION_OPT = "-O1"
# A unit larger than this (a whole model's forward: hundreds of operator calls in one function)
# is compiled at -O0: gcc's register allocation over such a function is what takes the time
# (a 2-layer Qwen3 forward, 345 KB of C: 16 s at -O1, 1.1 s at -O0 on the 2-core machine),
# while each of its operator calls costs microseconds that -O1 would not shorten.
LARGE_UNIT_CHARS = 150_000


def version_opt(text: str) -> str:
    return VERSION_OPT if len(text) <= LARGE_UNIT_CHARS else "-O0"


def _scm_cmd(*head: str, opt: str = "-O2"):
    """The command line of an SCM step; `head` says what it makes."""

    def cmd_for(srcs: list, out: str, tail: tuple = ()) -> list[str]:
        return [
            config.c_compiler(), *head, "-fPIC", opt, "-std=c11",
            "-fvisibility=hidden", "-Wall", "-Wno-unused-variable", "-Wno-unused-label",
            "-Wno-unused-function",
            f"-I{RUNTIME_DIR}", f"-I{_python_include()}", *srcs, *tail, "-o", out,
        ]

    return cmd_for


def _with_headers(name: str, text: str, headers=_SCM_HEADERS) -> dict:
    # The headers travel with the source: the build directory is self-contained
    # and its hash changes when they do.
    files = {name: text}
    for n in headers:
        files[n] = (RUNTIME_DIR / n).read_text()
    return files


def build_scm(src) -> SCMBuild:
    """Build one generated SCM (plain C; a `codegen.c.SCMSource`).

    Each version's unit is compiled to an object unless an object of the
    same text exists (so a rebuild after a miss compiles only the new
    version), and so is runtime/scm_main.c (the entry points; once per
    cache); then the dispatcher unit, which does not include Python.h, is
    compiled and linked with them into the shared object."""
    compiled = []
    objects = []
    units = [(u.name, u.text) for u in src.versions]
    units.append(("scm_main.c", (RUNTIME_DIR / "scm_main.c").read_text()))
    for name, text in units:
        opt = "-O2" if name == "scm_main.c" else version_opt(text)
        obj, fresh = _build("obj", _with_headers(name, text), _scm_cmd("-c", opt=opt),
                            f"compiling {name} of an SCM", suffix=".o")
        objects.append(obj)
        if fresh:
            compiled.append(name)
    compile_and_link = _scm_cmd("-shared")

    def cmd_for(srcs: list, out: str) -> list[str]:
        return compile_and_link(srcs, out, tuple(str(o) for o in objects))

    d = src.dispatcher
    so, fresh = _build("scm", _with_headers(d.name, d.text, ("scm_dispatch.h",)), cmd_for,
                       "linking an SCM")
    if fresh:
        compiled.append(d.name)
    return SCMBuild(so, tuple(objects), tuple(compiled))
