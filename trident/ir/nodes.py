"""Host IR: frozen dataclasses for one version of an SCM.

A `Version` is an ordered list of guard ops followed by a host program.
Guards read *sources* (where a Python value comes from: a parameter, a
global, an attribute of either, ...), and *symbolic expressions* over integer
tensor properties.  The program moves values into frame slots, calls ATen
operators through the dispatcher and rebuilds the function's Python result.

Every node prints itself with `str()`; `ir.printer` prints a whole version.
Constant Python objects (types, identities, equality values) live in the
version's constant pool and are referred to by index (`K[3]`).
"""

from __future__ import annotations

import _thread
import operator
from dataclasses import FrozenInstanceError, dataclass, field, fields
from typing import Union


class Frozen:
    """What `@dataclass(frozen=True)` gives a class (no assignment after `__init__`; equality
    and hash over the compared fields, as a tuple; the dataclass repr), shared by the IR's
    classes instead of generated for each: `frozen` has `dataclass` generate `__init__` only.
    A frozen dataclass costs about 0.45 ms to create (six generated functions, each compiled);
    the IR has over seventy, and a new process imports them all before its first call."""

    __slots__ = ()

    def __setattr__(self, name, value):
        # A field is set once, by __init__; nothing else is set.
        if name in self.__dict__ or name not in type(self).__fields:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            key = type(self).__key
            return key(self) == key(other)
        return NotImplemented

    def __hash__(self):
        return hash(type(self).__key(self))

    def __repr__(self):
        key = (id(self), _thread.get_ident())
        if key in _REPRS:  # (as dataclasses' recursive_repr)
            return "..."
        _REPRS.add(key)
        try:
            return f"{type(self).__qualname__}(" + ", ".join(
                f"{n}={getattr(self, n)!r}" for n in type(self).__shown) + ")"
        finally:
            _REPRS.discard(key)


_REPRS: set = set()


def frozen(cls):
    """`@dataclass(frozen=True)` for the IR's classes, at a third of its creation cost (see
    `Frozen`; `dataclasses.fields`, `replace` and pickling work as for any dataclass)."""
    cls = dataclass(eq=False, repr=False)(cls)
    assert Frozen in cls.__mro__, f"{cls.__qualname__} must derive from Frozen"
    fs = fields(cls)
    compared = tuple(f.name for f in fs if f.compare)
    cls._Frozen__fields = frozenset(f.name for f in fs)
    cls._Frozen__shown = tuple(f.name for f in fs if f.repr)
    cls._Frozen__key = staticmethod(
        operator.attrgetter(*compared) if len(compared) > 1
        else (lambda o, n=compared[0]: (getattr(o, n),)) if compared else (lambda o: ()))
    return cls

# ------------------------------------------------------------------ sources


@frozen
class Local(Frozen):
    """Bound parameter or closure variable `name`, at `index` in the locals array."""

    index: int
    name: str

    def __str__(self) -> str:
        return f"L[{self.name!r}]"


@frozen
class Global(Frozen):
    """A name in the function's globals (falling back to builtins)."""

    name: str

    def __str__(self) -> str:
        return f"G[{self.name!r}]"


@frozen
class ConstObj(Frozen):
    """An object held in the constant pool (e.g. a module)."""

    index: int
    desc: str

    def __str__(self) -> str:
        return f"K[{self.index}]<{self.desc}>"


@frozen
class Attr(Frozen):
    base: "Source"
    name: str

    def __str__(self) -> str:
        return f"{self.base}.{self.name}"


@frozen
class Item(Frozen):
    """`base[key]` with an int or str key, looked up as Python does (`PyObject_GetItem`; an
    exact tuple's, list's or dict's item directly), as Dynamo's getitem accessors do: a tuple
    or list item, `__defaults__[i]`, `__kwdefaults__[name]`, `sys.modules[name]`.  An item
    Dynamo reads as a dict's (DictGetItemSource) is `DictItem`."""

    base: "Source"
    key: object

    def __str__(self) -> str:
        return f"{self.base}[{self.key!r}]"


@frozen
class DictItem(Frozen):
    """The value of constant key `K[key_const]` (printed `desc`) in dict `base`'s own storage,
    as Dynamo's dict_getitem accessor reads it (`PyDict_GetItem`): never the class's
    `__getitem__` or a defaultdict's `__missing__`; a base that is not a dict (exact or
    subclass) or has no such key fails the guard.  Dynamo's DictGetItemSource and
    DictSubclassGetItemSource with a constant key."""

    base: "Source"
    key_const: int
    desc: str

    def __str__(self) -> str:
        return f"{self.base}[{self.desc}]"


@frozen
class TypeOf(Frozen):
    """`type(base)`."""

    base: "Source"

    def __str__(self) -> str:
        return f"type({self.base})"


@frozen
class CallNoArgs(Frozen):
    """`base()`: the value a no-argument call returns now (Dynamo's
    CallFunctionNoArgsSource, e.g. `torch.cuda.current_device()`)."""

    base: "Source"

    def __str__(self) -> str:
        return f"{self.base}()"


@frozen
class DictEntryAt(Frozen):
    """A dict's key (`list(dict.keys(base))[index]`, Dynamo's
    ConstDictKeySource: e.g. a config dict whose enum keys are guarded) or
    value (`base[list(dict.keys(base))[index]]`) by position."""

    base: "Source"
    index: int
    value: bool = False

    def __str__(self) -> str:
        return f"list({self.base}.{'values' if self.value else 'keys'}())[{self.index}]"


@frozen
class GenericAttr(Frozen):
    """`object.__getattribute__(base, name)`: the attribute read past the class's own
    `__getattribute__` / `__getattr__` (Dynamo's GenericAttrSource, e.g. the instance dict of
    a transformers config, whose class overrides `__getattribute__`)."""

    base: "Source"
    name: str

    def __str__(self) -> str:
        return f"object.__getattribute__({self.base}, {self.name!r})"


@frozen
class ContextVarGet(Frozen):
    """`base.get()` of a `contextvars.ContextVar` (`base.get(default)` with the constant
    `default_const`; Dynamo's ContextVarGetSource, torch 2.14): read on every call, as the
    value depends on the calling thread's context.  Unset with no default: the guard fails."""

    base: "Source"
    default_const: int | None = None
    default_desc: str = ""

    def __str__(self) -> str:
        return f"{self.base}.get({self.default_desc})"


Source = Union[Local, Global, ConstObj, Attr, Item, DictItem, TypeOf, CallNoArgs, DictEntryAt,
               GenericAttr, ContextVarGet]

# ------------------------------------------------ integer-valued properties


@frozen
class TensorSize(Frozen):
    tensor: Source
    dim: int

    def __str__(self) -> str:
        return f"{self.tensor}.size({self.dim})"


@frozen
class TensorStride(Frozen):
    tensor: Source
    dim: int

    def __str__(self) -> str:
        return f"{self.tensor}.stride({self.dim})"


@frozen
class TensorOffset(Frozen):
    tensor: Source

    def __str__(self) -> str:
        return f"{self.tensor}.storage_offset()"


@frozen
class PyInt(Frozen):
    """A Python int argument Dynamo made dynamic."""

    source: Source

    def __str__(self) -> str:
        return f"int({self.source})"


@frozen
class FloatIsNan(Frozen):
    """1 if the value at `source` is a float NaN, 0 if another float; anything else fails
    the guard (Dynamo's `math.isnan` over a float symbol: `not math.isnan(L['y'].item())`)."""

    source: Source

    def __str__(self) -> str:
        return f"isnan({self.source})"


IntLeaf = Union[TensorSize, TensorStride, TensorOffset, PyInt, FloatIsNan]

# ---------------------------------------------------- symbolic expressions


@frozen
class SymLeaf(Frozen):
    leaf: IntLeaf

    def __str__(self) -> str:
        return str(self.leaf)


@frozen
class SymVar(Frozen):
    """A value computed earlier in the program (`SymDef`)."""

    name: str

    def __str__(self) -> str:
        return self.name


@frozen
class IntConst(Frozen):
    value: int

    def __str__(self) -> str:
        return str(self.value)


@frozen
class BinOp(Frozen):
    """Integer or boolean binary op; `//` and `%` have Python's floor semantics."""

    op: str  # + - * // % ** == != < <= > >= and or max min
    lhs: "SymExpr"
    rhs: "SymExpr"

    def __str__(self) -> str:
        if self.op in ("max", "min"):
            return f"{self.op}({self.lhs}, {self.rhs})"
        return f"({self.lhs} {self.op} {self.rhs})"


@frozen
class UnOp(Frozen):
    op: str  # - not abs

    operand: "SymExpr"

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@frozen
class Shared(Frozen):
    """A subexpression that occurs more than once, computed once, here where it first occurs
    (`passes.shared_subexpressions`); later occurrences are `SharedRef(index)`."""

    index: int
    expr: "SymExpr"

    def __str__(self) -> str:
        return f"(t{self.index} := {self.expr})"


@frozen
class SharedRef(Frozen):
    """The value of `Shared(index)`, computed earlier in the same expression."""

    index: int

    def __str__(self) -> str:
        return f"t{self.index}"


@frozen
class IntOfFloat(Frozen):
    """Python's math.trunc / floor / ceil, int() or round() of a float (`FloatExpr`); a value
    beyond int64, inf or NaN fails (a miss)."""

    op: str  # trunc floor ceil round
    operand: "FloatExpr"

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@frozen
class FloatCmp(Frozen):
    """A comparison (== != < <= > >=) with a float side, as Python's (IEEE: NaN compares
    false but for !=); 1 or 0."""

    op: str
    lhs: "FloatExpr"
    rhs: "FloatExpr"

    def __str__(self) -> str:
        return f"({self.lhs} {self.op} {self.rhs})"


SymExpr = Union[SymLeaf, SymVar, IntConst, BinOp, UnOp, Shared, SharedRef, IntOfFloat,
                FloatCmp]

# ------------------------------------------------- float expressions
# Python's float arithmetic over sizes (`x.size(0) ** -0.5`, `1.0 / n`, `math.sqrt(n)`), as C
# doubles: IEEE-754 + - * / and sqrt round as Python's do (the units are compiled with
# -ffp-contract=off).  Where Python raises or leaves float (a division by zero, a negative
# sqrt, pow's complex, overflow and domain errors, an int / int beyond 2**53) the value fails
# (`ok = 0`): a miss, so that the call runs as eager does.


@frozen
class FloatVar(Frozen):
    """A float computed earlier in the program (`FloatDef`)."""

    name: str

    def __str__(self) -> str:
        return self.name


@frozen
class FloatConst(Frozen):
    value: float

    def __str__(self) -> str:
        return repr(self.value)


@frozen
class FloatOf(Frozen):
    """Python's float() of an integer (int64 -> double rounds to nearest, as Python's).
    `exact`: the int side of an int-float comparison, which Python makes exactly: the value
    fails beyond 2**53, where the double could round."""

    expr: SymExpr
    exact: bool = False

    def __str__(self) -> str:
        return f"float({self.expr})" if not self.exact else str(self.expr)


@frozen
class IntDiv(Frozen):
    """Python's `int / int` (exact operands up to 2**53, where it is the double division)."""

    lhs: SymExpr
    rhs: SymExpr

    def __str__(self) -> str:
        return f"({self.lhs} / {self.rhs})"


@frozen
class FloatBin(Frozen):
    op: str  # + - * / **
    lhs: "FloatExpr"
    rhs: "FloatExpr"

    def __str__(self) -> str:
        return f"({self.lhs} {self.op} {self.rhs})"


@frozen
class FloatUn(Frozen):
    op: str  # - sqrt

    operand: "FloatExpr"

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@frozen
class PyFloat(Frozen):
    """The Python float at `source` (a dynamic float argument, in a shape guard: Dynamo's
    `_v5 > 1.0`); anything but a float fails the guard."""

    source: Source

    def __str__(self) -> str:
        return f"float {self.source}"


FloatExpr = Union[FloatVar, FloatConst, FloatOf, IntDiv, FloatBin, FloatUn, PyFloat]


def float_int_parts(e) -> list:
    """The integer expressions a float expression reads (`FloatOf`'s and `IntDiv`'s)."""
    if isinstance(e, FloatOf):
        return [e.expr]
    if isinstance(e, IntDiv):
        return [e.lhs, e.rhs]
    if isinstance(e, FloatBin):
        return float_int_parts(e.lhs) + float_int_parts(e.rhs)
    if isinstance(e, FloatUn):
        return float_int_parts(e.operand)
    return []


def float_vars(e) -> list:
    """The names of the earlier floats (`FloatVar`) a float expression reads."""
    if isinstance(e, FloatVar):
        return [e.name]
    if isinstance(e, FloatBin):
        return float_vars(e.lhs) + float_vars(e.rhs)
    if isinstance(e, FloatUn):
        return float_vars(e.operand)
    return []

# ------------------------------------------------------------------ guards


@frozen
class TensorMatch(Frozen):
    """Dynamo's TENSOR_MATCH: exact Python type, dispatch keys, dtype, device,
    requires_grad, dim, and every static size and stride (None = symbolic)."""

    source: Source
    type_const: int
    type_name: str
    dtype: int
    dtype_name: str
    device_type: int
    device_index: int
    device_name: str
    requires_grad: bool
    dispatch_keys: int
    sizes: tuple
    strides: tuple

    def __str__(self) -> str:
        def dims(xs):
            return "(" + ", ".join("?" if x is None else str(x) for x in xs) + ")"

        return (f"tensor_match {self.source}: {self.type_name} {self.dtype_name} "
                f"{self.device_name} size={dims(self.sizes)} stride={dims(self.strides)} "
                f"requires_grad={self.requires_grad} keys=0x{self.dispatch_keys:x}")


@frozen
class TypeMatch(Frozen):
    source: Source
    type_const: int
    type_name: str

    def __str__(self) -> str:
        return f"type_match {self.source}: {self.type_name}"


@frozen
class IdMatch(Frozen):
    """`source is K[const]` (the constant pool keeps the object alive, so its
    identity cannot be reused by another object)."""

    source: Source
    const: int
    desc: str

    def __str__(self) -> str:
        return f"id_match {self.source} is {self.desc}"


@frozen
class EqualsMatch(Frozen):
    """Exact type and equal value (ints, floats, bools, str, dtype, device, ...)."""

    source: Source
    type_const: int
    const: int
    desc: str

    def __str__(self) -> str:
        return f"equals_match {self.source} == {self.desc}"


@frozen
class LengthMatch(Frozen):
    source: Source
    type_const: int
    type_name: str
    length: int

    def __str__(self) -> str:
        return f"length_match len({self.source}) == {self.length} ({self.type_name})"


@frozen
class DictKeysMatch(Frozen):
    source: Source
    const: int  # tuple of keys, in order
    desc: str

    def __str__(self) -> str:
        return f"dict_keys_match {self.source}.keys() == {self.desc}"


@frozen
class NotInDict(Frozen):
    """`name not in source.__dict__` (NOT_PRESENT_IN_GENERIC_DICT)."""

    source: Source
    name: str

    def __str__(self) -> str:
        return f"not_in_dict {self.name!r} not in {self.source}.__dict__"


@frozen
class HasAttr(Frozen):
    """`hasattr(source, name)` is `present` (Dynamo's HASATTR).  A lookup that raises anything
    but AttributeError fails the guard."""

    source: Source
    name: str
    present: bool

    def __str__(self) -> str:
        return f"{'' if self.present else 'not '}hasattr({self.source}, {self.name!r})"


@frozen
class CallCheck(Frozen):
    """`K[fn](source, K[arg]) is True`: a check only the object's own Python
    code can make (an opaque object's guard_fn).  It runs Python on hits."""

    source: Source
    fn: int
    arg: int
    desc: str

    def __str__(self) -> str:
        return f"call_check {self.desc}({self.source})"


@frozen
class Contains(Frozen):
    """`K[key] in source` (or `not in`) for a dict (`kind` "dict") or a set or
    frozenset (`kind` "set"): Dynamo's DICT_CONTAINS, DICT_NOT_CONTAINS,
    SET_CONTAINS, SET_NOT_CONTAINS.  Any other container fails the guard."""

    source: Source
    kind: str
    key: int
    present: bool
    desc: str

    def __str__(self) -> str:
        op = "in" if self.present else "not in"
        return f"contains {self.desc} {op} {self.source} ({self.kind})"


@frozen
class LoggerQuiet(Frozen):
    """The logger at `source` is not enabled for `level` (a log call the
    version dropped; see capture/adapters.py).  Read from the logger's own
    `disabled` flag and `_cache`, as `Logger.isEnabledFor` does."""

    source: Source
    level: int
    level_const: int  # K[] index of the level as a Python int

    def __str__(self) -> str:
        return f"logger_quiet {self.source} level {self.level}"


@frozen
class SameObject(Frozen):
    """DUPLICATE_INPUT: two sources are one object."""

    a: Source
    b: Source

    def __str__(self) -> str:
        return f"same_object {self.a} is {self.b}"


@frozen
class Distinct(Frozen):
    """No two of these tensor sources are one object (Dynamo's no-aliasing)."""

    sources: tuple

    def __str__(self) -> str:
        return "distinct " + ", ".join(map(str, self.sources))


@frozen
class GlobalState(Frozen):
    """Grad mode, autocast, determinism, torch-function and dispatch TLS, ...:
    the runtime's snapshot compared word by word."""

    words: tuple
    covers: tuple  # Dynamo guard kinds this op stands for

    def __str__(self) -> str:
        return "global_state == capture-time snapshot (" + ", ".join(self.covers) + ")"


@frozen
class ShapeGuard(Frozen):
    expr: SymExpr
    text: str  # Dynamo's own rendering, for humans
    # `expr` with each repeated subexpression computed once (Shared / SharedRef), when
    # `passes.shared_subexpressions` found one to share; what codegen evaluates.
    shared: "SymExpr | None" = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"shape {self.expr}    # {self.text}"


Guard = Union[TensorMatch, TypeMatch, IdMatch, EqualsMatch, LengthMatch, DictKeysMatch,
              NotInDict, CallCheck, Contains, LoggerQuiet, SameObject, Distinct, GlobalState, ShapeGuard]

# ----------------------------------------------------------------- program


@frozen
class Slot(Frozen):
    index: int

    def __str__(self) -> str:
        return f"%{self.index}"


@frozen
class ConstArg(Frozen):
    """An operator argument fixed at capture: kind is none/int/double/bool/str/device."""

    kind: str
    value: object

    def __str__(self) -> str:
        return "None" if self.kind == "none" else repr(self.value)


@frozen
class ListArg(Frozen):
    """A list argument; each item is a Slot, an int/float constant, or None."""

    items: tuple

    def __str__(self) -> str:
        return "[" + ", ".join("None" if i is None else str(i) for i in self.items) + "]"


Arg = Union[Slot, ConstArg, ListArg]


@frozen
class LoadTensor(Frozen):
    slot: int
    source: Source

    def __str__(self) -> str:
        return f"%{self.slot} = tensor {self.source}"


@frozen
class LoadScalar(Frozen):
    """A Python int/float argument Dynamo left unspecialized; a float read as a float
    variable too (`var`: a dynamic float, `FloatVar(var)` in float expressions)."""

    slot: int
    source: Source
    kind: str  # int | float
    var: str | None = None

    def __str__(self) -> str:
        named = f"{self.var} = " if self.var else ""
        return f"%{self.slot} = {named}{self.kind} {self.source}"


@frozen
class SymDef(Frozen):
    """A C integer computed from sizes: `var = expr`; mirrored in slot."""

    var: str
    expr: SymExpr
    slot: int

    def __str__(self) -> str:
        return f"%{self.slot} = {self.var} = {self.expr}"


@frozen
class FloatDef(Frozen):
    """A C double computed from sizes and constants (`torch.sym_float`, float arithmetic on
    sizes): `var = expr`; mirrored in slot, for an operator or a launch, or returned."""

    var: str
    expr: FloatExpr
    slot: int

    def __str__(self) -> str:
        return f"%{self.slot} = {self.var} = {self.expr}"


@frozen
class SymFromSlot(Frozen):
    """An integer an operator returned, read back into C."""

    var: str
    slot: int

    def __str__(self) -> str:
        return f"{self.var} = int(%{self.slot})"


@frozen
class Call(Frozen):
    op: str        # aten::add
    overload: str  # Tensor
    args: tuple
    outs: tuple
    mutates: bool = False  # writes to an argument (in-place / out= op)
    # runs below the autograd layer (Autograd and ADInplaceOrView keys excluded; see
    # ir/passes/below_autograd.py)
    below: bool = False

    def __str__(self) -> str:
        outs = ", ".join(f"%{o}" for o in self.outs) or "_"
        name = f"{self.op}.{self.overload}" if self.overload else self.op
        return f"{outs} = {name}({', '.join(map(str, self.args))})"


@frozen
class ListItem(Frozen):
    dst: int
    src: int
    index: int

    def __str__(self) -> str:
        return f"%{self.dst} = %{self.src}[{self.index}]"


@frozen
class LaunchParam(Frozen):
    """One parameter of a Triton kernel as its CUBIN expects it."""

    name: str
    kind: str      # ptr i1 i8 i16 i32 i64 u8 u16 u32 u64 fp16 bf16 fp32 fp64, or one
    arg: Arg       # Slot (a runtime value) or ConstArg
    div16: bool    # precondition: 16-byte aligned pointer / int multiple of 16
    dtype: int     # ptr: c10::ScalarType the CUBIN was compiled for (-1: any)

    def __str__(self) -> str:
        pre = "[div16]" if self.div16 else ""
        if self.kind == "one":
            return f"{self.name}={self.arg}==1"
        return f"{self.name}:{self.kind}{pre}={self.arg}"


@frozen
class TritonLaunch(Frozen):
    """Launch one CUBIN on the current stream of its tensors' device."""

    kernel: str     # the @triton.jit function's qualified name
    symbol: str     # the kernel's name inside the CUBIN
    cubin_const: int
    num_warps: int
    num_ctas: int
    shared: int
    cooperative: bool
    pdl: bool
    params: tuple
    grid: tuple     # three SymExpr
    config: str     # the autotune config / constexprs chosen at capture, for humans
    select: "LaunchSelect | None" = None  # chooses its variant per call (autotuned)

    def __str__(self) -> str:
        g = ", ".join(map(str, self.grid))
        s = (f"launch {self.kernel}[{g}]({', '.join(map(str, self.params))}) "
             f"warps={self.num_warps} ctas={self.num_ctas} shared={self.shared}"
             + (f" {self.config}" if self.config else ""))
        if self.select is not None:
            s += f"\n      {self.select}"
        return s


@frozen
class LaunchSelect(Frozen):
    """An @triton.autotune launch whose key reads values that change within
    the version: each call computes its key natively (every symbolic int's
    value, each pointer's 16-byte alignment) and launches the variant that key
    maps to; a new key calls the resolver (the user's autotuner, as eager
    would).  The launch's own CUBIN and params above are the capturing call's
    variant, shown for humans and seeded into the resolver's table."""

    resolver_const: int   # K index of the ir.launch.Resolver
    keys: tuple           # ((name, Slot, kind)), kind: ptr | int | double
    grids: tuple          # per config row: three SymExpr
    transforms: tuple = ()  # per key: raw | class | log2 | align32 (what the key keeps)

    def __str__(self) -> str:
        ts = self.transforms or ("raw",) * len(self.keys)
        ks = ", ".join(f"{n}:{k}{'' if t == 'raw' else '/' + t}={a}"
                       for (n, a, k), t in zip(self.keys, ts))
        return (f"select key({ks}) over {len(self.grids)} grid rows, "
                f"variants by K[{self.resolver_const}]")


Instr = Union[LoadTensor, LoadScalar, SymDef, FloatDef, SymFromSlot, Call, ListItem,
              TritonLaunch]

# ------------------------------------------------------------------ output


@frozen
class OutSlot(Frozen):
    slot: int

    def __str__(self) -> str:
        return f"%{self.slot}"


@frozen
class OutSym(Frozen):
    var: str
    kind: str = "int"  # int | bool

    def __str__(self) -> str:
        return self.var if self.kind == "int" else f"bool({self.var})"


@frozen
class OutConst(Frozen):
    const: int
    desc: str

    def __str__(self) -> str:
        return self.desc


@frozen
class OutSource(Frozen):
    """An input object returned as itself."""

    source: Source

    def __str__(self) -> str:
        return str(self.source)


@frozen
class OutSeq(Frozen):
    kind: str  # tuple | list | size (a tuple passed to K[ctor], torch.Size)
    items: tuple
    ctor: int = -1

    def __str__(self) -> str:
        inner = ", ".join(map(str, self.items))
        if self.kind == "size":
            return f"torch.Size([{inner}])"
        return f"({inner},)" if self.kind == "tuple" else f"[{inner}]"


@frozen
class OutDict(Frozen):
    keys: tuple   # constant indices of the keys
    key_descs: tuple
    values: tuple

    def __str__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(self.key_descs, self.values)) + "}"


@frozen
class OutNew(Frozen):
    """`K[cls](**{names: values})`, one vectorcall with the keyword names `K[kwnames]` (a tuple
    of str): a dataclass object the function created (a ModelOutput), another object it
    returns that `capture.rebuild` makes (a numpy array, a deque, a set, a namedtuple, an
    OrderedDict), or, in an eager version (`Version.eager`), the function itself called in
    Python with the call's arguments."""

    cls: int
    desc: str  # the class's qualified name
    kwnames: int
    names: tuple
    values: tuple

    def __str__(self) -> str:
        return f"{self.desc}(" + ", ".join(f"{n}={v}" for n, v in zip(self.names, self.values)) + ")"


@frozen
class Store(Frozen):
    """`setattr(target, name, value)` on an object that existed before the call."""

    target: Source
    name: int  # constant index of the attribute name
    name_desc: str
    value: "Out"

    def __str__(self) -> str:
        return f"{self.target}.{self.name_desc} = {self.value}"


@frozen
class OutStores(Frozen):
    """The function's attribute stores on pre-existing objects, made in order after the
    program and before the result is built (as Dynamo replays them), then the result."""

    result: "Out"
    stores: tuple  # of Store

    def __str__(self) -> str:
        return "; ".join(map(str, self.stores)) + f"; return {self.result}"


@frozen
class OutShared(Frozen):
    """One object the result holds at several places (a list the function returns twice):
    built at its first place (`item`), the same object again at the others (`item` None)."""

    share: int
    item: "Out | None" = None

    def __str__(self) -> str:
        return f"&{self.share}" if self.item is None else f"{self.item} as &{self.share}"


Out = Union[OutSlot, OutSym, OutConst, OutSource, OutSeq, OutDict, OutNew, OutStores,
            OutShared]


# ------------------------------------------------------- environment block


@frozen
class EnvStep(Frozen):
    """One load of an environment guard's source, from its root: `op` is a key of
    `abi.ENV_STEP_OPS` (global, const, attr, item_int, item_str, typeof, dict_key_at,
    dict_value_at, dict_item); `arg` a name (global, attr, item_str) or an int (dict_item: the
    key's index in the constant pool)."""

    op: str
    arg: object

    def __str__(self) -> str:
        return f"{self.op} {self.arg}"


@frozen
class EnvCheck(Frozen):
    """Guard `guard` of the version as a row of its environment block: the steps loading each
    of its sources (`chains`: one, or two for same_object), then the check `kind` (a key of
    `abi.ENV_GUARD_KINDS`) with its operands (constant indices `c0`, `c1`, a `name`, a length
    `n`) and `flags` (keys of `abi.ENV_GUARD_FLAGS`)."""

    guard: int
    kind: str
    flags: tuple
    chains: tuple
    c0: int = 0
    c1: int = 0
    name: "str | None" = None
    n: int = 0

    def __str__(self) -> str:
        return f"[{self.guard}]" + (f" ({', '.join(self.flags)})" if self.flags else "")


@frozen
class EnvBlock(Frozen):
    """The guards on the environment alone (`passes.env_block`), checked as one block that is
    evaluated once and then re-checked through version-tag records (trt_envblock in
    scm_prelude.h); its check stands where the first of them stood."""

    checks: tuple  # of EnvCheck, in guard order

    @property
    def guards(self) -> tuple:
        return tuple(c.guard for c in self.checks)

    def __str__(self) -> str:
        return ("environment block " + " ".join(map(str, self.checks))
                + ": one check, cached on version tags")


@frozen
class Version(Frozen):
    """One specialization: guards, then the host program and its result."""

    index: int
    guards: tuple
    program: tuple
    output: Out
    nslots: int
    consts: tuple = field(compare=False)
    reason: str = ""  # why it was captured (the guard that missed)
    notes: tuple = field(default=(), compare=False)  # how it was captured (capture notes)
    # The mode the whole program runs under (RUN_MODES): the function's own decorator-shaped
    # `torch.no_grad()` / `enable_grad()` / `inference_mode()`, entered natively after the
    # guards and left on every exit.
    run_mode: int = 0
    # Why this path runs eagerly, for an eager version: its capture was refused, and its program
    # is one call of the function itself in Python (an `OutNew` of the call's arguments) under
    # the guards Dynamo recorded for the path ("" for a native version; see trident/eager.py).
    eager: str = ""
    # What the passes decided (trident/ir/passes): the environment block, and the Python ints
    # the program reads, each checked after the guards to fit int64 (one beyond is a miss).
    env: "EnvBlock | None" = None
    int_checks: tuple = ()


# ir.Version.run_mode -> (runtime constant TRT_MODE_*, what explain shows).
RUN_MODES = {
    0: ("TRT_MODE_NONE", ""),
    1: ("TRT_MODE_NO_GRAD", "torch.no_grad()"),
    2: ("TRT_MODE_ENABLE_GRAD", "torch.enable_grad()"),
    3: ("TRT_MODE_INFERENCE", "torch.inference_mode()"),
}
