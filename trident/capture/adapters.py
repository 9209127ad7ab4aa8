"""What Trident teaches Dynamo while it captures: library idioms Dynamo
refuses but whose meaning is plain.

Each adapter is an entry of `ADAPTERS`: the torch or Triton attribute it
patches (module + attribute path), the versions it was written against,
and how it makes the replacement from the original.  `active(state)` (one
capture) sets them while any capture runs: the first capture to start
applies those that apply, under a lock, and the last to end restores
exactly what was set (also when applying failed halfway).  A replacement
acts only for a thread that is capturing; other calls reach the original.
An adapter records in `state.extra_guards` what the version must check at
call time, so nothing it assumes goes unguarded.

* **Disabled log calls.**  `logger.debug(...)` inside the function (FlagGems
  logs every operator call) makes Dynamo stop ("logging.Logger method not
  supported").  When the logger is not enabled for that level at capture,
  the call has no effect, so the version drops it and guards that the
  logger at that source is still not enabled for the level
  (`ir.LoggerQuiet`, checked natively from the logger's own cache).  An
  enabled logger is left to Dynamo, which refuses: the call falls back to
  eager and logs as it should.
* **Kernel-entry wrappers.**  A `triton.KernelInterface` subclass whose
  `kernel[grid](*args)` means exactly `kernel.fn[grid](*args)` (FlagGems'
  `LibEntry`, a per-argument-key cache in front of Triton's own) is traced
  as the kernel it wraps.  The version guards the wrapper's identity and
  the identity of its `fn` attribute.  Register others with
  `register_kernel_wrapper(cls, attr)`.
* **Bare `@triton.heuristics`** (not under `@triton.autotune`): Dynamo only
  applies heuristics inside an autotuner.  Trident evaluates each heuristic
  on the traced arguments at the call (constants, as Heuristics.run would
  compute them) and launches the kernel it wraps with those keyword
  arguments; a heuristic over a dynamic size makes the capture static.
* **`torch._prims_common.elementwise_dtypes`** (FlagGems' type promotion) is
  computed at trace time from the tensors' dtypes and ranks and the scalars'
  types (all fixed by the version's guards): torch 2.11 otherwise puts it in
  the graph and fails on its dtype result.
* **A path with no tensor operation**: Dynamo skips the backend for it;
  Trident hands the (empty) graph to its recorder anyway, so the path is a
  version that returns inputs and constants under its guards.
* **Grids longer than three** (`kernel[(M, n, 1, 1)]`): Triton's launcher
  uses the first three entries and ignores the rest; Dynamo refuses them, so
  the capture keeps the first three.
* **`math.prod` over a generator** (FlagGems' generated wrappers) is traced
  as the same product in Python; torch 2.11 cannot call the builtin on one.
* **Tensor-like wrappers passed to kernels** (FlagGems' `StridedBuffer`):
  traced as a subclass that also carries a tensor with the same data
  pointer and dtype, which is what the launch receives.
* **Dynamo's shape-guard code is not built.**  Dynamo's `SHAPE_ENV` guard
  builder renders the shape env's guards as Python (produce_guards, a CSE
  pass, a compiled lambda), twice per capture under a guard filter: 37 of
  the 86 s cProfile counted over three FlagGems cumsum misses on the H100,
  whose size guards come from `triton.next_power_of_2` over a symbolic size.  Trident takes
  the same guards from the shape env (`guard_record.shape_exprs`) and never
  runs Dynamo's guard manager, so while it captures the builder only freezes
  the shape env.  No guard is dropped: this removes Dynamo's copy only.
* **Guards are built once.**  Under a guard filter Dynamo builds every
  guard, filters, then builds the kept ones again; Trident's filter keeps
  them all, so the second build returns the first's result.
* **Globals that are not their named module's** (FlagGems' generated
  wrappers: a module loaded from a file whose globals are then updated with
  another module's, `__name__` included, or whose `__name__` is in no
  `sys.modules`).  Dynamo would guard them as attributes of
  `sys.modules[__name__]`, another object (or fail to import it); Trident
  guards them as items of the function's own globals dict (Dynamo's rule for
  a scope with no name): through `<function's source>.__globals__` where
  Dynamo knows how it reached the function (or an enclosing frame's, for a
  generator expression), else through an alias that lives only while the
  capture runs, the version then reading the dict as a constant.
* **A Python bool in symbolic arithmetic** (torch < 2.13; seen on 2.12).  `SymInt +
  False` (`sum(s == -1 for s in x.size())` over a dynamic size and a static
  one: einops' unpack) makes the sympy expression `Add(0, false)`, which
  sympy folds to `false`, so `... == 0` is decided False at trace time and
  the version takes the other branch, unguarded.  For `+ - *` on
  SymInt/SymFloat/SymBool a bool operand is taken as the int it is (torch
  2.13's own rule), as Python computes it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import logging
import math
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.nodes import Frozen, frozen

log = logging.getLogger("trident")

# Known wrappers: (module, class name) -> the attribute holding the kernel.
_WRAPPERS: dict = {("flag_gems.utils.libentry", "LibEntry"): "fn"}
_WRAPPER_TYPES: dict = {}

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
           "fatal": logging.CRITICAL, "exception": logging.ERROR}


def register_kernel_wrapper(cls: type, attr: str = "fn") -> None:
    """Trace instances of `cls` as the Triton kernel in `instance.<attr>`.

    Only for wrappers whose launch `w[grid](*args, **kw)` is exactly
    `getattr(w, attr)[grid](*args, **kw)`."""
    _WRAPPER_TYPES[cls] = attr


def _wrapped_attr(value):
    t = type(value)
    attr = _WRAPPER_TYPES.get(t)
    if attr is None:
        attr = _WRAPPERS.get((t.__module__, t.__name__))
    return attr


# Tensor-like wrapper classes -> a traceable subclass factory (see _strided_buffer).
_TENSOR_WRAPPERS: dict = {("flag_gems.utils.tensor_wrapper", "StridedBuffer"):
                          "_strided_buffer"}
_POLYFILLS: dict = {}


def _polyfill_for(value):
    if not isinstance(value, type):
        return None
    if value in _POLYFILLS:
        return _POLYFILLS[value]
    maker = _TENSOR_WRAPPERS.get((value.__module__, value.__name__))
    if maker is None:
        return None
    cls = globals()[maker](value)
    _POLYFILLS[value] = cls
    return cls


def _strided_buffer(real: type) -> type:
    """FlagGems' StridedBuffer reinterprets a tensor (shape, strides, dtype,
    element offset) and is passed to Triton kernels, which read only its
    `data_ptr()` and `dtype`.  Dynamo cannot pass such an object to a
    kernel, so while tracing the class is this subclass: the same attributes
    and methods, plus `_trident_arg`, a tensor with the same data pointer and
    dtype that the launch receives instead (the wrapper's shape and strides
    reach the kernel as separate integer arguments)."""
    import torch

    class TracedStridedBuffer(real):
        def __init__(self, base, shape=None, strides=None, dtype=None, offset=0):
            self._base = base
            self.dtype = dtype or base.dtype
            self.offset = offset
            self.shape = tuple(shape if shape is not None else base.shape)
            self._strides = tuple(strides if strides is not None else base.stride())
            self.device = base.device
            self.ndim = len(self.shape)
            if self.dtype.itemsize != base.dtype.itemsize:
                raise NotImplementedError("StridedBuffer with a dtype of another size")
            t = base if self.dtype == base.dtype else base.view(self.dtype)
            if offset != 0:
                # the same storage, `offset` elements further (as_strided
                # keeps t's storage offset; storage_offset() does not trace)
                t = torch.as_strided(t, (offset + 1,), (1,))[offset:]
            self._trident_arg = t

    TracedStridedBuffer.__qualname__ = TracedStridedBuffer.__name__ = real.__name__
    return TracedStridedBuffer


@dataclass
class State:
    extra_guards: list = field(default_factory=list)  # ("logger_quiet", source, level)
    empty_graph: object = None  # called with the OutputGraph when Dynamo skips the backend
    backend_calls: object = lambda: 0  # how many times the recorder ran
    # TRIDENT_POW2_BUCKETS for this capture (False: the function's later captures keep
    # next_power_of_2 symbolic, see scm.SpecializationCache._pow2_twin), and whether the
    # trace met such a function while bucketing
    pow2_buckets: bool = True
    pow2_bucketed: bool = False


# -- the registry ------------------------------------------------------------------------------


@frozen
class Adapter(Frozen):
    """One patch of a torch or Triton internal, set only while a capture runs (`active`).

    `module`.`target` (a dotted attribute path inside the module) is replaced by
    `make(original)`, which acts only for a thread that is capturing (`_current()` is its
    capture's `_Context`).  It applies where the installed version of `package` is in
    [`first`, `end`) (major.minor), the versions its patch was written against; elsewhere it
    is left out.  `own`: patch only a class that
    defines the attribute itself (else the adapter is left out).  `optional`: a module that
    does not import (Triton on a CPU-only install) leaves the adapter out; otherwise a
    missing module or attribute is an error, raised before the capture runs."""

    name: str
    module: str
    target: str
    make: Callable
    package: str = "torch"
    first: str = "2.11"
    end: str = "2.15"
    own: bool = False
    optional: bool = False


class _Context:
    """What one capture's adapters share: its State, the user's autotuners whose call Dynamo
    is tracing, and the globals aliases it added (removed when it ends)."""

    def __init__(self, state: State):
        self.state = state
        self.tuners: list = []
        self.aliases: dict = {}  # id(globals) -> (scope, name, globals)


# The patches are process-wide while any thread captures: the first capture to start applies
# them, the last to end restores them.  Each replacement acts only for a thread that is
# capturing (its innermost capture's _Context); any other call goes to the original.
_LOCK = threading.Lock()
_APPLIED: list = []  # (owner, attr, had its own value, that value, replacement), in order
_USERS = 0
_TLS = threading.local()
_ALIAS_IDS = itertools.count()


def _current():
    """This thread's innermost capture, or None."""
    stack = getattr(_TLS, "stack", None)
    return stack[-1] if stack else None


@functools.lru_cache(maxsize=None)
def _version(package: str) -> tuple | None:
    """(major, minor) of an installed package, or None (not installed, or no version)."""
    try:
        mod = importlib.import_module(package)
    except ImportError:
        return None
    text = getattr(mod, "__version__", None)
    if not isinstance(text, str):
        return None
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, p))
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts)


def _applies(a: Adapter) -> bool:
    v = _version(a.package)
    first = tuple(int(x) for x in a.first.split("."))
    end = tuple(int(x) for x in a.end.split("."))
    return v is not None and first <= v < end


def _owner(a: Adapter):
    """(object holding the attribute, attribute name), or None where the adapter is left
    out."""
    try:
        obj = importlib.import_module(a.module)
    except ImportError:
        if a.optional:
            return None
        raise
    *path, attr = a.target.split(".")
    for part in path:
        obj = getattr(obj, part)
    if a.own and attr not in vars(obj):
        return None
    if not hasattr(obj, attr):
        raise AttributeError(f"trident adapter {a.name!r}: {a.module}.{a.target} is missing")
    return obj, attr


def _only_in_capture(replacement, orig):
    @functools.wraps(orig)
    def patched(*args, **kwargs):
        if _current() is None:
            return orig(*args, **kwargs)
        return replacement(*args, **kwargs)

    return patched


def _apply() -> None:
    """Set every adapter that applies to the installed versions; on an error, put back what
    was set and re-raise."""
    try:
        for a in ADAPTERS:
            if not _applies(a):
                continue
            found = _owner(a)
            if found is None:
                continue
            owner, attr = found
            own = vars(owner)
            had, previous = attr in own, own.get(attr)
            orig = getattr(owner, attr)
            replacement = _only_in_capture(a.make(orig), orig)
            setattr(owner, attr, replacement)
            _APPLIED.append((owner, attr, had, previous, replacement))
    except BaseException:
        _restore()
        raise


def _restore() -> None:
    """Put back, in reverse order, exactly what _apply set.  A patch someone else replaced
    meanwhile is left as they set it."""
    while _APPLIED:
        owner, attr, had, previous, replacement = _APPLIED.pop()
        if vars(owner).get(attr) is not replacement:
            log.debug("trident: %r.%s was replaced during a capture; left as it is", owner, attr)
        elif had:
            setattr(owner, attr, previous)
        else:
            delattr(owner, attr)


@contextlib.contextmanager
def active(state: State):
    """The adapters, for one capture on this thread (nested captures stack).  On the way
    out, an exception included, the globals aliases the capture added are removed and, if
    no other capture runs, every patch is put back."""
    global _USERS
    with _LOCK:
        if _USERS == 0:
            _apply()
        _USERS += 1
    ctx = _Context(state)
    stack = _TLS.__dict__.setdefault("stack", [])
    stack.append(ctx)
    try:
        yield state
    finally:
        stack.pop()
        for scope, name, g in ctx.aliases.values():
            if scope.get(name) is g:
                del scope[name]
        with _LOCK:
            _USERS -= 1
            if _USERS == 0:
                _restore()


# -- the adapters ------------------------------------------------------------------------------
# Entries that patch the same attribute chain: each wraps the one before it, so a later entry
# sees a value first.  Their conditions are disjoint.


def _wrap_bare_heuristics(orig):
    def _wrap(self, value):
        try:
            from triton.runtime.autotuner import Heuristics
        except ImportError:
            Heuristics = ()
        if isinstance(value, Heuristics) and self.source is not None:
            return _wrap_kernel_entry(self, value, None)
        return orig(self, value)

    return _wrap


def _wrap_elementwise_dtypes(orig):
    def _wrap(self, value):
        if value is _elementwise_dtypes() and self.source is not None:
            # torch 2.11 puts this dtype computation in the graph and then
            # cannot index its (dtype) result; its Python body traces fine.
            from torch._dynamo.guards import GuardBuilder
            from torch._dynamo.variables.misc import LambdaVariable

            self.install_guards(GuardBuilder.ID_MATCH)
            return LambdaVariable(_traced_elementwise_dtypes)
        return orig(self, value)

    return _wrap


def _wrap_math_prod(orig):
    def _wrap(self, value):
        if value is math.prod and self.source is not None:
            # torch 2.11 cannot pass a generator to the builtin; the same
            # product as Python code traces (FlagGems' generated wrappers).
            from torch._dynamo.guards import GuardBuilder
            from torch._dynamo.variables.functions import UserFunctionVariable

            self.install_guards(GuardBuilder.ID_MATCH)
            return UserFunctionVariable(_prod)
        return orig(self, value)

    return _wrap


def _bool_as_int(orig):
    def op(self, other):
        # torch < 2.13 promotes a SymBool operand of + - * to an int but keeps a Python
        # bool one, which then becomes sympy's `true`/`false` inside Add/Mul.
        if type(other) is bool:
            other = int(other)
        return orig(self, other)

    return op


# Functions computing the smallest power of two >= n, by (module, qualified name): Triton's
# block-size helper (a plain function, or a `ConstexprFunction` around one in Triton 3.5+).
_POW2_FUNCS: set = {("triton", "next_power_of_2")}


def _is_pow2_func(value) -> bool:
    try:
        key = (getattr(value, "__module__", None), getattr(value, "__qualname__", None))
        return key in _POW2_FUNCS and callable(value)
    except Exception:  # noqa: BLE001 - an object whose attributes raise is not one
        return False


def _next_power_of_2(n):
    """`triton.next_power_of_2(n)` as Dynamo traces it cheaply (TRIDENT_POW2_BUCKETS=1).
    Triton's bit arithmetic over a dynamic size makes a sympy expression whose guards cost
    seconds to simplify (FlagGems' cumsum); these comparisons give the same value for every
    int, guarded by the size's power-of-two range.  No defaults, no globals: the traced
    function stands at the original's source."""
    # Anything but an int (a float, where eager raises Triton's TypeError; a tensor, which
    # Triton's arithmetic takes elementwise) and sizes past 2**62: Triton's own arithmetic
    # (exact below 2**64).  A SymInt is an int here: Dynamo answers isinstance by its type.
    if not isinstance(n, int) or n > 4611686018427387904:
        n -= 1
        n |= n >> 1
        n |= n >> 2
        n |= n >> 4
        n |= n >> 8
        n |= n >> 16
        n |= n >> 32
        return n + 1
    if n <= 1:
        return 0 if n <= 0 else 1
    # binary search over the exponent: 6 comparisons (guards) for any size, where a doubling
    # loop made one per power below the size (20 for a million elements)
    lo = 1
    hi = 62
    while lo < hi:
        mid = (lo + hi) // 2
        if n <= (1 << mid):
            hi = mid
        else:
            lo = mid + 1
    return 1 << lo


def _tile_sizes(max_tile_size, *sizes):
    """A tile per size, from the last: `min(cap, next_power_of_2(size))`, the cap then divided
    by the tile (FlagGems' `heuristics_for_tile_size`, as `_CAPPED_POW2_FUNCS` verifies),
    traced cheaply (TRIDENT_POW2_BUCKETS=1).  Where the power reaches the cap, the tile is
    the cap for every larger size: one guard (`size > q/2`, q the cap's power of two) instead
    of a power-of-two range, so a version serves all sizes past the cap (FlagGems' pointwise
    operators: a flattened size above 256).  Below it, the range of `_next_power_of_2`
    (binary search over the exponent).  Anything but ints takes Triton's arithmetic.  No
    globals, no defaults (see _next_power_of_2)."""
    ndim = len(sizes)
    tiles = [0] * ndim
    for i in range(ndim - 1, -1, -1):
        n = sizes[i]
        cap = max_tile_size
        if isinstance(n, int) and isinstance(cap, int) and 1 <= cap <= 4611686018427387904 \
                and n <= 4611686018427387904:
            e = 0
            while (1 << e) < cap:
                e += 1
            if n > (1 << e) >> 1:
                tile = cap  # next_power_of_2(n) >= 2**e >= cap
            elif n <= 1:
                tile = 0 if n <= 0 else 1
            else:  # 1 < n <= 2**(e-1) < cap: the power itself, by its range
                lo = 1
                hi = e - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    if n <= (1 << mid):
                        hi = mid
                    else:
                        lo = mid + 1
                tile = 1 << lo
        else:
            p = n - 1
            p |= p >> 1
            p |= p >> 2
            p |= p >> 4
            p |= p >> 8
            p |= p >> 16
            p |= p >> 32
            tile = min(cap, p + 1)
        tiles[i] = tile
        max_tile_size = max(1, max_tile_size // tile)
    return tuple(tiles)


# Functions that are `_tile_sizes`, by (module, qualified name).  A function found under such
# a name is taken as that only if it gives the same tiles on a sample of caps and sizes
# (`_verified_polyfill`): a library that changed its heuristic is traced as it is.
_CAPPED_POW2_FUNCS: dict = {("flag_gems.utils.shape_utils", "heuristics_for_tile_size"):
                            _tile_sizes}
_polyfill_verdicts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _verified_polyfill(value):
    """The polyfill of `value` from _CAPPED_POW2_FUNCS, if its results match `value`'s."""
    try:
        key = (getattr(value, "__module__", None), getattr(value, "__qualname__", None))
        poly = _CAPPED_POW2_FUNCS.get(key)
    except Exception:  # noqa: BLE001 - an object whose attributes raise is not one
        return None
    if poly is None or not callable(value):
        return None
    try:
        ok = _polyfill_verdicts.get(value)
    except TypeError:  # not weak-referenceable
        return None
    if ok is None:
        ok = _same_tiles(value, poly)
        _polyfill_verdicts[value] = ok
    return poly if ok else None


_SAMPLE_CAPS = (1, 2, 3, 64, 100, 512, 1024, 4096)
_SAMPLE_SIZES = (0, 1, 2, 3, 5, 63, 64, 65, 100, 255, 256, 257, 511, 512, 513, 1000, 4096,
                 65537, 10 ** 6, 2 ** 40 + 1)


def _same_tiles(real, poly) -> bool:
    small = (1, 3, 64, 100, 513, 4096)
    shapes = [(n,) for n in _SAMPLE_SIZES] + [(a, b) for a in small for b in small] + \
        [(2, 3, 5), (7, 1, 300), (1000, 1, 1)]
    def outcome(fn, cap, shape):
        try:
            return fn(cap, *shape)
        except Exception as e:  # noqa: BLE001 - a size 0 divides by a tile of 0 in both
            return type(e)

    return all(outcome(real, cap, shape) == outcome(poly, cap, shape)
               for cap in _SAMPLE_CAPS for shape in shapes)


def _wrap_pow2(orig):
    def _wrap(self, value):
        if self.source is not None:
            poly = _next_power_of_2 if _is_pow2_func(value) else _verified_polyfill(value)
            if poly is not None:
                from .. import config

                state = _current().state
                if config.pow2_buckets() and state.pow2_buckets:
                    state.pow2_bucketed = True
                    from torch._dynamo.guards import GuardBuilder
                    from torch._dynamo.variables.functions import UserFunctionVariable

                    self.install_guards(GuardBuilder.ID_MATCH)  # on the real function
                    return UserFunctionVariable(poly)
        return orig(self, value)

    return _wrap


def _wrap_tensor_wrappers(orig):
    def _wrap(self, value):
        poly = _polyfill_for(value)
        if poly is not None and self.source is not None:
            from torch._dynamo.guards import GuardBuilder
            from torch._dynamo.variables.user_defined import UserDefinedClassVariable

            self.install_guards(GuardBuilder.ID_MATCH)  # on the real class
            return UserDefinedClassVariable(poly)
        return orig(self, value)

    return _wrap


def _wrap_kernel_wrappers(orig):
    def _wrap(self, value):
        attr = _wrapped_attr(value)
        if attr is not None and self.source is not None:
            return _wrap_kernel_entry(self, value, attr)
        return orig(self, value)

    return _wrap


def _call_track_autotuner(orig):
    def call_triton_kernel(self, variable, args, kwargs, tx):
        k = variable.kernel
        if _is_autotuner(k) and not hasattr(k, "_trident_orig_autotuner"):
            _current().tuners.append(k)
            try:
                return orig(self, variable, args, kwargs, tx)
            finally:
                _current().tuners.pop()
        return orig(self, variable, args, kwargs, tx)

    return call_triton_kernel


def _call_apply_heuristics(orig):
    def call_triton_kernel(self, variable, args, kwargs, tx):
        variable, kwargs = _apply_heuristics(self, variable, args, kwargs, tx)
        return orig(self, variable, args, kwargs, tx)

    return call_triton_kernel


def _call_kernel_args(orig):
    def call_triton_kernel(self, variable, args, kwargs, tx):
        args = [_as_kernel_arg(tx, a) for a in args]
        kwargs = {k: _as_kernel_arg(tx, v) for k, v in kwargs.items()}
        return orig(self, variable, args, kwargs, tx)

    return call_triton_kernel


def _check_grid(orig):
    def check_grid(self, grid):
        # Triton's launcher reads grid[0:3] and ignores the rest (FlagGems
        # passes (M, n, 1, 1)); Dynamo refuses a grid of rank > 3.
        g = orig(self, grid)
        if isinstance(g, tuple) and len(g) > 3:
            g = g[:3]
        return g

    return check_grid


def _unpack_symbolic_heuristic(orig):
    def maybe_unpack_heuristic_result(self, result):
        # A heuristic over a symbolic size (FlagGems' `M % TILE_M == 0`): its
        # value for this call becomes a constant of the version under a shape
        # guard (Dynamo refuses it), so every size of the version agrees.
        from torch._dynamo.variables.tensor import SymNodeVariable

        if isinstance(result, SymNodeVariable):
            return result.evaluate_expr()
        return orig(self, result)

    return maybe_unpack_heuristic_result


def _autotune(orig):
    def autotune(*a, **kw):
        # Dynamo rebuilds the user's autotuner (heuristics folded into its
        # configs, key=[]); remember which one, so the SCM can let the user's
        # own tuner choose the config per call (ir.launch.Resolver).
        deco = orig(*a, **kw)

        def wrap(fn):
            tuner = deco(fn)
            tuners = _current().tuners
            if tuners:
                tuner._trident_orig_autotuner = tuners[-1]
            return tuner

        return wrap

    return autotune


def _quiet_log_calls(orig):
    def call_method(self, tx, name, args, kwargs):
        level = _LEVELS.get(name)
        lg = self.value
        if level is None and name == "log" and args and args[0].is_python_constant():
            lv = args[0].as_python_constant()
            level = lv if isinstance(lv, int) else None
        if (level is not None and self.source is not None and not tx.export
                and type(lg).isEnabledFor is logging.Logger.isEnabledFor
                and not lg.isEnabledFor(level)):
            from torch._dynamo.variables import ConstantVariable

            _current().state.extra_guards.append(("logger_quiet", self.source, level))
            return ConstantVariable.create(None)
        return orig(self, tx, name, args, kwargs)

    return call_method


def _empty_graph(orig):
    from torch._dynamo.utils import count_calls

    def compile_subgraph(self, tx, *a, **kw):
        state = _current().state
        seen = state.backend_calls()
        out = orig(self, tx, *a, **kw)
        if (state.empty_graph is not None and state.backend_calls() == seen
                and count_calls(self.graph) == 0):
            state.empty_graph(self)
        return out

    return compile_subgraph


def _shape_env_unbuilt(orig):
    def shape_env(self, guard):
        # Dynamo's builder turns the shape env's guards into Python code (produce_guards,
        # then a CSE pass over each expression and a compiled lambda), twice per capture
        # when a guard filter is given.  Trident reads the same guards from the shape env
        # itself (guard_record.shape_exprs, in its guard filter) and never runs Dynamo's
        # guard manager (the code's cache is reset after the capturing call), so the
        # builder only freezes the shape env, as it would after building.
        try:
            og = self.check_fn_manager.output_graph
            shape_env, export = og.shape_env, og.export
        except AttributeError:  # not the torch this was written against
            return orig(self, guard)
        if shape_env is not None and not export:
            shape_env.freeze()
        return None

    return shape_env


def _guards_built_once(orig):
    def build_guards(self, sorted_guards, *args, **kwargs):
        # Under a guard filter, Dynamo builds every guard, hands the entries to the filter,
        # then builds the kept ones again.  Trident's filter keeps them all (it records
        # them): the second build of the same guards returns the first's builder and guard
        # manager, which Trident never runs anyway.
        save_guards = args[3] if len(args) > 3 else kwargs.get("save_guards", False)
        key = [id(g) for g in sorted_guards]
        memo = self.__dict__.get("_trident_built")
        if memo is not None and memo[0] == key and not save_guards:
            return memo[1]
        out = orig(self, sorted_guards, *args, **kwargs)
        if not save_guards:
            self.__dict__["_trident_built"] = (key, out)
        return out

    return build_guards


def _foreign_globals(orig):
    def get_globals_source_and_value(self, name):
        # Dynamo names an inlined function's globals by their `__name__`
        # and guards them as attributes of sys.modules[__name__].  FlagGems'
        # generated modules copy another module's globals, `__name__`
        # included, so those guards would read a different module (and fail:
        # "module 'flag_gems.ops.gelu' has no attribute 'torch_device_fn'").
        # Others load a module from a file under a name that is not in sys.modules
        # (`_gen_module_rank_2`), which Dynamo would import and fail.  When
        # sys.modules[__name__] does not own these globals, guard them as a dict, as
        # Dynamo does for a scope with no name.
        g = self.f_globals
        modname = g.get("__name__")
        if not isinstance(modname, str) or modname.startswith("namedtuple_") \
                or "torch_package" in modname:
            return orig(self, name)
        mod = sys.modules.get(modname)
        if mod is not None and getattr(mod, "__dict__", None) is g:
            return orig(self, name)
        from torch._dynamo.source import AttrSource, DictGetItemSource, GlobalSource
        from torch._dynamo.variables import builder as B

        # Where Dynamo knows how it reached the function (FlagGems: an item of its
        # PointwiseDynamicFunction's `overloads`), its globals are that function's
        # `__globals__`: the version reads them through that path at each call, and a record
        # names them, and what they hold, by it (a new process finds them once the library
        # has generated its module again; persist.consts' "at" nodes).
        # A frame Dynamo made for code with no source of its own (a generator expression in
        # FlagGems' wrapper: `math.prod(... for size, tile_size in zip(...))`) takes the
        # globals path of the nearest enclosing frame with one.
        tx = self
        while tx is not None:
            funcvar = getattr(tx, "funcvar", None)
            fsrc = getattr(funcvar, "source", None)
            if fsrc is not None and getattr(getattr(funcvar, "fn", None), "__globals__",
                                            None) is g:
                src = AttrSource(fsrc, "__globals__")
                return g, B.VariableBuilder(self, src)(g), DictGetItemSource(src, name)
            tx = getattr(tx, "parent", None) if getattr(tx, "f_globals", None) is g else None
        # Otherwise a Trident-owned alias in the root frame's globals for this capture only (removed
        # by `active` on the way out), listed among the globals Dynamo installed: the
        # version's guards read the dict itself as a constant (guards.translate's
        # SourceConverter.installed), never the alias, and a record names that dict by the
        # module that owns it (persist.consts).
        og, ctx = self.output, _current()
        entry = ctx.aliases.get(id(g))
        if entry is None:
            alias = f"___trident_globals_{id(g)}_{next(_ALIAS_IDS)}"
            scope = og.global_scope
            if alias in scope:
                raise NotImplementedError(f"global alias {alias} is taken")
            scope[alias] = g
            entry = ctx.aliases[id(g)] = (scope, alias, g)
        og.installed_globals.add(entry[1])  # (a restarted trace has a new OutputGraph)
        src = GlobalSource(entry[1])
        return g, B.VariableBuilder(self, src)(g), DictGetItemSource(src, name)

    return get_globals_source_and_value


_DYNAMO = "torch._dynamo"
_HOP = "DynamoTritonHOPifier"
# Applied in this order (a later entry on the same attribute wraps the earlier one).
ADAPTERS: tuple = (
    Adapter("bare @triton.heuristics traced as its kernel", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_bare_heuristics),
    Adapter("elementwise_dtypes at trace time", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_elementwise_dtypes),
    Adapter("math.prod over a generator", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_math_prod),
    Adapter("next_power_of_2 as comparisons", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_pow2),
    Adapter("tensor-like wrappers traced as a subclass", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_tensor_wrappers),
    Adapter("kernel-entry wrappers traced as their kernel", f"{_DYNAMO}.variables.builder",
            "VariableBuilder._wrap", _wrap_kernel_wrappers),
    Adapter("the user's autotuner remembered", f"{_DYNAMO}.variables.functions",
            f"{_HOP}.call_triton_kernel", _call_track_autotuner),
    Adapter("bare @triton.heuristics applied at the call", f"{_DYNAMO}.variables.functions",
            f"{_HOP}.call_triton_kernel", _call_apply_heuristics),
    Adapter("tensor-like wrappers passed as their tensor", f"{_DYNAMO}.variables.functions",
            f"{_HOP}.call_triton_kernel", _call_kernel_args),
    Adapter("grids longer than three", f"{_DYNAMO}.variables.functions",
            f"{_HOP}.check_grid", _check_grid),
    Adapter("heuristics over a symbolic size", f"{_DYNAMO}.variables.functions",
            f"{_HOP}.maybe_unpack_heuristic_result", _unpack_symbolic_heuristic),
    Adapter("the user's autotuner remembered (Dynamo's rebuilt one)",
            "triton.runtime.autotuner", "autotune", _autotune,
            package="triton", first="3.4", end="4.0", optional=True),
    Adapter("disabled log calls dropped", f"{_DYNAMO}.variables.misc",
            "LoggingLoggerVariable.call_method", _quiet_log_calls),
    Adapter("a path with no tensor operation", f"{_DYNAMO}.output_graph",
            "OutputGraph.compile_subgraph", _empty_graph),
    Adapter("Dynamo's shape-guard code not built", f"{_DYNAMO}.guards",
            "GuardBuilder.SHAPE_ENV", _shape_env_unbuilt),
    Adapter("guards built once", f"{_DYNAMO}.guards", "CheckFunctionManager.build_guards",
            _guards_built_once),
    Adapter("globals that are not their named module's", f"{_DYNAMO}.symbolic_convert",
            "InliningInstructionTranslator.get_globals_source_and_value", _foreign_globals,
            own=True),
    *(Adapter(f"a bool operand of {cls}.{op} taken as an int", "torch", f"{cls}.{op}",
              _bool_as_int, end="2.13", own=True)
      for cls in ("SymInt", "SymFloat", "SymBool")
      for op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__")),
)


def _prod(iterable, **kw):
    """math.prod, as Python (traced by Dynamo).  No parameter defaults: the
    traced function stands at math.prod's source, whose defaults Dynamo
    would otherwise guard."""
    out = kw["start"] if "start" in kw else 1
    for v in iterable:
        out = out * v
    return out


def _elementwise_dtypes():
    from torch._prims_common import elementwise_dtypes

    return elementwise_dtypes


def _traced_elementwise_dtypes(*args, **kwargs):
    """`elementwise_dtypes` at trace time.  Its result depends only on each
    tensor's dtype and rank and each scalar's Python type, all of which the
    version's guards fix (TENSOR_MATCH, constants, the type of a dynamic
    scalar), so it is a constant of the version."""
    from torch._dynamo.variables import ConstantVariable

    def standin(v):
        if v.is_python_constant():
            return v.as_python_constant()
        proxy = getattr(v, "as_proxy", None)
        if proxy is not None:
            ex = proxy().node.meta.get("example_value")
            if isinstance(ex, torch.Tensor):
                return ex
        t = v.python_type()
        if t in (bool, int, float, complex):
            return t(1)
        raise NotImplementedError(f"elementwise_dtypes of {t.__name__}")

    import torch
    from torch._prims_common import elementwise_dtypes

    res = elementwise_dtypes(*[standin(a) for a in args],
                             **{k: standin(v) for k, v in kwargs.items()})
    from torch._dynamo.variables import TupleVariable

    return TupleVariable([ConstantVariable.create(d) for d in res])


def _as_kernel_arg(tx, v):
    """A traced tensor-like wrapper passed to a kernel -> its tensor."""
    try:
        t = v.python_type()
    except Exception:  # noqa: BLE001 - not every variable knows its type
        return v
    if isinstance(t, type) and t in _POLYFILLS.values():
        return v.var_getattr(tx, "_trident_arg")
    return v


def _apply_heuristics(hopifier, variable, args, kwargs, tx):
    """`@triton.heuristics` not under an autotuner: evaluate each heuristic on
    the call's (named) arguments as Heuristics.run does, pass the results as
    keyword arguments, and launch the kernel it wraps."""
    try:
        from triton.runtime.autotuner import Heuristics
    except ImportError:
        return variable, kwargs
    k = variable.kernel
    if not isinstance(k, Heuristics):
        return variable, kwargs
    from torch._dynamo.variables import ConstantVariable

    kwargs = dict(kwargs)
    named = dict(zip(k.arg_names, args))
    while isinstance(k, Heuristics):
        for name, fn in k.values.items():
            res = hopifier.call_user_defined_fn(fn, [{**named, **kwargs}], {}, tx, variable)
            kwargs[name] = ConstantVariable.create(hopifier.maybe_unpack_heuristic_result(res))
        k = k.fn
    new = type(variable)(k, None, variable.grid, source=getattr(variable, "source", None))
    return new, kwargs


def _wrap_kernel_entry(builder, value, attr):
    from torch._dynamo.guards import GuardBuilder
    from torch._dynamo.source import AttrSource
    from torch._dynamo.variables.functions import TritonKernelVariable

    builder.install_guards(GuardBuilder.ID_MATCH)
    if attr is None:  # the kernel object itself (a bare @triton.heuristics)
        inner = value
    else:
        inner = getattr(value, attr)
        builder.tx.output.guards.add(AttrSource(builder.source, attr).make_guard(
            GuardBuilder.ID_MATCH))
    if _is_bare_heuristics(inner):
        # TritonKernelVariable accepts it; the heuristics are applied at the
        # call (_apply_heuristics).
        pass
    return TritonKernelVariable(inner, None, None, source=builder.source)


def _is_autotuner(k) -> bool:
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return False
    return isinstance(k, Autotuner)


def _is_bare_heuristics(k) -> bool:
    try:
        from triton.runtime.autotuner import Heuristics
    except ImportError:
        return False
    return isinstance(k, Heuristics)
