"""PyTorch's own Dynamo function tests, run against Trident (issue 32, item 3).

    python benchmarks/dynamo_tests.py --tests /path/to/test_functions.py \
        [--source "pytorch/pytorch@<commit>"] [--out FILE] [--only NAME[,NAME]] [--limit N]
        [--json FILE] [--persist] [--chunk N] [--timeout S]

PyTorch's `test/dynamo/test_functions.py` defines many small functions through `make_test`,
which turns `def test_x(a, b): ...` into a test calling the function with
`len(inspect.signature(fn).parameters)` tensors `torch.randn(10, 10)` (in
`torch._dynamo.testing.standard_test`) and comparing torch.compile against eager.  The file is
PyTorch's, not this project's: it is read from the path given (never committed here).

The file is parsed with `ast`.  Its module-level statements run in one namespace (the ones
that fail, such as imports of PyTorch's test-only packages, are recorded and their names stay
undefined); each TestCase class is replaced by a plain class holding only its nested classes
(`FunctionTests.MyNamedTuple`).  Every function decorated with `@make_test` (at module level,
in a class, or nested in a test method) is compiled from its own source in that namespace.
One nested in a `@parametrize`d test method, reading the method's arguments, becomes one
function per combination of values (`fn@LINE[value]`, the values bound as its globals).  One
defined twice is run twice (`name@LINE`).  One whose `unittest.skipIf`/`skipUnless` condition
holds, one defined under an `if` that is false here, or one reading a name the namespace
lacks is `skipped`.

Each function then runs four calls, each on its own random inputs, eager on one copy and
`trident.jit(fn)` on another: (1) 10x10 inputs (the capture), (2) fresh 10x10 inputs (must be
a native hit), (3) 6x10 inputs (a new shape: Dynamo's automatic dynamic shapes), (4) 4x10
inputs (informative: a hit on the dynamic version).  Every result is compared with eager's:
values (torch.testing.assert_close, numpy's allclose, == for the rest), types and structure,
strides, identity (an input returned as itself, an object returned twice) and storage sharing
(a view of an input), and the inputs after the call (in-place updates).  Classes:

- native:        every call matches, no path ran eagerly, call 2 was a native hit
- eager path:    matches, but Trident ran a path eagerly (reason from its RuntimeWarning)
- fallback:      matches, the whole function runs eagerly (trident.stats: runs_eagerly)
- no hit:        matches, no eager path, but call 2 missed (a recapture of the same path)
- eager raises:  eager raises on call 1 and Trident raises the same type
- mismatch:      some result differs from eager's (the worst bug)
- error:         Trident raised where eager did not, or another exception type
- crash:         the worker process died (or hung past --timeout) in that function
- skipped:       see above

Also recorded per function: whether `torch.compile(fn, fullgraph=True, backend="eager")`
compiles call 1 without a graph break.  The functions run in worker subprocesses (a fresh one
every --chunk functions, and after a crash), so a crash is attributed to the one function that
was running.  The workers run with TRIDENT_CACHE=off (unless --persist), so that call 1
captures instead of loading a version an earlier run persisted.  The report, with date,
commit, machine and torch version, goes to benchmarks/results/latest/dynamo_tests.md unless
--out says otherwise.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import collections
import dataclasses
import datetime
import dis
import hashlib
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import report_info  # noqa: E402
SHAPES = [(10, 10), (10, 10), (6, 10), (4, 10)]  # capture, hit, new shape, dynamic hit
CLASSES = ["native", "eager path", "fallback", "no hit", "eager raises", "mismatch", "error",
           "crash", "skipped"]


# -- extraction (parent and worker) ---------------------------------------------------------

@dataclass
class TestFn:
    key: str  # unique: the name, with its line where the name is defined twice
    name: str
    lineno: int
    owner: str  # "module", a class name, or "Class.method" for one nested in a test method
    source: str
    skip: str | None = None  # why it is not run, if known from the file alone
    conditions: list = field(default_factory=list)  # skipIf/skipUnless/if, to evaluate
    notes: list = field(default_factory=list)
    # @parametrize of the test method it is nested in: [(names, values source)], and, once
    # expanded (expand()), one combination's values by name
    params: list = field(default_factory=list)
    bindings: dict = field(default_factory=dict)


def _is_make_test(dec) -> bool:
    if isinstance(dec, ast.Call):
        dec = dec.func
    return isinstance(dec, ast.Name) and dec.id == "make_test"


def _is_testcase(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(b).endswith("TestCase") for b in cls.bases)


def extract(path: str) -> tuple[ast.Module, list[TestFn]]:
    text = Path(path).read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    found: list[TestFn] = []

    def visit(node, owner: str, conds: list, params: list):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_is_make_test(d) for d in child.decorator_list):
                    src = textwrap.dedent("\n".join(lines[child.lineno - 1:child.end_lineno]))
                    t = TestFn(child.name, child.name, child.lineno, owner, src,
                               conditions=list(conds), params=list(params))
                    for d in child.decorator_list:
                        if _is_make_test(d):
                            continue
                        call = d if isinstance(d, ast.Call) else None
                        what = ast.unparse(call.func if call else d)
                        if what in ("unittest.skipIf", "unittest.skipUnless") and call:
                            cond = ast.unparse(call.args[0])
                            if what == "unittest.skipUnless":
                                cond = f"not ({cond})"
                            reason = ast.unparse(call.args[1]) if len(call.args) > 1 else ""
                            t.conditions.append(("skip", cond, reason))
                        elif what == "unittest.skip":
                            t.skip = f"unittest.skip: {ast.unparse(call.args[0]) if call else ''}"
                        else:
                            t.notes.append(f"decorator @{what} not applied")
                    found.append(t)
                visit(child, child.name if owner == "module" else f"{owner}.{child.name}",
                      conds, params + _parametrize(child))
            elif isinstance(child, ast.ClassDef):
                visit(child, child.name if owner == "module" else f"{owner}.{child.name}",
                      conds, params)
            elif isinstance(child, ast.If):
                cond = ast.unparse(child.test)
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), owner,
                          conds + [("if", cond, "")], params)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), owner,
                          conds + [("if", f"not ({cond})", "")], params)
            elif not isinstance(child, (ast.expr, ast.expr_context)):
                visit(child, owner, conds, params)

    visit(tree, "module", [], [])
    counts = collections.Counter(t.name for t in found)
    for t in found:
        if counts[t.name] > 1:
            t.key = f"{t.name}@{t.lineno}"
            later = [u.lineno for u in found if u.name == t.name and u.lineno > t.lineno
                     and u.owner == t.owner]
            if later:
                t.notes.append(f"redefined at line {later[0]} (PyTorch's suite runs only that one)")
    return tree, found


def _parametrize(fdef) -> list:
    """[(argument names, values source)] of a test method's @parametrize decorators."""
    out = []
    for d in fdef.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func).split(".")[-1] == "parametrize" \
                and len(d.args) >= 2 and isinstance(d.args[0], ast.Constant):
            names = [n.strip() for n in str(d.args[0].value).split(",")]
            out.append((names, ast.unparse(d.args[1])))
    return out


def expand(tests: list[TestFn], ns: dict) -> list[TestFn]:
    """A make_test function nested in a parametrized test method reads the method's arguments
    (its closure): one function per combination of the @parametrize values, keyed
    `name[value,...]`, the values bound as globals."""
    out = []
    for t in tests:
        if not t.params:
            out.append(t)
            continue
        try:
            axes = []
            for names, src in t.params:
                values = list(eval(src, ns))  # the test file's own values
                axes.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
        except Exception:  # noqa: BLE001 - left unexpanded: skipped for its missing names
            out.append(t)
            continue
        for combo in itertools.product(*axes):
            b = {k: v for part in combo for k, v in part.items()}
            label = ",".join(getattr(v, "__name__", None) or repr(v) for v in b.values())
            out.append(dataclasses.replace(t, key=f"{t.key}[{label}]", bindings=b,
                                           params=[]))
    return out


# -- worker ---------------------------------------------------------------------------------

def build_namespace(path: str, tree: ast.Module) -> tuple[dict, list[str]]:
    """The test file's module namespace: each module-level statement run in order (failures
    recorded), each TestCase class replaced by a plain class with its nested classes."""
    ns: dict = {"__name__": "test_functions", "__file__": path, "__builtins__": builtins}
    failed = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and "__main__" in ast.unparse(stmt.test):
            continue
        if isinstance(stmt, ast.ClassDef) and _is_testcase(stmt):
            body = [s for s in stmt.body if isinstance(s, ast.ClassDef)] or [ast.Pass()]
            stmt = ast.ClassDef(name=stmt.name, bases=[], keywords=[], body=body,
                                decorator_list=[], type_params=[])
            ast.fix_missing_locations(stmt)
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec"), ns)  # noqa: S102
        except Exception as e:  # noqa: BLE001 - a test-only import (expecttest, triton, ...)
            failed.append(f"line {stmt.lineno}: `{ast.unparse(stmt).splitlines()[0][:70]}`: "
                          f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
    return ns, failed


def _global_names(code) -> set:
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            names |= _global_names(c)
    return names


def _make_fn(t: TestFn, ns: dict):
    """The function compiled from its source with the namespace as its globals, or the reason
    it is skipped."""
    for kind, cond, reason in t.conditions:
        try:
            value = eval(cond, ns)  # the test file's own condition
        except Exception as e:  # noqa: BLE001
            return None, f"{kind} condition `{cond}` not evaluable here ({type(e).__name__}: {e})"
        if kind == "skip" and value:
            return None, f"skipIf `{cond}`: {reason}"
        if kind == "if" and not value:
            return None, f"defined only if `{cond}`"
    if t.bindings:  # a parametrized closure's values, as globals of its own namespace
        ns = {**ns, **t.bindings}
    had = t.name in ns
    old = ns.get(t.name)
    exec(compile(t.source, f"<{t.key}>", "exec"), ns)  # noqa: S102 - the test's own source
    fn = ns[t.name]
    if had:
        ns[t.name] = old
    else:
        del ns[t.name]
    missing = sorted(n for n in _global_names(fn.__code__)
                     if n not in ns and not hasattr(builtins, n))
    if missing:
        return None, f"needs {', '.join(missing)} (not defined at module level)"
    return fn, None


class Diff(Exception):
    pass


def _leaves(obj, path="r", out=None, seen=None):
    """(path, object) for every object inside a result, depth first."""
    if out is None:
        out, seen = [], set()
    out.append((path, obj))
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, (list, tuple, collections.deque)):
        for i, v in enumerate(obj):
            _leaves(v, f"{path}[{i}]", out, seen)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(v, f"{path}[{k!r}]", out, seen)
    return out


def compare(e, t, path="r"):
    """Raise Diff where `t` (Trident's) differs from `e` (eager's) in value, type or shape."""
    import numpy as np
    import torch

    if type(e) is not type(t):
        # A class built inside the function (collections.namedtuple(...)) is a new class per
        # call: the same name and fields is the same structure.
        same_kind = (type(e).__qualname__ == type(t).__qualname__
                     and getattr(type(e), "_fields", None) == getattr(type(t), "_fields", 0))
        if not same_kind:
            raise Diff(f"{path}: type {type(t).__name__}, eager {type(e).__name__}")
    if isinstance(e, torch.Tensor):
        if (e.shape, e.dtype, e.device, e.requires_grad) != (t.shape, t.dtype, t.device,
                                                             t.requires_grad):
            raise Diff(f"{path}: tensor {tuple(t.shape)} {t.dtype} requires_grad="
                       f"{t.requires_grad}, eager {tuple(e.shape)} {e.dtype} "
                       f"requires_grad={e.requires_grad}")
        if e.numel() > 1 and e.stride() != t.stride():
            raise Diff(f"{path}: strides {t.stride()}, eager {e.stride()}")
        try:
            torch.testing.assert_close(t, e, equal_nan=True)
        except AssertionError as err:
            raise Diff(f"{path}: values differ: {str(err).splitlines()[0][:120]}") from None
    elif isinstance(e, np.ndarray):
        if (e.shape, e.dtype) != (t.shape, t.dtype):
            raise Diff(f"{path}: ndarray {t.shape} {t.dtype}, eager {e.shape} {e.dtype}")
        if not np.allclose(t, e, rtol=1.3e-6, atol=1e-5, equal_nan=True):
            raise Diff(f"{path}: ndarray values differ")
    elif isinstance(e, (list, tuple, collections.deque)):
        if len(e) != len(t):
            raise Diff(f"{path}: length {len(t)}, eager {len(e)}")
        if isinstance(e, collections.deque) and e.maxlen != t.maxlen:
            raise Diff(f"{path}: deque maxlen {t.maxlen}, eager {e.maxlen}")
        for i, (a, b) in enumerate(zip(e, t)):
            compare(a, b, f"{path}[{i}]")
    elif isinstance(e, dict):
        if list(e.keys()) != list(t.keys()):
            raise Diff(f"{path}: keys {list(t.keys())}, eager {list(e.keys())}")
        if isinstance(e, collections.defaultdict) and e.default_factory != t.default_factory:
            raise Diff(f"{path}: default_factory differs")
        for k in e:
            compare(e[k], t[k], f"{path}[{k!r}]")
    elif isinstance(e, (float, complex)):
        both_nan = isinstance(e, float) and math.isnan(e) and math.isnan(t)
        if not (e == t or both_nan or
                (isinstance(e, float) and math.isclose(e, t, rel_tol=1.3e-6, abs_tol=1e-5))):
            raise Diff(f"{path}: {t!r}, eager {e!r}")
    elif isinstance(e, np.generic):
        if not (e == t or (np.isnan(e) and np.isnan(t))):
            raise Diff(f"{path}: {t!r}, eager {e!r}")
    else:
        try:
            equal = bool(e == t)
        except Exception:  # noqa: BLE001 - objects without a usable ==
            equal = repr(e) == repr(t)
        if not equal:
            raise Diff(f"{path}: {t!r:.80}, eager {e!r:.80}")


def _storage(x):
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        if x.numel() == 0 or x.is_sparse:
            return None
        s = x.untyped_storage()
        return (s.data_ptr(), s.nbytes())
    if isinstance(x, np.ndarray):
        base = x
        while isinstance(base.base, np.ndarray):
            base = base.base
        return ("np", base.__array_interface__["data"][0]) if x.size else None
    return None


def _overlaps(a, b) -> bool:
    if a is None or b is None:
        return False
    if a[0] == "np" or b[0] == "np":
        return False
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def aliasing(result, args) -> dict:
    """Per mutable object in the result: which argument it is, which arguments' storage it
    shares, and which other result objects it is."""
    import numpy as np
    import torch

    out = {}
    first_at: dict = {}
    arg_storage = [_storage(a) for a in args]
    arg_np = [a.numpy() if isinstance(a, torch.Tensor) and a.device.type == "cpu"
              and not a.requires_grad else None for a in args]
    for path, obj in _leaves(result):
        if not isinstance(obj, (torch.Tensor, np.ndarray, list, dict, set,
                                collections.deque)):
            continue
        desc = {"is_arg": next((i for i, a in enumerate(args) if obj is a), None),
                "same_as": first_at.setdefault(id(obj), path)}
        if isinstance(obj, torch.Tensor):
            st = _storage(obj)
            desc["views_arg"] = [i for i, s in enumerate(arg_storage) if _overlaps(st, s)]
        elif isinstance(obj, np.ndarray):
            desc["views_arg"] = [i for i, a in enumerate(arg_np)
                                 if a is not None and np.shares_memory(obj, a)]
        out[path] = desc
    return out


def _randn(shape, n, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(n)]


def _seed(seed):
    import random

    import numpy as np
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def _call(fn, args, seed):
    _seed(seed)
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001
        return None, e


def _exc(e) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:100]}"


def run_one(t: TestFn, ns: dict) -> dict:
    import inspect

    import torch
    import torch._dynamo

    import trident

    fn, skip = (None, t.skip) if t.skip else _make_fn(t, ns)
    res = {"key": t.key, "owner": t.owner, "lineno": t.lineno, "notes": list(t.notes)}
    if skip:
        return {**res, "cls": "skipped", "detail": skip, "compile": "-"}
    nargs = len(inspect.signature(fn).parameters)
    res["nargs"] = nargs
    seed = int(hashlib.sha256(t.key.encode()).hexdigest()[:8], 16)
    tf = trident.jit(fn)
    calls = []
    eager_warnings: list[str] = []
    internal = []
    for k, shape in enumerate(SHAPES):
        base = _randn(shape, nargs, seed + k)
        args_e = [a.clone() for a in base]
        args_t = [a.clone() for a in base]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out_e, exc_e = _call(fn, args_e, seed + 100 + k)
        before = trident.stats(tf)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out_t, exc_t = _call(tf, args_t, seed + 100 + k)
        after = trident.stats(tf)
        for w in caught:
            msg = str(w.message)
            if issubclass(w.category, RuntimeWarning) and "runs eagerly" in msg:
                eager_warnings.append(msg.split("eagerly", 1)[-1].lstrip(" :"))
        eager_versions = {p["version"] for p in after["eager_paths"]
                          if p.get("version") is not None}
        hit = next((i for i, (a, b) in enumerate(zip(before["hits"], after["hits"]))
                    if b > a), None)
        call = {"shape": shape, "native_hit": after["misses"] == before["misses"]
                and hit is not None and hit not in eager_versions,
                "captured": after["captures"] > before["captures"]}
        if exc_e is not None or exc_t is not None:
            if exc_e is None:
                call["problem"] = ("error", f"call {k + 1}: Trident raised {_exc(exc_t)}")
            elif exc_t is None:
                call["problem"] = ("mismatch", f"call {k + 1}: eager raised {_exc(exc_e)}, "
                                               + "Trident returned a result")
            elif type(exc_e) is not type(exc_t):
                call["problem"] = ("error", f"call {k + 1}: Trident raised {_exc(exc_t)}, "
                                            + f"eager {_exc(exc_e)}")
            call["eager_raised"] = exc_e is not None and _exc(exc_e)
        else:
            try:
                compare(out_e, out_t)
                for i, (a, b) in enumerate(zip(args_e, args_t)):
                    compare(a, b, f"argument {i} after the call")
                al_e, al_t = aliasing(out_e, args_e), aliasing(out_t, args_t)
                for path in al_e:
                    if al_e[path] != al_t.get(path):
                        raise Diff(f"{path}: aliasing {al_t.get(path)}, eager {al_e[path]}")
            except Diff as d:
                call["problem"] = ("mismatch", f"call {k + 1} ({shape[0]}x{shape[1]}): {d}")
        calls.append(call)
        del out_e, out_t
    st = trident.stats(tf)
    for p in st["eager_paths"]:
        if "internal error" in p["reason"]:
            internal.append(p["reason"])
    res.update(calls=calls, captures=st["captures"], versions=st["versions"],
               eager_paths=[p["reason"] for p in st["eager_paths"]],
               runs_eagerly=st["runs_eagerly"], fallback_reason=st["fallback_reason"],
               internal_errors=internal)
    res["compile"] = _fullgraph(fn, nargs, seed, calls[0].get("eager_raised"))
    torch._dynamo.reset()
    return {**res, **classify(res, calls, st, eager_warnings)}


def classify(res, calls, st, eager_warnings) -> dict:
    problems = [c["problem"] for c in calls if "problem" in c]
    for kind in ("mismatch", "error"):
        found = [d for k, d in problems if k == kind]
        if found:
            return {"cls": kind, "detail": "; ".join(found)}
    if calls[0].get("eager_raised"):
        return {"cls": "eager raises", "detail": f"both raise {calls[0]['eager_raised']}"}
    if st["runs_eagerly"]:
        return {"cls": "fallback", "detail": st["fallback_reason"]}
    if eager_warnings or st["eager_paths"]:
        reasons = [p["reason"] for p in st["eager_paths"]] or eager_warnings
        return {"cls": "eager path", "detail": "; ".join(dict.fromkeys(reasons))}
    if not calls[1]["native_hit"]:
        return {"cls": "no hit", "detail": "call 2 (same shape, fresh inputs) missed"}
    extra = "" if calls[3]["native_hit"] else "call 4 (4x10) was not a native hit"
    return {"cls": "native", "detail": extra}


def _fullgraph(fn, nargs, seed, eager_raised) -> str:
    import torch
    import torch._dynamo

    torch._dynamo.reset()
    args = _randn(SHAPES[0], nargs, seed)
    opt = torch.compile(fn, fullgraph=True, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, exc = _call(opt, args, seed + 100)
    if exc is None:
        return "yes"
    if eager_raised:
        return "eager raises"
    return "no"


def worker(path: str, keys: list[str], results: str, progress: str) -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)
    tree, tests = extract(path)
    ns, _ = build_namespace(path, tree)
    tests = expand(tests, ns)
    by_key = {t.key: t for t in tests}
    for key in keys:
        with open(progress, "a") as f:
            f.write(key + "\n")
            f.flush()
            os.fsync(f.fileno())
        t0 = time.perf_counter()
        try:
            r = run_one(by_key[key], ns)
        except Exception as e:  # noqa: BLE001 - a harness problem: say so, go on
            r = {"key": key, "cls": "error", "compile": "?",
                 "detail": f"harness: {_exc(e)}", "trace": traceback.format_exc()[-2000:]}
        r["seconds"] = round(time.perf_counter() - t0, 2)
        with open(results, "a") as f:
            f.write(json.dumps(r, default=str) + "\n")


# -- parent ---------------------------------------------------------------------------------

def run_all(path: str, keys: list[str], chunk: int, timeout: float, log,
            persist: bool = False) -> dict:
    """Run `keys` in worker subprocesses; a function whose worker died (or hung) is a crash."""
    tmp = Path(tempfile.mkdtemp(prefix="dynamo_tests_"))
    env = dict(os.environ)
    if not persist:
        # Call 1 must capture: a version an earlier run persisted would serve it from disk.
        env["TRIDENT_CACHE"] = "off"
    results: dict = {}
    todo = list(keys)
    n = 0
    while todo:
        batch, todo = todo[:chunk], todo[chunk:]
        n += 1
        res_file, prog_file = tmp / f"results_{n}.jsonl", tmp / f"progress_{n}.txt"
        cmd = [sys.executable, __file__, "--worker", "--tests", path,
               "--results", str(res_file), "--progress", str(prog_file), "--keys",
               ",".join(batch)]
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True, env=env)
        last, last_t, killed = None, time.monotonic(), False
        while proc.poll() is None:
            time.sleep(0.5)
            started = prog_file.read_text().split() if prog_file.exists() else []
            cur = started[-1] if started else None
            if cur != last:
                last, last_t = cur, time.monotonic()
            elif time.monotonic() - last_t > timeout:
                os.killpg(proc.pid, 9)
                proc.wait()
                killed = True
        done = {}
        if res_file.exists():
            for line in res_file.read_text().splitlines():
                r = json.loads(line)
                done[r["key"]] = r
        results.update(done)
        started = prog_file.read_text().split() if prog_file.exists() else []
        dead = [k for k in started if k not in done]
        for k in dead:
            why = (f"no result after {timeout:.0f} s (killed)" if killed else
                   f"worker exited with status {proc.returncode}")
            results[k] = {"key": k, "cls": "crash", "detail": why, "compile": "?"}
        rest = [k for k in batch if k not in results]
        todo = rest + todo
        print(f"  {len(results)}/{len(keys)} done", file=sys.stderr, flush=True)
    return results


def _md(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def report(a, tests, results, failed_stmts, seconds) -> str:
    import torch

    order = [t.key for t in tests if t.key in results]
    counts = collections.Counter(results[k]["cls"] for k in order)
    ran = [k for k in order if results[k]["cls"] != "skipped"]
    fullgraph = sum(results[k].get("compile") == "yes" for k in ran)
    native = counts["native"]
    both = sum(results[k].get("compile") == "yes" and results[k]["cls"] == "native"
               for k in ran)
    fg_not_native = [k for k in ran if results[k].get("compile") == "yes"
                     and results[k]["cls"] != "native"]
    sha = hashlib.sha256(Path(a.tests).read_bytes()).hexdigest()[:16]
    bar = counts["mismatch"] == 0 and counts["crash"] == 0
    command = f"python benchmarks/dynamo_tests.py --tests <path> --source \"{a.source}\""
    if a.only or a.limit:
        command += f" (run with `{' '.join(sys.argv[1:])}`)"
    lines = ["# PyTorch's Dynamo function tests against Trident (CPU)", "",
             f"- date: {datetime.date.today().isoformat()}",
             f"- commit: {report_info.commit()}",
             f"- machine: {report_info.machine(torch)}",
             f"- test file: `test/dynamo/test_functions.py`, {a.source} (sha256 {sha}...), "
             + "read from a path outside the repository",
             f"- command: `{command}`",
             f"- run time: {seconds:.0f} s; calls per function: 10x10 (capture), 10x10 (hit), "
             + "6x10 (new shape), 4x10 (dynamic hit), eager and Trident each on its own copy",
             "", "## Summary", "",
             f"{len(order)} `make_test` functions, {len(ran)} run.", "",
             "| class | functions |", "|---|---:|"]
    lines += [f"| {c} | {counts[c]} |" for c in CLASSES
              if counts[c] or c in ("native", "mismatch", "crash", "error")]
    cmp = ">=" if native >= fullgraph else "<"
    lines += ["",
              f"- issue 32's bar, 0 mismatches and 0 crashes: **{'met' if bar else 'not met'}** "
              + f"({counts['mismatch']} mismatches, {counts['crash']} crashes, "
              + f"{counts['error']} errors).",
              f"- native on {native} functions; torch.compile(fullgraph=True, backend=\"eager\") "
              + f"compiles {fullgraph} of the {len(ran)} run without a graph break: native "
              + f"{cmp} fullgraph. Native and fullgraph both: {both}."]
    if fg_not_native:
        lines.append("- fullgraph but not native: " + ", ".join(
            f"`{k}` ({results[k]['cls']})" for k in fg_not_native))
    if failed_stmts:
        lines += ["", ("Module-level statements of the test file that do not run here (their "
                       "names stay undefined; functions needing them are skipped):"), ""]
        lines += [f"- {s}" for s in failed_stmts]
    lines += ["", "## Per function", "",
              "| # | function | where | args | class | torch.compile fullgraph | s | detail |",
              "|---:|---|---|---:|---|---|---:|---|"]
    for i, k in enumerate(order, 1):
        r = results[k]
        detail = r.get("detail") or ""
        notes = [n for n in r.get("notes", []) if n]
        if notes:
            detail = (detail + "; " if detail else "") + "; ".join(notes)
        lines.append(f"| {i} | `{k}` | {r.get('owner', '')} | {r.get('nargs', '')} | "
                     f"{r['cls']} | {r.get('compile', '')} | {r.get('seconds', '')} | "
                     f"{_md(detail)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", required=True, help="path to PyTorch's test_functions.py")
    ap.add_argument("--source", default="source commit unknown",
                    help="where the file comes from, for the report")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latest/dynamo_tests.md"))
    ap.add_argument("--only", default=None, help="comma-separated function names (or keys)")
    ap.add_argument("--limit", type=int, default=None, help="the first N functions only")
    ap.add_argument("--chunk", type=int, default=40, help="functions per worker process")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per function")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--persist", action="store_true",
                    help="keep TRIDENT_CACHE as it is (by default the workers run with "
                         "TRIDENT_CACHE=off, so that call 1 captures rather than loads a "
                         "version an earlier run persisted)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--keys", default="", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--progress", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.tests, [k for k in a.keys.split(",") if k], a.results, a.progress)
        return
    sys.path.insert(0, str(ROOT))
    tree, tests = extract(a.tests)
    ns, failed_stmts = build_namespace(a.tests, tree)
    tests = expand(tests, ns)
    if a.only:
        want = set(a.only.split(","))
        tests = [t for t in tests if t.key in want or t.name in want]
    if a.limit:
        tests = tests[:a.limit]
    log_path = Path(tempfile.mkstemp(prefix="dynamo_tests_", suffix=".log")[1])
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        results = run_all(a.tests, [t.key for t in tests], a.chunk, a.timeout, log,
                          a.persist)
    seconds = time.perf_counter() - t0
    text = report(a, tests, results, failed_stmts, seconds)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)
    if a.json:
        Path(a.json).write_text(json.dumps([results[t.key] for t in tests if t.key in results],
                                           indent=1, default=str))
    counts = collections.Counter(r["cls"] for r in results.values())
    print(", ".join(f"{c}: {counts[c]}" for c in CLASSES if counts[c]), file=sys.stderr)
    print(f"report: {a.out}; worker log: {log_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
