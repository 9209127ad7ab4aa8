"""The key of a persisted SCM: what a record's versions were made from and under.

`function_key` covers the function's module, qualified name and code (`code_digest`: bytecode,
names, constants, nested code included), the capture options and knobs that shape a version,
and `environment()`: the Python, torch, Triton and Trident versions (Trident's by a digest of
its own sources, whose IR and C a record holds) and the CUDA devices.  A record made under any
other of these is never found.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

import torch

from .. import config

FORMAT = 2  # of a record (trident/persist/record.py); part of the key. 2: its host IR holds
# the passes' results (trident/ir/passes), which codegen prints and does not compute


def _torch_version() -> str:
    return f"{torch.__version__} {getattr(torch.version, 'git_version', '')}"


_cached: dict = {}


def _triton_version() -> str | None:
    if "triton" not in _cached:
        v = None
        mod = sys.modules.get("triton")
        if mod is not None:
            v = getattr(mod, "__version__", None)
        else:
            import importlib.util

            if importlib.util.find_spec("triton") is not None:
                from importlib import metadata

                try:
                    v = metadata.version("triton")
                except metadata.PackageNotFoundError:
                    v = None
        _cached["triton"] = v
    return _cached["triton"]


def _trident_version() -> str:
    """Trident's version and a digest of its sources (Python, runtime C/C++): the IR a record
    holds and the C generated from it are Trident's own."""
    if "trident" not in _cached:
        pkg = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for p in sorted(pkg.rglob("*")):
            if p.suffix in (".py", ".c", ".h", ".cpp") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(pkg)).encode() + b"\0")
                h.update(p.read_bytes())
        version = getattr(sys.modules.get("trident"), "__version__", "")
        _cached["trident"] = f"{version} {h.hexdigest()[:20]}"
    return _cached["trident"]


def _devices() -> list:
    """Name and capability of each CUDA device (none without CUDA)."""
    if "devices" not in _cached:
        out = []
        if torch.version.cuda and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                out.append([torch.cuda.get_device_name(i),
                            list(torch.cuda.get_device_capability(i))])
        _cached["devices"] = out
    return _cached["devices"]


def environment() -> dict:
    """What a record's versions were made under, besides the function itself."""
    return {"python": sys.version, "torch": _torch_version(), "triton": _triton_version(),
            "trident": _trident_version(), "devices": _devices()}


def canon(c) -> str:
    """A constant's text, the same in every process (a frozenset's order depends on the hash
    seed)."""
    if type(c) in (frozenset, set):
        return f"{type(c).__name__}({sorted(map(canon, c))})"
    if type(c) is tuple:
        return "(" + ",".join(map(canon, c)) + ")"
    if type(c) is types.CodeType:
        return "code:" + code_digest(c)
    return f"{type(c).__name__}:{c!r}"


def code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does: bytecode, names, constants (nested code by its own
    digest), argument counts, flags and exception table; not its file or line numbers."""
    h = hashlib.sha256()
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                   code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                   code.co_flags, code.co_name, getattr(code, "co_qualname", ""))).encode())
    h.update(getattr(code, "co_exceptiontable", b""))
    for c in code.co_consts:
        h.update(canon(c).encode() + b"\0")
    return h.hexdigest()[:32]


def function_key(scm) -> str:
    """The key of an SCM's records (32 hex digits): its function, the options and knobs its
    captures depend on, and `environment()`.  Defaults and globals are not in it: the
    versions' guards check them in the new process."""
    fn = scm.fn
    parts = {"format": FORMAT, "module": fn.__module__, "qualname": fn.__qualname__,
             "code": code_digest(fn.__code__), "dynamic": repr(scm.options.dynamic),
             "reuse_buffers": config.reuse_buffers(), "below_autograd": config.below_autograd(),
             **environment()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
