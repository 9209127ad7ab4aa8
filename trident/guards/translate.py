"""Dynamo guard entries -> host-IR guard ops.

Every entry Dynamo recorded becomes one or more IR guard ops, or the whole
version is refused (UnsupportedError): no guard is ever dropped.  The table
in docs/guards.md mirrors the kinds `translate` handles below.
"""

from __future__ import annotations

import ast
import enum
import math
import types
from dataclasses import dataclass, field

import torch

from ..errors import UnsupportedError
from ..ir import nodes as ir

# Dynamo's global-state guard kinds, all covered by one snapshot comparison.
GLOBAL_STATE_KINDS = ("GLOBAL_STATE", "GRAD_MODE", "DETERMINISTIC_ALGORITHMS",
                      "TORCH_FUNCTION_STATE", "AUTOGRAD_SAVED_TENSORS_HOOKS")
IDENTITY_KINDS = ("ID_MATCH", "MODULE_MATCH", "BUILTIN_MATCH", "FUNCTION_MATCH",
                  "CLASS_MATCH")
EQUALS_KINDS = ("CONSTANT_MATCH", "EQUALS_MATCH")
# EMPTY_NN_MODULE_HOOKS_DICT is Dynamo's SEQUENCE_LENGTH on a module's hooks dict (skipped by
# Dynamo itself under its default skip_nnmodule_hook_guards; Trident keeps it: a hook added
# later is a miss, never ignored).
LENGTH_KINDS = ("SEQUENCE_LENGTH", "LIST_LENGTH", "DICT_LENGTH", "EMPTY_NN_MODULE_HOOKS_DICT")
_EQ_TYPES = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device,
             torch.memory_format, torch.layout)


def local_names(fn) -> list[str]:
    """The runtime binder's layout of the locals array (see trident_rt_binder.cpp)."""
    co = fn.__code__
    n = co.co_argcount + co.co_kwonlyargcount
    names = list(co.co_varnames[:n])
    if co.co_flags & 0x04:  # CO_VARARGS
        names.append(co.co_varnames[n])
        n += 1
    if co.co_flags & 0x08:  # CO_VARKEYWORDS
        names.append(co.co_varnames[n])
    names.extend(co.co_freevars)
    return names


@dataclass
class ConstPool:
    """Python objects a version refers to by index (kept alive by the SCM)."""

    objs: list = field(default_factory=list)

    def add(self, obj) -> int:
        for i, o in enumerate(self.objs):
            if o is obj:
                return i
        self.objs.append(obj)
        return len(self.objs) - 1


def dynamo_wrapped(fn) -> bool:
    """Whether Dynamo traces `fn` through external_utils.wrap_inline, a frame
    `inner(*args, **kwargs)` around it: a function its trace rules skip (one of torch's own
    files), here only torch's context-manager decorator wrapper (`decorate_context(*args,
    **kwargs)`, whose locals are the frame's). Its guards then read that frame's globals
    (the SCM's globals dict: capture.Capture.global_scope)."""
    code = getattr(fn, "__code__", None)
    if (code is None or code.co_name != "decorate_context" or code.co_argcount
            or code.co_varnames[:2] != ("args", "kwargs")):
        return False
    try:
        from torch._dynamo import trace_rules

        return bool(trace_rules.check(fn))
    except Exception:  # noqa: BLE001 - unknown to this torch: not wrapped as far as we know
        return False


class SourceConverter:
    """Dynamo Source objects -> IR sources."""

    def __init__(self, fn, consts: ConstPool, installed: dict | None = None):
        self.fn = fn
        self.index = {n: i for i, n in enumerate(local_names(fn))}
        self.consts = consts
        # Globals Dynamo installed in fn's globals for the trace (`install_global_by_id`: an
        # object it reached by identity, such as a module imported inside a function); they are
        # removed with Dynamo's cache entry, so they are the constants they were named after.
        self.installed = installed or {}

    def __call__(self, src) -> ir.Source:
        from torch._dynamo import source as S

        cls = type(src).__name__
        if isinstance(src, S.LocalSource):
            if src.local_name == "fn" and "fn" not in self.index and dynamo_wrapped(self.fn):
                # Dynamo traced the function through its wrap_inline frame (torch's own
                # functions, such as a @torch.inference_mode() wrapper):
                # `inner(*args, **kwargs): return fn(*args, **kwargs)`, whose `fn` is the
                # function itself and whose other locals are the function's own.
                return ir.ConstObj(self.consts.add(self.fn), _describe(self.fn))
            if src.local_name not in self.index:
                raise UnsupportedError(f"guard on unknown local {src.local_name!r}")
            return ir.Local(self.index[src.local_name], src.local_name)
        if isinstance(src, S.GlobalSource):
            if src.global_name.startswith("__builtins_dict__"):
                # Dynamo's alias for the frame's builtins dict: the dict itself.
                b = self.fn.__builtins__
                b = b if isinstance(b, dict) else b.__dict__
                return ir.ConstObj(self.consts.add(b), "builtins")
            if src.global_name in self.installed:
                obj = self.installed[src.global_name]
                return ir.ConstObj(self.consts.add(obj), _describe(obj))
            return ir.Global(src.global_name)
        if isinstance(src, S.AttrSource):
            out = self(src.base)
            for part in src.member.split("."):
                out = ir.Attr(out, part)
            return out
        if cls == "GenericAttrSource":
            return ir.GenericAttr(self(src.base), src.member)
        if cls == "TypeSource":
            return ir.TypeOf(self(src.base))
        if cls == "CallFunctionNoArgsSource":
            return ir.CallNoArgs(self(src.base))
        if cls == "ContextVarGetSource":  # `var.get()`, `var.get(default)` (torch 2.14)
            if not src.has_default:
                return ir.ContextVarGet(self(src.base))
            d = src.default_value
            return ir.ContextVarGet(self(src.base), self.consts.add(d), _describe(d))
        if cls == "CallMethodItemSource":  # `t.item()`, called when the guards run
            return ir.CallNoArgs(ir.Attr(self(src.base), "item"))
        if (cls == "ConstDictKeySource" and type(src.index) is int
                and src.index >= 0):
            return ir.DictEntryAt(self(src.base), src.index)
        base = getattr(src, "base", None)
        if (cls in ("GetItemSource", "DictGetItemSource") and isinstance(base, S.GlobalSource)
                and base.global_name.startswith("__builtins_dict__")
                and isinstance(src.index, str)):
            # Dynamo guards a builtin through its builtins dict, so a global
            # that later shadows the name goes unnoticed (torch.compile returns
            # stale results then).  Look the name up as Python does: globals
            # first, then builtins.
            return ir.Global(src.index)
        if cls == "TypeDictSource":  # dict(type.__dict__)[k] reads type.__dict__[k]
            return ir.Attr(self(src.base), "__dict__")
        if cls == "TypeMROSource":
            return ir.Attr(self(src.base), "__mro__")
        if cls == "CodeSource":
            return ir.Attr(self(src.base), "__code__")
        if cls == "ClosureSource":
            return ir.Attr(self(src.base), "__closure__")
        if cls == "DefaultsSource":
            if src.is_kw:
                return ir.Item(ir.Attr(self(src.base), "__kwdefaults__"), src.idx_key)
            return ir.Item(ir.Attr(self(src.base), "__defaults__"), src.idx_key)
        if cls in ("NNModuleSource", "UnspecializedNNModuleSource",
                   "UnspecializedBuiltinNNModuleSource"):
            return self(src.base)  # the same object, tagged for Dynamo
        if cls == "ImportSource":
            import sys

            k = self.consts.add(sys.modules)
            return ir.Item(ir.ConstObj(k, "sys.modules"), src.module_name)
        if (isinstance(src, S.GetItemSource) and cls != "TupleIteratorGetItemSource"
                and not getattr(src, "index_is_slice", False)):
            idx = src.index
            if isinstance(idx, (int, str)) and not isinstance(idx, bool):
                return ir.Item(self(src.base), idx)
        if (cls in ("DictGetItemSource", "DictSubclassGetItemSource")
                and type(src.index).__name__ == "ConstDictKeySource"
                and src.index.base == src.base and type(src.index.index) is int
                and src.index.index >= 0):
            # d[list(dict.keys(d))[i]]: the i-th value.  For a dict subclass (a transformers
            # ModelOutput argument: `o["logits"]`, `o[0]`, `o.to_tuple()`) Dynamo reads
            # `dict.__getitem__(o, list(dict.keys(o))[i])`, the dict's own storage past the
            # subclass's __getitem__: what PyDict_Next in trt_dict_entry_at reads too.
            return ir.DictEntryAt(self(src.base), src.index.index, value=True)
        if cls in ("DictGetItemSource", "DictSubclassGetItemSource"):
            # d[k] with a constant key (`_modules['model']`, Liger's
            # `_NVIDIA_ARCH_BY_CC[(9, 0)]`, a defaultdict global's item): Dynamo's
            # dict_getitem accessor reads the dict's own storage (PyDict_GetItem), never a
            # subclass's __getitem__ or a defaultdict's __missing__, and so does DictItem.
            idx = src.index
            if _constant_key(idx):
                return ir.DictItem(self(src.base), self.consts.add(idx), _describe(idx))
            if not isinstance(idx, S.Source):
                raise UnsupportedError(
                    f"guard source {src.name} ({cls}): its key {_describe(idx)} (a "
                    f"{type(idx).__qualname__}) may run user code when hashed or compared")
        raise UnsupportedError(f"guard source {src.name} ({cls}) is not translated")

    def int_leaf(self, src) -> ir.IntLeaf:
        from torch._dynamo.source import TensorProperty, TensorPropertySource

        if isinstance(src, TensorPropertySource):
            base = self(src.base)
            if src.prop == TensorProperty.SIZE:
                return ir.TensorSize(base, src.idx)
            if src.prop == TensorProperty.STRIDE:
                return ir.TensorStride(base, src.idx)
            if src.prop == TensorProperty.STORAGE_OFFSET:
                return ir.TensorOffset(base)
        return ir.PyInt(self(src))


_KEY_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _constant_key(k) -> bool:
    """A dict key whose hash and equality run no user code: Python's or torch's own (None,
    bool, int, float, complex, str, bytes, torch.dtype, torch.device), a tuple, frozenset or
    torch.Size of such keys, an enum member or a class whose `__hash__` and `__eq__` are those
    of builtins or of the `enum` module (`Enum.__hash__` hashes the member's name)."""
    t = type(k)
    if t in _KEY_TYPES:
        return True
    if t in (tuple, frozenset, torch.Size):  # torch.Size: tuple's hash and equality
        return all(_constant_key(e) for e in k)
    if isinstance(k, (enum.Enum, type)):
        return all(_slot_owner(t, name) in ("builtins", "enum") for name in ("__hash__", "__eq__"))
    return False


def _slot_owner(t: type, name: str) -> str | None:
    """The module of the class in `t`'s MRO that defines `name`."""
    for c in t.__mro__:
        if name in vars(c):
            return c.__module__
    return None


def _type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _describe(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def translate(entries, cap, fn, consts: ConstPool, rt) -> tuple:
    """All guard entries of one capture -> a tuple of IR guard ops, in
    evaluation order: global state, per-source guards, aliasing, shapes."""
    conv = SourceConverter(fn, consts, getattr(cap, "installed_globals", None))
    first: list = []
    per_source: list = []
    last: list = []
    tensor_sources: list = []
    duplicates: set = set()
    covered: list = []

    for e in entries:
        kind = e.guard_type
        g = e.orig_guard
        if kind in GLOBAL_STATE_KINDS:
            covered.append(kind)
            continue
        if kind == "SHAPE_ENV":
            floats = {i.source for i in getattr(cap, "inputs", ()) if i.float_arg}
            last.extend(_shape_guards(cap.shape_exprs, conv, floats))
            continue
        if kind == "DEFAULT_DEVICE":
            import torch.utils._device as dev_mod

            k = consts.add(dev_mod)
            src = ir.Attr(ir.ConstObj(k, "torch.utils._device"), "CURRENT_DEVICE")
            cur = dev_mod.CURRENT_DEVICE
            if cur is None:
                per_source.append(ir.IdMatch(src, consts.add(None), "None"))
            else:
                per_source.append(ir.EqualsMatch(src, consts.add(type(cur)), consts.add(cur),
                                                 _describe(cur)))
            continue
        src = conv(g.originating_source)
        if kind == "TENSOR_MATCH":
            per_source.append(_tensor_match(src, e.value, g.originating_source, cap, consts, rt))
            tensor_sources.append(src)
        elif kind == "TYPE_MATCH":
            t = type(e.value)
            per_source.append(ir.TypeMatch(src, consts.add(t), _type_name(t)))
        elif kind == "FAKE_SCRIPT_TYPE_MATCH":
            # TYPE_MATCH on an opaque (TorchBind) object, e.g. a process group;
            # at call time the SCM sees the real object, never a fake one.
            v = getattr(e.value, "real_obj", e.value)
            t = type(v)
            per_source.append(ir.TypeMatch(src, consts.add(t), _type_name(t)))
        elif kind in IDENTITY_KINDS:
            per_source.append(ir.IdMatch(src, consts.add(e.value), _describe(e.value)))
        elif kind == "CLOSURE_MATCH":
            per_source.extend(_closure_match(src, e.value, consts))
        elif kind in EQUALS_KINDS:
            per_source.append(_equals(src, e.value, consts))
        elif kind in LENGTH_KINDS:
            t = type(e.value)
            per_source.append(ir.LengthMatch(src, consts.add(t), _type_name(t), len(e.value)))
        elif kind in ("DICT_KEYS", "DICT_KEYS_MATCH"):
            keys = tuple(e.value.keys())
            if not all(isinstance(k, (str, int)) for k in keys):
                raise UnsupportedError(f"{kind} with non-constant keys on {src}")
            t = type(e.value)
            per_source.append(ir.TypeMatch(src, consts.add(t), _type_name(t)))
            per_source.append(ir.DictKeysMatch(src, consts.add(keys), repr(keys)))
        elif kind == "OPAQUE_OBJ_GUARD_FN_MATCH":
            from torch._dynamo import guards as dg

            meta = dg.extract_opaque_obj(g, e.value)
            if meta is not None:  # Dynamo adds no check when there is nothing to compare
                per_source.append(ir.CallCheck(src, consts.add(dg.check_opaque_obj),
                                               consts.add(meta), "opaque guard_fn"))
        elif kind in ("DICT_CONTAINS", "DICT_NOT_CONTAINS", "SET_CONTAINS", "SET_NOT_CONTAINS"):
            key = _keyword(g, "key")
            if not _is_const_key(key):
                raise UnsupportedError(f"{kind} with a key of type {type(key).__name__} on {src}")
            # torch <= 2.11 has no *_NOT_CONTAINS kinds: DICT_CONTAINS / SET_CONTAINS carry
            # `invert` ("key not in d") instead.
            positive = "NOT" not in kind and not _invert(g, kind)
            per_source.append(ir.Contains(src, "dict" if kind.startswith("DICT") else "set",
                                          consts.add(key), positive, _describe(key)))
        elif kind == "NOT_PRESENT_IN_GENERIC_DICT":
            attr = _keyword(g, "attr")
            per_source.append(ir.NotInDict(src, attr))
        elif kind == "HASATTR":
            op = _hasattr(g, e, src, conv)
            if op is not None:
                per_source.append(op)
        elif kind == "DUPLICATE_INPUT":
            other = conv(_keyword(g, "source_b"))
            last.append(ir.SameObject(src, other))
            duplicates.add(src)
            duplicates.add(other)
        elif kind == "NO_TENSOR_ALIASING":
            continue  # implied: Trident always emits `distinct` over tensor sources
        else:
            raise UnsupportedError(f"guard kind {kind} on {g.name} is not translated")

    for kind, dsrc, payload in getattr(cap, "extra_guards", ()):
        if kind == "logger_quiet":
            per_source.append(ir.LoggerQuiet(conv(dsrc), payload, consts.add(payload)))
        else:
            raise UnsupportedError(f"adapter guard {kind} is not translated")
    if cap.tf_mode_stack_len:
        raise UnsupportedError("a torch function mode is active")
    if covered:
        words = tuple(int.from_bytes(cap.global_state[i * 8:(i + 1) * 8], "little", signed=True)
                      for i in range(len(cap.global_state) // 8))
        first.append(ir.GlobalState(words, tuple(dict.fromkeys(covered))))
    distinct = [s for s in dict.fromkeys(tensor_sources) if s not in duplicates]
    if len(distinct) > 1:
        last.insert(0, ir.Distinct(tuple(distinct)))
    # Dynamo can record one check twice (e.g. CONSTANT_MATCH from two paths).
    return tuple(dict.fromkeys(first + per_source + last))


def _closure_match(src, v, consts: ConstPool) -> list:
    """Dynamo's CLOSURE_MATCH checks only `__code__` of a user function and
    relies on other guards for what else the call reads; torch 2.11 does not
    always guard a rebound function's defaults.  Trident keeps identity for
    a function without a closure and checks its `__code__` too (the same
    function object can be given another code object), and for a closure (a
    new object per call) checks its code and its defaults."""
    import types

    if type(v) is not types.FunctionType:
        return [ir.IdMatch(src, consts.add(v), _describe(v))]
    code = ir.IdMatch(ir.Attr(src, "__code__"), consts.add(v.__code__),
                      f"{v.__qualname__}.__code__")
    if v.__closure__ is None:
        # torch 2.11 guards neither `__defaults__` nor its items here (torch.compile returns
        # the old default's result after `f.__defaults__ = (3.0,)`): check the tuple, by
        # value where it holds constants, else by identity (a rebinding misses).
        d = v.__defaults__
        if d is None or (type(d) is tuple and all(type(x) in _EQ_TYPES for x in d)):
            defaults = _defaults_match(src, "__defaults__", d, consts)
        else:
            defaults = ir.IdMatch(ir.Attr(src, "__defaults__"), consts.add(d),
                                  f"{v.__qualname__}.__defaults__ (captured)")
        return [ir.IdMatch(src, consts.add(v), f"function {v.__qualname__}"), code, defaults]
    out = [code]
    for attr in ("__defaults__", "__kwdefaults__"):
        d = getattr(v, attr)
        if d is None or (type(d) is tuple and all(type(x) in _EQ_TYPES for x in d)):
            out.append(_defaults_match(src, attr, d, consts))
        else:
            raise UnsupportedError(f"closure {v.__qualname__} with non-constant {attr}")
    return out


def _defaults_match(src, attr: str, d, consts: ConstPool):
    """`src.<attr> is None` or `== d`, a tuple of constants."""
    if d is None:
        return ir.IdMatch(ir.Attr(src, attr), consts.add(None), "None")
    return ir.EqualsMatch(ir.Attr(src, attr), consts.add(tuple), consts.add(d), _describe(d))


def _is_const_key(k) -> bool:
    """A key whose hash and equality are its value (so a pooled copy finds
    the same entries)."""
    if type(k) is tuple:
        return all(_is_const_key(x) for x in k)
    return type(k) in (int, bool, str, bytes, type(None)) or (
        type(k) is float and not math.isnan(k))


def _invert(guard, kind) -> bool:
    """The `invert` argument of a DICT_CONTAINS / SET_CONTAINS guard (torch <= 2.11); False
    where the builder has none.  A builder that takes one which cannot be read is refused:
    the guard's polarity would be a guess."""
    import inspect

    fn = guard.create_fn
    kw = getattr(fn, "keywords", None) or {}
    if "invert" in kw:
        return bool(kw["invert"])
    try:
        params = inspect.signature(getattr(fn, "func", fn)).parameters
    except (TypeError, ValueError):
        params = {}
    if "invert" in params or getattr(fn, "args", ()):
        raise UnsupportedError(f"{kind} on {guard.name}: cannot read its `invert` argument")
    return False


def _hasattr(g, e, src, conv):
    """Dynamo's HASATTR as an `ir.HasAttr`, or None where Dynamo checks nothing.  torch >= 2.12
    puts it on the object's source with the name as `attr=`; torch <= 2.11 on the attribute's
    own source (`AttrSource(base, name)`).  The answer was taken before the call
    (`capture.guard_record.Presence`): the call itself may add the attribute."""
    present = getattr(e.value, "present", None) if e.has_value else None
    if type(present) is not bool or type(e.value).__name__ != "Presence":
        raise UnsupportedError(f"HASATTR on {g.name}: its answer before the call is unknown")
    kw = getattr(g.create_fn, "keywords", None) or {}
    if "attr" in kw:
        if not isinstance(kw["attr"], str):
            raise UnsupportedError(f"HASATTR on {g.name}: attribute {kw['attr']!r}")
        return ir.HasAttr(src, kw["attr"], present)
    from torch._dynamo import source as S

    dsrc = g.originating_source
    if type(dsrc).__name__ in ("NNModuleSource", "UnspecializedNNModuleSource"):
        dsrc = dsrc.base
    if type(dsrc).__name__ == "CodeSource":
        return None  # Dynamo adds no check: a function has a __code__
    if not isinstance(dsrc, S.AttrSource) or "." in dsrc.member:
        raise UnsupportedError(f"HASATTR on {g.name}: not an attribute source")
    return ir.HasAttr(conv(dsrc.base), dsrc.member, present)


def _keyword(guard, name):
    fn = guard.create_fn
    kw = getattr(fn, "keywords", None) or {}
    if name not in kw:
        raise UnsupportedError(f"{guard.name}: cannot find {name!r} of {fn}")
    return kw[name]


def _equals(src, value, consts: ConstPool):
    if value is None:
        return ir.IdMatch(src, consts.add(None), "None")
    if type(value) is types.CodeType:
        # Equal code objects are nearly always the same object (a function's __code__):
        # identity is stronger than equality, so a hit is never wrong (an equal copy misses).
        name = getattr(value, "co_qualname", value.co_name)
        return ir.IdMatch(src, consts.add(value), f"<code {name}>")
    if type(value) in (tuple, list) and all(type(v) in _EQ_TYPES for v in value):
        pass
    elif type(value) in (set, frozenset) and all(type(v) in (str, bytes, int) for v in value):
        # Set equality, checked natively element by element with exact
        # types (trt_equals): {1} == {True} == {1.0} in Python, but a
        # version captured with {1} must not serve {True}.
        pass
    elif type(value) not in _EQ_TYPES:
        raise UnsupportedError(f"equality guard on {src} of type {type(value).__name__}")
    # A NaN: Dynamo guards `math.isnan(x)` (no value equals NaN); trt_equals checks that the
    # argument is a float NaN of the same bits (sign and payload), a stronger check.
    t = type(value)
    return ir.EqualsMatch(src, consts.add(t), consts.add(value), _describe(value))


def _tensor_match(src, value, dyn_src, cap, consts: ConstPool, rt):
    if not isinstance(value, torch.Tensor):
        raise UnsupportedError(f"TENSOR_MATCH on a non-tensor at {src}")
    t = type(value)
    if t not in (torch.Tensor, torch.nn.Parameter):
        raise UnsupportedError(f"tensor subclass {t.__name__} at {src}")
    if value.layout != torch.strided:
        raise UnsupportedError(f"{value.layout} tensor at {src}")
    if getattr(value, "_dynamo_dynamic_indices", None) or getattr(
            value, "_dynamo_weak_dynamic_indices", None):
        raise UnsupportedError(f"tensor marked dynamic by hand at {src}")
    sizes, strides = cap.sizes_strides.get(dyn_src, (tuple(value.shape), value.stride()))
    dev = value.device
    return ir.TensorMatch(
        source=src, type_const=consts.add(t), type_name=t.__name__,
        dtype=rt.enum_code(value.dtype), dtype_name=str(value.dtype).replace("torch.", ""),
        device_type=rt.enum_code(dev), device_index=-1 if dev.index is None else dev.index,
        device_name=str(dev), requires_grad=bool(value.requires_grad),
        dispatch_keys=rt.dispatch_keys(value), sizes=tuple(sizes), strides=tuple(strides))


# ------------------------------------------------------------ shape guards

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^", ast.LShift: "<<",
           ast.RShift: ">>"}
_CMPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
         ast.GtE: ">="}


# Python float arithmetic in a shape guard (ir.FloatExpr): sympy prints ToFloat as
# torch.sym_float, IntTrueDiv / FloatTrueDiv as /, FloatPow as **, sqrt as torch._sym_sqrt,
# FloorToInt / CeilToInt / TruncToInt / RoundToInt as math.floor / math.ceil / int / round.
_FBINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_SQRT = ("torch._sym_sqrt", "math.sqrt")
_TO_INT = {"math.floor": "floor", "math.ceil": "ceil", "math.trunc": "trunc", "int": "trunc",
           "round": "round", "torch.sym_int": "trunc"}


def _is_float(node) -> bool:
    """Whether a guard's subexpression is a Python float (by Python's rules on its operands)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is float
    if isinstance(node, ast.Call):
        return ast.unparse(node.func) in ("torch.sym_float", _PYFLOAT, *_SQRT)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_float(node.operand)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):
            return True
        if type(node.op) in _FBINOPS and (_is_float(node.left) or _is_float(node.right)):
            return True
        # int ** negative int is a float
        return isinstance(node.op, ast.Pow) and _negative_int(node.right)
    return False


def _negative_int(node) -> bool:
    v = node.operand.value if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
        and isinstance(node.operand, ast.Constant) else None
    return type(v) is int and v > 0


def _fexpr(node, rec, text) -> ir.FloatExpr:
    """A float-valued guard subexpression (an int one: Python's float() of it)."""
    def frec(n):
        return _fexpr(n, rec, text)

    if not _is_float(node):
        return ir.FloatOf(rec(node))
    if isinstance(node, ast.Constant):
        return ir.FloatConst(node.value)
    if isinstance(node, ast.UnaryOp):
        return ir.FloatUn("-", frec(node.operand)) if isinstance(node.op, ast.USub) \
            else frec(node.operand)
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = ast.unparse(node.func)
        if name == "torch.sym_float":
            return ir.FloatOf(rec(node.args[0]))
        if name == _PYFLOAT:
            return ir.PyFloat(rec.conv(rec.mapping[node.args[0].id]))
        if name in _SQRT:
            return ir.FloatUn("sqrt", frec(node.args[0]))
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div) and not _is_float(node.left) \
                and not _is_float(node.right):
            return ir.IntDiv(rec(node.left), rec(node.right))
        return ir.FloatBin(_FBINOPS[type(node.op)], frec(node.left), frec(node.right))
    raise UnsupportedError(f"shape guard {text!r}: cannot translate {ast.dump(node)[:80]}")


# A dynamic float argument's name in a shape guard, once `_FloatNames` has marked it.
_PYFLOAT = "__trident_pyfloat__"


class _FloatNames(ast.NodeTransformer):
    """Each name of a dynamic float argument as `__trident_pyfloat__(name)`: a float operand
    (`_is_float`), read as the Python float itself (`ir.PyFloat`)."""

    def __init__(self, names: set):
        self.names = names

    def visit_Name(self, node):
        if node.id in self.names:
            return ast.Call(ast.Name(_PYFLOAT, ast.Load()), [node], [])
        return node


def _shape_guards(exprs, conv: SourceConverter, floats: set = frozenset()) -> list:
    """The shape guards; `floats`: the sources of the dynamic float arguments, whose symbols,
    with those the shape environment says are floats (`SymbolMap.floats`), are read as Python
    floats (`ir.PyFloat`)."""
    out = []
    for text, mapping in exprs:
        tree = ast.parse(text, mode="eval").body
        names = {n for n, src in mapping.items() if src in floats} \
            | set(getattr(mapping, "floats", ()))
        if names:
            tree = _FloatNames(names).visit(tree)
        out.append(ir.ShapeGuard(_expr(tree, mapping, conv, text), text))
    return out


def _expr(node, mapping, conv, text) -> ir.SymExpr:
    def rec(n):
        return _expr(n, mapping, conv, text)

    rec.conv, rec.mapping = conv, mapping  # (for _fexpr's ir.PyFloat)

    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return ir.IntConst(int(node.value))
    if isinstance(node, ast.Name) and node.id in mapping:
        return ir.SymLeaf(conv.int_leaf(mapping[node.id]))
    if _is_float(node):
        raise UnsupportedError(f"shape guard {text!r}: a float where an int is needed")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return ir.BinOp(_BINOPS[type(node.op)], rec(node.left), rec(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):  # int ** non-negative int
        return ir.BinOp("**", rec(node.left), rec(node.right))
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            return ir.UnOp("-", rec(node.operand))
        if isinstance(node.op, ast.Not):
            return ir.UnOp("not", rec(node.operand))
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        acc = rec(node.values[0])
        for v in node.values[1:]:
            acc = ir.BinOp(op, acc, rec(v))
        return acc
    if isinstance(node, ast.Compare):
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if type(op) not in _CMPS:
                break
            if _is_float(left) or _is_float(right):
                def side(n):  # an int compared with a float: exactly, as Python
                    return _fexpr(n, rec, text) if _is_float(n) else ir.FloatOf(rec(n), True)
                parts.append(ir.FloatCmp(_CMPS[type(op)], side(left), side(right)))
            else:
                parts.append(ir.BinOp(_CMPS[type(op)], rec(left), rec(right)))
            left = right
        else:
            acc = parts[0]
            for p in parts[1:]:
                acc = ir.BinOp("and", acc, p)
            return acc
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "math.isnan"
            and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Call) and ast.unparse(node.args[0].func) == _PYFLOAT):
        node = ast.Call(node.func, node.args[0].args, [])  # a dynamic float's: as before
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "math.isnan"
            and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Name) and node.args[0].id in mapping):
        # Dynamo's NaN specialization of a float symbol (a 0-d tensor's `.item()`)
        return ir.SymLeaf(ir.FloatIsNan(conv(mapping[node.args[0].id])))
    fname = ast.unparse(node.func) if isinstance(node, ast.Call) else None
    if fname in _TO_INT and len(node.args) == 1 and not node.keywords:
        a = node.args[0]
        if _is_float(a):
            return ir.IntOfFloat(_TO_INT[fname], _fexpr(a, rec, text))
        return rec(a)  # of an int: the int
    # max/min/abs; torch 2.14 prints sympy's Max/Min as `torch.sym_max(a, b)` (two arguments)
    fname = {"torch.sym_max": "max", "torch.sym_min": "min"}.get(fname, fname)
    if fname in ("max", "min", "abs") and not node.keywords:
        if fname == "abs" and len(node.args) == 1:
            return ir.UnOp("abs", rec(node.args[0]))
        if fname != "abs" and len(node.args) >= 2:
            acc = rec(node.args[0])
            for a in node.args[1:]:
                acc = ir.BinOp(fname, acc, rec(a))
            return acc
    raise UnsupportedError(f"shape guard {text!r}: cannot translate {ast.dump(node)[:80]}")
