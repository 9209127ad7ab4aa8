"""A version's constants as plain data, re-resolved in another process, never trusted.

`encode` turns a pooled object into a node (a tuple whose first item says its kind); `decode`
makes the object it stands for in this process:

- by name: modules (`sys.modules`) and the globals dict of one (by the module that owns it,
  also where its `__name__` names another), classes, functions, builtins and other objects found at
  their `__module__` and `__qualname__` (checked to be the object itself when encoded), enum
  members, torch dtypes, layouts and memory formats, method descriptors of a class, an object
  of the function's own module by its global name; the function itself, its code, its
  globals and builtins, and `sys.modules` by what they are in the process.  A user function or
  class (not of torch, Triton, Trident or the standard library, which the key covers) also
  carries a fingerprint of its code (`fingerprint`): a helper whose body changed since the
  capture does not resolve, although its identity guard would pass;
- by value: None, bools, numbers, strings, bytes, torch.Size, devices, tuples, lists, sets,
  dicts of those, and tensors (strided leaves: CPU and CUDA tensors as their storage's bytes
  and their view, others through `torch.save` / `torch.load(weights_only=True)`).

An autotuned launch's `ir.launch.Resolver` is data: its user's autotuner and kernel by name,
Dynamo's configs, and the variants it has chosen (`_encode_resolver`); a Triton `Config` by its
state.  An object with no such name (a lambda, a local class, a code object that no pooled
function owns, an instance, a Config with a pre_hook) raises `NoName`: its version is not
persisted.
A name that does not resolve in the new process raises `Unresolved`: that version is dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import hashlib
import importlib
import io
import logging
import sys
import threading
import types
from dataclasses import dataclass

import torch

from ..ir import nodes as ir
from ..ir.launch import Resolver
from .key import code_digest, canon

log = logging.getLogger("trident")


# Modules whose code the key's versions cover (their objects need no fingerprint).
_KEYED = {"torch", "triton", "trident", "builtins", "_trident_rt", "functorch"}
_SIMPLE = (type(None), bool, int, float, complex, str, bytes)


def _keyed(module) -> bool:
    top = module.split(".")[0] if isinstance(module, str) else ""
    return top in _KEYED or top in sys.stdlib_module_names


_MEMO = threading.local()


@contextlib.contextmanager
def memo():
    """Within it, this thread computes each object's fingerprint once (a restore checks the
    same classes and functions for many constants; code does not change meanwhile)."""
    outer = getattr(_MEMO, "d", None)
    _MEMO.d = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO.d = outer


def fingerprint(obj) -> str:
    """A digest of the user code an object stands for: a function's code, a class's methods
    and simple attributes over its MRO, an instance's class and wrapped function.  Code of
    torch, Triton, Trident and the standard library counts by name only (the key covers it)."""
    d = getattr(_MEMO, "d", None)
    if d is not None:
        hit = d.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
    h = hashlib.sha256()
    _fp(obj, h, 0)
    fp = h.hexdigest()[:20]
    if d is not None:
        d[id(obj)] = (obj, fp)  # (the object kept alive: its id is not reused meanwhile)
    return fp


def _fp(obj, h, depth: int) -> None:
    if depth > 8:
        h.update(b"...")
        return
    if isinstance(obj, types.FunctionType):
        h.update(f"F{obj.__module__}.{obj.__qualname__}".encode())
        if not _keyed(obj.__module__):
            h.update(code_digest(obj.__code__).encode())
    elif isinstance(obj, (staticmethod, classmethod)):
        h.update(b"S")
        _fp(obj.__func__, h, depth + 1)
    elif isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            _fp(f, h, depth + 1) if f is not None else h.update(b"-")
    elif isinstance(obj, type):
        for c in obj.__mro__:
            h.update(f"C{c.__module__}.{c.__qualname__}".encode())
            if _keyed(c.__module__):
                continue
            for name in sorted(vars(c)):
                if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                    continue
                v = vars(c)[name]
                h.update(b"\0" + name.encode() + b"=")
                if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                    _fp(v, h, depth + 1)
                elif type(v) in _SIMPLE or type(v) in (tuple, frozenset):
                    h.update(canon(v).encode())
                else:
                    h.update(type(v).__qualname__.encode())
    elif isinstance(obj, (types.BuiltinFunctionType, types.ModuleType)):
        h.update(f"B{getattr(obj, '__name__', '')}".encode())  # C code or a module: by name
    else:
        h.update(b"I")
        key = getattr(obj, "cache_key", None) if _is_triton(obj) else None
        if isinstance(key, str):  # a @triton.jit function: Triton's digest of its source,
            h.update(b"K" + key.encode())  # the jit functions it calls and their constexprs
        _triton_wrapper(obj, h)
        for attr in ("__wrapped__", "fn"):  # a decorator's function, a Triton JITFunction's,
            inner = getattr(obj, attr, None)  # an autotuner's or heuristics' kernel
            if isinstance(inner, types.FunctionType) or (
                    inner is not None and _is_triton(inner)):
                _fp(inner, h, depth + 1)
        if not _keyed(type(obj).__module__):
            _fp(type(obj), h, depth + 1)


def _is_triton(obj) -> bool:
    return _is_triton_class(type(obj))


def _is_triton_class(cls) -> bool:
    return isinstance(cls, type) and any(
        c.__module__.startswith("triton.") for c in cls.__mro__)


def _triton_wrapper(obj, h) -> None:
    """What an @triton.autotune or @triton.heuristics object decides with: its configs (each
    config's constexprs, warps, stages, CTAs), key names and hook/heuristic functions."""
    if not _is_triton(obj):
        return
    for c in getattr(obj, "configs", None) or ():
        h.update(b"c" + str(c).encode() + (b"+hook" if getattr(c, "pre_hook", None) else b""))
    for attr in ("keys", "arg_names"):
        names = getattr(obj, attr, None)
        if isinstance(names, (list, tuple)):
            h.update(f"{attr}={list(map(str, names))}".encode())
    values = getattr(obj, "values", None)
    if isinstance(values, dict):  # @triton.heuristics: name -> function of the arguments
        for k in sorted(values, key=str):
            h.update(f"h{k}=".encode())
            if isinstance(values[k], types.FunctionType):
                _fp(values[k], h, 1)
    for attr in ("early_config_prune", "perf_model", "pre_hook", "post_hook"):
        f = getattr(obj, attr, None)
        if isinstance(f, types.FunctionType):
            h.update(attr.encode())
            _fp(f, h, 1)


# -- constants: encoded as plain data, re-resolved on load ------------------------------------


class NoName(Exception):
    """An object that cannot be re-resolved in another process: its version is not persisted."""


class Unresolved(Exception):
    """A persisted name that does not resolve (or resolves to changed code) in this process."""


class Pending(Unresolved):
    """A persisted path that does not resolve yet in this process (state a library builds on
    its first call, such as FlagGems' generated kernels): worth one more try after a call."""


@dataclass
class Ctx:
    """What the process-dependent nodes stand for: the SCM's function, its globals dict and
    builtins, and (while encoding) the version's constant pool."""

    fn: object
    globals: dict
    builtins: dict
    pool: tuple = ()


_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)
# Nodes that stand for an object by what it is in the process (not a copy of a value).
BY_NAME = {"fn", "fn_code", "caller", "sys.modules", "builtins", "globals", "module", "moddict",
            "ref", "global", "attr", "enum", "code_of", "torch", "at"}


def _caller_type():
    from .. import eager

    return getattr(eager, "_Caller", None)


def _resolve(module: str, qualname: str, imports: bool = True):
    """`module.qualname` (AttributeError, ImportError or KeyError if there is none).  Encoding
    looks only in modules already imported; decoding imports, as unpickling does."""
    obj = sys.modules.get(module)
    if obj is None:
        obj = importlib.import_module(module) if imports else sys.modules[module]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def encode(obj, ctx: Ctx, depth: int = 0):
    """The node of a pooled object (the module docstring lists them), or NoName."""
    if depth > 32:
        raise NoName("a constant nested too deeply")
    if obj is ctx.fn:
        return ("fn",)
    if obj is getattr(ctx.fn, "__code__", None):
        return ("fn_code",)
    if obj is sys.modules:
        return ("sys.modules",)
    if obj is ctx.builtins:
        return ("builtins",)
    if obj is ctx.globals:
        return ("globals",)
    t = type(obj)
    caller = _caller_type()
    if caller is not None and t is caller and obj.fn is ctx.fn:
        return ("caller",)
    if t in _SIMPLE or obj is Ellipsis:
        return ("atom", obj)
    if t is torch.Size:
        return ("size", tuple(obj))
    if t in (tuple, list, set, frozenset):
        return (t.__name__, tuple(encode(x, ctx, depth + 1) for x in obj))
    if t is dict:
        name = obj.get("__name__")
        if isinstance(name, str) and getattr(sys.modules.get(name), "__dict__", None) is obj:
            return ("moddict", name)
        if isinstance(name, str):  # a module's globals under another module's __name__
            owner = _owning_module(obj)  # (FlagGems' generated modules; capture/adapters.py)
            if owner is not None:
                return ("moddict", owner)
        items = []
        for k, v in obj.items():
            try:
                items.append((encode(k, ctx, depth + 1), encode(v, ctx, depth + 1)))
            except NoName as e:  # say where in the dict (a module's globals: which name)
                raise NoName(f"[{_short(k)}] of a dict{_named_dict(obj)}: {e}") from None
        return ("dict", tuple(items))
    if t in _TORCH_ENUMS:
        name = str(obj).removeprefix("torch.")
        if getattr(torch, name, None) is obj:
            return ("torch", name)
        raise NoName(f"{obj!r} is not torch.{name}")
    if t is torch.device:
        return ("device", str(obj))
    if t in (torch.Tensor, torch.nn.Parameter):
        if obj.grad_fn is not None or obj.is_meta or obj.layout != torch.strided:
            raise NoName("a tensor constant that is not a strided leaf")
        node = _raw_tensor(obj)
        if node is not None:
            return node
        buf = io.BytesIO()
        torch.save(obj, buf)
        return ("tensor", buf.getvalue())
    if isinstance(obj, torch.Tensor):
        raise NoName(f"a {t.__name__} constant")
    if isinstance(obj, types.ModuleType):
        if sys.modules.get(obj.__name__) is obj:
            return ("module", obj.__name__)
        raise NoName(f"module {obj.__name__} is not sys.modules[{obj.__name__!r}]")
    if isinstance(obj, enum.Enum):
        if t.__members__.get(obj.name) is obj:
            return ("enum", encode(t, ctx, depth + 1), obj.name)
        raise NoName(f"enum member {obj!r} has no name")
    if t is types.CodeType:
        owner = next((f for f in ctx.pool if isinstance(f, types.FunctionType)
                      and f.__code__ is obj), None)
        if owner is not None:
            try:
                return ("code_of", encode(owner, ctx, depth + 1))
            except NoName:
                pass
        node = _code_by_name(obj)
        if node is None:
            raise NoName(f"code object {obj.co_qualname} belongs to no pooled or named "
                         "function")
        return node
    if isinstance(obj, Resolver):
        return _encode_resolver(obj, ctx, depth)
    if _is_triton(obj) and type(obj).__name__ == "Config" and hasattr(obj, "__setstate__"):
        if getattr(obj, "pre_hook", None) is not None:
            raise NoName("a Triton config with a pre_hook")
        return ("tconfig", encode(type(obj), ctx, depth + 1),
                encode(dict(vars(obj)), ctx, depth + 1))
    return _named(obj, ctx, depth)


class _Configs:
    """What a persisted Resolver keeps of the autotuner Dynamo rebuilt at the capture (its
    configs, heuristics folded in, in Dynamo's order): all the Resolver reads of it."""

    def __init__(self, configs):
        self.configs = list(configs)


def _encode_resolver(r: Resolver, ctx: Ctx, depth: int):
    """An autotuned launch's Resolver as data: its user's autotuner by name (the one eager
    calls for a new key), Dynamo's configs, the key's description and the variants it has
    chosen so far (CUBINs and launch parameters, plain data), so that a new process launches
    the keys the capturing one tuned without tuning them again, as Triton's and FlagGems'
    tuning caches let eager do."""
    e = lambda x: encode(x, ctx, depth + 1)  # noqa: E731
    user = e(r.user_tuner)
    jit = ("attr", user, "fn") if getattr(r.user_tuner, "fn", None) is r.jit else e(r.jit)
    state = {"names": r.names, "kinds": r.kinds, "transforms": r.transforms,
             "nrows": r.nrows, "table": dict(r.table), "configs": dict(r.configs),
             "python_only": dict(r.python_only)}
    return ("resolver", user, jit, tuple(e(c) for c in r.dynamo_tuner.configs),
            e(r.const_kwargs), ("ir", dict(r.args)), e(state))


def _decode_resolver(node, ctx: Ctx) -> Resolver:
    from ..native import build

    _, user, jit, configs, const_kwargs, args, state = node
    st = decode(state, ctx)
    r = Resolver(_Configs(decode(c, ctx) for c in configs), decode(user, ctx),
                 decode(jit, ctx), st["names"], st["kinds"], decode(const_kwargs, ctx),
                 args[1], build.runtime_module(), st["nrows"], st["transforms"])
    for key, v in st["table"].items():
        r.table[key] = r.kernels.setdefault(v, v)
    r.configs.update(st["configs"])
    r.python_only.update(st["python_only"])
    return r


def _code_by_name(co):
    """The node of the code of a function or property accessor of an imported module, found by
    the module's file and the code's qualified name (a guard on `type(self.config).__mro__[4]
    .__getattribute__.__code__`: a library class's method reached through an argument), or
    None."""
    qualname = getattr(co, "co_qualname", None)
    if not isinstance(qualname, str) or "<" in qualname:
        return None
    for name, m in list(sys.modules.items()):
        if getattr(m, "__file__", None) != co.co_filename:
            continue
        try:
            found = _resolve(name, qualname, imports=False)
        except Exception:  # noqa: BLE001 - not there under that name
            continue
        ref = ("ref", name, qualname, fingerprint(found))
        f = getattr(found, "__func__", found)
        if isinstance(f, types.FunctionType) and f.__code__ is co:
            return ("code_of", ref)
        if isinstance(found, property):
            for acc in ("fget", "fset", "fdel"):
                g = getattr(found, acc)
                if isinstance(g, types.FunctionType) and g.__code__ is co:
                    return ("attr", ("attr", ref, acc), "__code__")
    return None


_INNER = ("fn", "__wrapped__", "__func__")


def _inner_path(outer, obj, depth: int = 3) -> list | None:
    """The attribute names that lead from a wrapper object to `obj` (fn, __wrapped__,
    __func__; at most `depth` steps), or None."""
    if outer is None or depth == 0 or isinstance(outer, (types.ModuleType, type)):
        return None
    for attr in _INNER:
        try:
            inner = getattr(outer, attr, None)
        except Exception:  # noqa: BLE001 - a lazy attribute that fails: not a wrapper
            continue
        if inner is None or inner is outer:
            continue
        if inner is obj:
            return [attr]
        rest = _inner_path(inner, obj, depth - 1)
        if rest is not None:
            return [attr] + rest
    return None


def _owning_module(d: dict) -> str | None:
    """The name in sys.modules of the module whose globals `d` is, or None."""
    return next((k for k, m in list(sys.modules.items())
                 if isinstance(k, str) and getattr(m, "__dict__", None) is d), None)


def _named(obj, ctx: Ctx, depth: int):
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        try:
            found = _resolve(module, qualname, imports=False)
        except Exception:  # noqa: BLE001 - not reachable by that name: try the others
            found = None
        if found is obj:
            return ("ref", module, qualname, fingerprint(obj))
        if isinstance(found, property):  # a property's getter, setter or deleter
            acc = next((a for a in ("fget", "fset", "fdel") if getattr(found, a) is obj), None)
            if acc is not None:
                return ("attr", ("ref", module, qualname, fingerprint(found)), acc)
        path = _inner_path(found, obj)  # the function a decorator object at that name wraps
        if path is not None:  # (Triton's constexpr_function, FlagGems' libentry)
            node = ("ref", module, qualname, fingerprint(found))
            for attr in path:
                node = ("attr", node, attr)
            return node
        name = getattr(obj, "__name__", None)  # torch.tensor: _VariableFunctionsClass.tensor
        if isinstance(name, str) and name != qualname and "<" not in name:
            try:
                found = _resolve(module, name, imports=False)
            except Exception:  # noqa: BLE001
                found = None
            if found is obj:
                return ("ref", module, name, fingerprint(obj))
        if isinstance(obj, type) and getattr(types, qualname, None) is obj:
            return ("ref", "types", qualname, fingerprint(obj))  # NoneType, ...
    owner = getattr(obj, "__self__", None)  # a builtin function of a C module
    name = getattr(obj, "__name__", None)
    if isinstance(owner, types.ModuleType) and isinstance(name, str) \
            and getattr(owner, name, None) is obj:
        return ("attr", encode(owner, ctx, depth + 1), name)
    owner = getattr(obj, "__objclass__", None)  # a method descriptor of a class
    if isinstance(owner, type) and isinstance(name, str) and vars(owner).get(name) is obj:
        return ("attr", encode(owner, ctx, depth + 1), name)
    for k, v in ctx.globals.items():  # an object of the function's module, by its global name
        if v is obj and isinstance(k, str) and k.isidentifier() and not k.startswith("__"):
            return ("global", k, fingerprint(obj))
    # An instance bound to a global of the module that defines what it wraps (an autotuner
    # over a kernel of a library's module): by that module and name.
    inner = obj
    for _ in range(4):
        inner = getattr(inner, "fn", None) or getattr(inner, "__wrapped__", None)
        home = getattr(inner, "__module__", None)
        if not isinstance(home, str):
            continue
        for k, v in list(getattr(sys.modules.get(home), "__dict__", {}).items()):
            if not isinstance(k, str) or not k.isidentifier() or k.startswith("__"):
                continue
            if v is obj:
                return ("ref", home, k, fingerprint(obj))
            path = _inner_path(v, obj)  # wrapped once more: FlagGems' libentry over the
            if path is not None:  # libtuner its register_policy class made
                node = ("ref", home, k, fingerprint(v))
                for attr in path:
                    node = ("attr", node, attr)
                return node
    desc = repr(obj)
    desc = desc if len(desc) <= 60 else desc[:57] + "..."
    raise NoName(f"{desc} ({type(obj).__qualname__}) has no name to re-resolve it by")


def _raw_tensor(t: torch.Tensor):
    """A CPU or CUDA tensor's storage bytes and view, or None where torch.save must keep it
    (quantized, conjugate or negative bits, names, other devices).  `torch.load`'s
    weights-only unpickler costs 0.2-1.5 ms a tensor in a new process; this is a copy."""
    if t.device.type not in ("cpu", "cuda") or t.is_quantized or t.is_conj() or t.is_neg() \
            or any(n is not None for n in (getattr(t, "names", None) or ())):
        return None
    dtype = str(t.dtype).removeprefix("torch.")
    if getattr(torch, dtype, None) is not t.dtype:
        return None
    storage = t.untyped_storage()
    if storage.device.type != "cpu":
        storage = storage.cpu()
    n = storage.nbytes()
    raw = ctypes.string_at(storage.data_ptr(), n) if n else b""
    return ("tensor_raw", dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
            str(t.device), raw, type(t) is torch.nn.Parameter, t.requires_grad)


def _raw_tensor_decode(node) -> torch.Tensor:
    _, dtype_name, shape, stride, offset, device, raw, param, grad = node
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise Unresolved(f"torch.{dtype_name} is not a dtype here")
    device = torch.device(device)
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise Unresolved(f"a tensor constant on {device}, which this process does not have")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw \
        else torch.empty(0, dtype=torch.uint8)
    storage = flat.to(device).untyped_storage()
    with torch.no_grad():
        t = torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)
    if param:
        return torch.nn.Parameter(t, requires_grad=grad)
    return t.requires_grad_(grad)


def decode(node, ctx: Ctx):
    """The object a node stands for in this process, or Unresolved."""
    tag = node[0]
    if tag == "atom":
        return node[1]
    if tag in ("tuple", "list", "set", "frozenset"):
        items = [decode(x, ctx) for x in node[1]]
        return {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k, ctx): decode(v, ctx) for k, v in node[1]}
    if tag == "size":
        return torch.Size(node[1])
    if tag == "torch":
        obj = getattr(torch, node[1], None)
        if type(obj) not in _TORCH_ENUMS:
            raise Unresolved(f"torch.{node[1]} is not a dtype, layout or memory format here")
        return obj
    if tag == "device":
        return torch.device(node[1])
    if tag == "tensor_raw":
        return _raw_tensor_decode(node)
    if tag == "tensor":
        t = torch.load(io.BytesIO(node[1]), weights_only=True)
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise Unresolved(f"a tensor constant loaded as {type(t).__name__}")
        return t
    if tag == "fn":
        return ctx.fn
    if tag == "fn_code":
        return ctx.fn.__code__
    if tag == "caller":
        return _caller_type()(ctx.fn)
    if tag == "sys.modules":
        return sys.modules
    if tag == "builtins":
        return ctx.builtins
    if tag == "globals":
        return ctx.globals
    if tag == "module":
        return load_module(node[1])
    if tag == "moddict":
        return load_module(node[1]).__dict__
    if tag == "ref":
        _, module, qualname, fp = node
        try:
            obj = _resolve(module, qualname)
        except Exception as e:  # noqa: BLE001 - any failure to import or find it is a miss
            raise Unresolved(f"{module}.{qualname} does not resolve "
                             f"({type(e).__name__}: {e})") from None
        _check_fingerprint(obj, fp, f"{module}.{qualname}")
        return obj
    if tag == "global":
        _, name, fp = node
        if name not in ctx.globals:
            raise Unresolved(f"global {name!r} is not defined")
        obj = ctx.globals[name]
        _check_fingerprint(obj, fp, f"global {name!r}")
        return obj
    if tag == "attr":
        owner = decode(node[1], ctx)
        obj = vars(owner).get(node[2]) if isinstance(owner, type) else None
        if obj is None:
            try:
                obj = getattr(owner, node[2])
            except AttributeError:
                raise Unresolved(f"{owner!r} has no {node[2]!r}") from None
        return obj
    if tag == "enum":
        cls = decode(node[1], ctx)
        try:
            return cls.__members__[node[2]]
        except (AttributeError, KeyError):
            raise Unresolved(f"{cls!r} has no member {node[2]!r}") from None
    if tag == "code_of":
        return decode(node[1], ctx).__code__
    if tag == "tconfig":
        cls, state = decode(node[1], ctx), decode(node[2], ctx)
        if not _is_triton_class(cls) or cls.__name__ != "Config":
            raise Unresolved(f"{cls!r} is not Triton's Config")
        cfg = cls.__new__(cls)
        cfg.__setstate__(state)
        return cfg
    if tag == "resolver":
        return _decode_resolver(node, ctx)
    raise Unresolved(f"unknown constant kind {tag!r}")


# -- objects by the path a guard reads ----------------------------------------------------------


def _path_ok(src) -> bool:
    """A path evaluable without the call's arguments: from the globals or a pooled object,
    through attributes and items."""
    while isinstance(src, (ir.Attr, ir.Item, ir.DictItem, ir.TypeOf)):
        src = src.base
    return isinstance(src, (ir.Global, ir.ConstObj))


def encode_at(obj, src, ctx: Ctx):
    """An object with no name, by the path its identity guard reads (`src`, an IR source), with
    its fingerprint; NoName where that path starts from an argument."""
    if not _path_ok(src):
        raise NoName(f"{_short(obj)} has no name and its guard reads it through {src}")
    return ("at", src, fingerprint(obj))


def decode_at(node, ctx: Ctx, const, installed: dict):
    """The object an "at" node stands for: its path evaluated in this process (`const(k)`: the
    version's k-th constant; `installed`: the module aliases the version's Dynamo capture put in
    the globals, before they are installed).  Pending where the path does not resolve (yet);
    Unresolved where it resolves to other code than the capture's."""
    _, src, fp = node
    obj = _eval_path(src, ctx, const, installed)
    _check_fingerprint(obj, fp, f"the object at {src}")
    return obj


def _eval_path(src, ctx: Ctx, const, installed: dict):
    if isinstance(src, ir.Global):
        if src.name in installed:
            return installed[src.name]
        if src.name in ctx.globals:
            return ctx.globals[src.name]
        if src.name in ctx.builtins:
            return ctx.builtins[src.name]
        raise Pending(f"global {src.name!r} is not defined (yet)")
    if isinstance(src, ir.ConstObj):
        return const(src.index)
    base = _eval_path(src.base, ctx, const, installed)
    if isinstance(src, ir.TypeOf):
        return type(base)
    if isinstance(src, ir.DictItem):  # the dict's own storage, as the guard reads it
        key = const(src.key_const)
        if isinstance(base, dict) and key not in dict.keys(base):
            _fill(src.base, key, ctx, const, installed)
        if not isinstance(base, dict) or key not in dict.keys(base):
            raise Pending(f"{src} does not resolve (yet)")
        return dict.__getitem__(base, key)
    try:
        if isinstance(src, ir.Attr):
            return getattr(base, src.name)
        return base[src.key]
    except (AttributeError, LookupError) as e:
        raise Pending(f"{src} does not resolve (yet): {type(e).__name__}: {e}") from None


def _instantiate_overload(owner, key) -> None:
    """FlagGems' PointwiseDynamicFunction: `overloads[f"{ndim}_{prefer_block_pointer}"]` is
    the wrapper of the module that `instantiate(ndim)` generates (from its code cache) on the
    library's first call of that rank; the method is FlagGems' own API for doing so ahead of a
    call, and makes no launch."""
    n, _, rest = key.partition("_") if isinstance(key, str) else ("", "", "")
    cfg = getattr(owner, "config", None)
    if n.isdigit() and (cfg is None or rest == str(getattr(cfg, "prefer_block_pointer", rest))):
        owner.instantiate(int(n))


# (module, qualified name of the owner's class, attribute): what fills a missing item of the
# dict at `owner.<attribute>` that a library would fill on its first call, so that a restored
# version's path resolves before that call (which then runs natively, not eagerly).
FILLERS = {("flag_gems.utils.pointwise_dynamic", "PointwiseDynamicFunction", "overloads"):
           _instantiate_overload}


def _fill(dict_src, key, ctx: Ctx, const, installed: dict) -> None:
    """Fill `key` of the dict at `dict_src` where FILLERS knows how (any failure leaves the
    path pending: the library's own first call then fills it)."""
    if not isinstance(dict_src, ir.Attr):
        return
    try:
        owner = _eval_path(dict_src.base, ctx, const, installed)
        fill = FILLERS.get((type(owner).__module__, type(owner).__qualname__, dict_src.name))
        if fill is not None:
            fill(owner, key)
    except Exception:  # noqa: BLE001 - pending, as without the filler
        log.debug("trident: filling %s[%r] failed", dict_src, key, exc_info=True)


def _named_dict(d: dict) -> str:
    name, file = d.get("__name__"), d.get("__file__")
    return f" with __name__ {name!r}, __file__ {file!r}" if isinstance(name, str) else ""


def _short(obj) -> str:
    desc = repr(obj)
    return desc if len(desc) <= 60 else desc[:57] + "..."


def load_module(name: str):
    try:
        return sys.modules.get(name) or importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - an import that fails here is a miss
        raise Unresolved(f"module {name} does not import ({type(e).__name__}: {e})") from None


def _check_fingerprint(obj, fp, what: str) -> None:
    if fingerprint(obj) != fp:
        raise Unresolved(f"{what} is not the code it was at the capture")
