"""ATen-level FX graph -> host-IR program, and the call's result -> output tree.

Every value of the program lives in a frame slot (an IValue in the runtime).
Integers computed from sizes also live in C variables (`SymDef`), so shape
arithmetic is native code; the slot mirror feeds operators that take them.
"""

from __future__ import annotations

import math
import operator

import torch

from ..errors import UnsupportedError
from ..triton.launch import is_triton_hop, key_of, key_transforms, resolve, select_info
from . import nodes as ir
from .launch import Resolver, lower_launch
from .passes import LoweringPlan, lowering_plan
from .passes.below_autograd import library_key, python_kernel_ops
from .passes.fx import arg_value

_SYM_BINOPS = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.floordiv: "//",
    operator.mod: "%", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
    operator.le: "<=", operator.gt: ">", operator.ge: ">=", torch.sym_max: "max",
    torch.sym_min: "min", operator.or_: "|", operator.and_: "&", operator.xor: "^",
    operator.lshift: "<<", operator.rshift: ">>", operator.pow: "**",
}
_SYM_UNOPS = {operator.neg: "-", torch.sym_not: "not"}
# Python float arithmetic on sizes and constants (a node whose value is a float): ir.FloatBin
_FLOAT_BINOPS = {operator.add: "+", operator.sub: "-", operator.mul: "*",
                 operator.truediv: "/", operator.pow: "**"}
_SYM_SQRT = getattr(torch, "_sym_sqrt", None)
# float -> int: ir.IntOfFloat
_TO_INT = {math.trunc: "trunc", math.floor: "floor", math.ceil: "ceil", round: "round",
           torch.sym_int: "trunc"}


def _is_float(node) -> bool:
    """Whether an FX node's value is a Python float (its example value, else its operands)."""
    v = node.meta.get("val", node.meta.get("example_value"))
    if v is not None:
        return isinstance(v, (float, torch.SymFloat))
    return any(isinstance(a, float) or (isinstance(a, torch.fx.Node) and _is_float(a))
               for a in node.args)


class _Lowering:
    def __init__(self, conv, consts, rt, tensor_guards):
        self.conv = conv
        self.consts = consts
        self.rt = rt
        self.tensor_guards = tensor_guards  # IR source -> TensorMatch
        self.plan = LoweringPlan()  # the FX-graph analyses' decisions (ir/passes)
        self.program: list = []
        self.nslots = 0
        # fx node -> ("slot", i) | ("sym", var, slot) | ("float", var, slot) (a double)
        # | ("multi", [slots])
        self.vals: dict = {}
        self.nsym = 0
        self.launches: list = []
        self.nlaunch = 0

    def slot(self) -> int:
        self.nslots += 1
        return self.nslots - 1

    def sym(self, expr) -> tuple:
        """An integer value: ("sym", var, slot)."""
        return self._define("sym", ir.SymDef, expr)

    def float(self, expr) -> tuple:
        """A float value: ("float", var, slot)."""
        return self._define("float", ir.FloatDef, expr)

    def _define(self, kind: str, cls, expr) -> tuple:
        var = f"{kind[0]}{self.nsym}"
        self.nsym += 1
        s = self.slot()
        self.program.append(cls(var, expr, s))
        return (kind, var, s)

    # -- inputs
    def placeholder(self, node, gin) -> None:
        from torch._dynamo.source import TensorPropertySource

        ex = gin.example
        src = gin.source
        if gin.float_arg:
            # A dynamic float: Dynamo's 0-d float64 tensor of it is read only by `.item()`
            # (`_local_scalar_dense`), which stands for the float itself.
            s = self.slot()
            var = f"f{self.nsym}"
            self.nsym += 1
            self.program.append(ir.LoadScalar(s, self.conv(src), "float", var))
            self.vals[node] = ("float_arg", var, s)
        elif isinstance(ex, torch.Tensor):
            s = self.slot()
            self.program.append(ir.LoadTensor(s, self.conv(src)))
            self.vals[node] = ("slot", s)
        elif isinstance(ex, torch.SymInt) or (isinstance(ex, int) and
                                             isinstance(src, TensorPropertySource)):
            leaf = self.conv.int_leaf(src)
            self._need_meta(leaf)
            self.vals[node] = self.sym(ir.SymLeaf(leaf))
        elif isinstance(ex, (torch.SymFloat, float)):
            s = self.slot()
            self.program.append(ir.LoadScalar(s, self.conv(src), "float"))
            self.vals[node] = ("slot", s)
        elif isinstance(ex, int):
            s = self.slot()
            self.program.append(ir.LoadScalar(s, self.conv(src), "int"))
            self.vals[node] = ("slot", s)
        else:
            raise UnsupportedError(f"graph input of type {type(ex).__name__}")

    def tensor_constant(self, node, value) -> None:
        """A tensor the function created from Python values (make_fx keeps it
        as a module attribute, e.g. the 7.0 of `x[0] = 7.0`).  It is kept in
        the constant pool; only copies of it may be used (`lift_fresh_copy`,
        as make_fx emits), so no call can change it or hand it out."""
        from torch._subclasses.fake_tensor import FakeTensor

        if type(value) is not torch.Tensor or isinstance(value, FakeTensor) \
                or value.layout != torch.strided:
            raise UnsupportedError(f"graph constant {node.target} of type {type(value).__name__}")
        users = list(node.users)
        if not users or any(u.target is not torch.ops.aten.lift_fresh_copy.default
                            for u in users):
            raise UnsupportedError(f"graph constant {node.target} used other than by a copy")
        s = self.slot()
        with torch.inference_mode(False):  # a normal tensor, whatever mode captured it
            const = value.detach().clone()
        self.program.append(ir.LoadTensor(s, ir.ConstObj(self.consts.add(const),
                                                         f"tensor constant {node.target}")))
        self.vals[node] = ("slot", s)

    def _need_meta(self, leaf) -> None:
        """Sizes of unguarded tensors are read with api->tensor_prop (codegen)."""

    # -- expressions
    def sym_operand(self, a) -> ir.SymExpr:
        if isinstance(a, torch.fx.Node):
            v = self.vals[a]
            if v[0] == "sym":
                return ir.SymVar(v[1])
            if v[0] == "slot":  # an int produced by an operator (e.g. sym_size)
                var = f"s{self.nsym}"
                self.nsym += 1
                self.program.append(ir.SymFromSlot(var, v[1]))
                self.vals[a] = ("sym", var, v[1])
                return ir.SymVar(var)
            if v[0] == "float":
                raise UnsupportedError("integer arithmetic on a float value")
            raise UnsupportedError("symbolic arithmetic on a multi-output value")
        if isinstance(a, bool) or isinstance(a, int):
            return ir.IntConst(int(a))
        raise UnsupportedError(f"symbolic arithmetic on {type(a).__name__}")

    def float_operand(self, a) -> ir.FloatExpr:
        """`a` as a float: a float value, Python's float() of an integer one, a constant."""
        if isinstance(a, torch.fx.Node):
            v = self.vals[a]
            if v[0] == "float":
                return ir.FloatVar(v[1])
            if v[0] == "slot" and _is_float(a):
                raise UnsupportedError("float arithmetic on a float argument or operator result")
            return ir.FloatOf(self.sym_operand(a))
        if isinstance(a, float):
            return ir.FloatConst(a)
        if isinstance(a, (bool, int)):
            try:
                return ir.FloatConst(float(a))  # Python's conversion, as the operator's
            except OverflowError:
                raise UnsupportedError("an int constant beyond float in float arithmetic")
        raise UnsupportedError(f"float arithmetic on {type(a).__name__}")

    def float_node(self, node) -> None:
        """A node whose value is a Python float, from sizes and constants."""
        t = node.target
        if t is torch.sym_float:
            # float(n) of a symbolic int (x + float(n))
            self.vals[node] = self.float(ir.FloatOf(self.sym_operand(node.args[0])))
        elif t is _SYM_SQRT:
            self.vals[node] = self.float(ir.FloatUn("sqrt", self.float_operand(node.args[0])))
        elif t is operator.neg:
            self.vals[node] = self.float(ir.FloatUn("-", self.float_operand(node.args[0])))
        elif t in _FLOAT_BINOPS and len(node.args) == 2 and not node.kwargs:
            a, b = node.args
            if t is operator.truediv and not any(
                    isinstance(x, float) or (isinstance(x, torch.fx.Node) and _is_float(x))
                    for x in (a, b)):
                e = ir.IntDiv(self.sym_operand(a), self.sym_operand(b))  # int / int
            else:
                e = ir.FloatBin(_FLOAT_BINOPS[t], self.float_operand(a), self.float_operand(b))
            self.vals[node] = self.float(e)
        else:
            raise UnsupportedError(f"float operation {node.format_node()}")

    def arg(self, value, ty) -> ir.Arg:
        """Encode one operator argument for its schema type `ty`."""
        tys = str(ty)
        if isinstance(value, torch.fx.Node):
            v = self.vals[value]
            if v[0] == "multi":
                raise UnsupportedError("a tuple-valued node passed as an argument")
            return ir.Slot(v[-1] if v[0] in ("sym", "float") else v[1])
        if value is None:
            return ir.ConstArg("none", None)
        if isinstance(value, bool):
            return ir.ConstArg("bool", value)
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return ir.ConstArg("int", self.rt.enum_code(value))
        if isinstance(value, torch.device):
            return ir.ConstArg("device", str(value))
        if isinstance(value, int):
            if tys.startswith("float"):
                return ir.ConstArg("double", float(value))
            if not -2 ** 63 <= value < 2 ** 63:
                # PyTorch converts such a Python int by its own rules (a double
                # for a Scalar, an error elsewhere); an int64 literal would wrap.
                raise UnsupportedError(f"integer constant {value} beyond int64")
            return ir.ConstArg("int", value)
        if isinstance(value, float):
            return ir.ConstArg("double", value)
        if isinstance(value, str):
            return ir.ConstArg("str", value)
        if isinstance(value, (list, tuple)):
            items = []
            for x in value:
                if isinstance(x, torch.fx.Node):
                    items.append(self.arg(x, None))
                elif isinstance(x, int) and not isinstance(x, bool) and not -2 ** 63 <= x < 2 ** 63:
                    raise UnsupportedError(f"integer constant {x} beyond int64")
                elif x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)):
                    items.append(x)
                elif isinstance(x, bool):
                    items.append(int(x))
                else:
                    raise UnsupportedError(f"list element of type {type(x).__name__}")
            return ir.ListArg(tuple(items))
        raise UnsupportedError(f"operator argument of type {type(value).__name__}")

    def call(self, node) -> None:
        op = node.target
        schema = op._schema
        if schema.name.startswith("aten::_assert") or op is torch.ops.aten._assert_scalar.default:
            raise UnsupportedError("runtime asserts in the graph")
        if node in self.plan.dead_clones:
            self.vals[node] = self.vals[node.args[0]]  # the intermediate is the copy
            return
        if schema.name == "prims::fma" and not schema.overload_name:
            self.fma(node)
            return
        args = []
        pos = list(node.args)
        for i, a in enumerate(schema.arguments):
            if i < len(pos):
                v = pos[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                raise UnsupportedError(f"{op}: missing argument {a.name}")
            if "Generator" in str(a.type) and v is not None:
                raise UnsupportedError(f"{op}: explicit generator")
            if (isinstance(v, (bool, int, float)) and str(a.type) in ("Tensor", "Tensor?")
                    and library_key(op) in python_kernel_ops()[0]):
                # The runtime passes a number for a Tensor argument as a wrapped-number tensor,
                # which reaches a kernel written in Python as a Python number; a custom op's
                # Python autograd kernel then redispatches with it and fails the schema check
                # (eager's Python call converts the number before any kernel sees it).
                raise UnsupportedError(f"{op}: a Python number for its Tensor argument "
                                       f"{a.name}, and a kernel written in Python")
            args.append(self.arg(v, a.type))
        name, _, overload = schema.name.partition("::")
        full = schema.name
        nret = len(schema.returns)
        outs = tuple(self.slot() for _ in range(nret))
        mutates = any(a.alias_info is not None and a.alias_info.is_write
                      for a in schema.arguments)
        inplace = self.plan.inplace.get(node)
        below = node in self.plan.below
        if inplace:
            # writes only a tensor this program made and nothing reads after: no side effect
            # (nor below the autograd layer, where the dead tensor's version is not bumped)
            full, ovl = inplace
            self.program.append(ir.Call(full, ovl, tuple(args), outs, False, below))
        else:
            self.program.append(ir.Call(full, schema.overload_name, tuple(args), outs, mutates,
                                        below))
        if nret == 1:
            self.vals[node] = ("slot", outs[0])
        else:
            self.vals[node] = ("multi", list(outs))

    def fma(self, node) -> None:
        """Inductor's `prims::fma(a, b, c)` (Dynamo's decomposition of `addcmul_`/`addcdiv_`
        with `value=`, and of `lerp`), whose kernels are Python: `(a * b) + c`, as its ATen
        implementation computes, here as two ATen operators (`b` may be a Python number,
        which the Python autograd kernel would not accept from the runtime)."""
        a, b, c = (arg_value(node, i, x) for i, x in enumerate(node.target._schema.arguments))
        if any(v is None for v in (a, b, c)):
            raise UnsupportedError("prims::fma with a missing argument")
        below = node in self.plan.below
        tensor = torch.ops.aten.mul.Tensor._schema.arguments[1].type
        prod = self.slot()
        self.program.append(ir.Call("aten::mul", "Tensor",
                                    (self.arg(a, tensor), self.arg(b, tensor)),
                                    (prod,), False, below))
        out = self.slot()
        self.program.append(ir.Call("aten::add", "Tensor",
                                    (ir.Slot(prod), self.arg(c, tensor), ir.ConstArg("int", 1)),
                                    (out,), False, below))
        self.vals[node] = ("slot", out)

    def getitem(self, node) -> None:
        base, idx = node.args
        v = self.vals[base]
        if v[0] in ("sym", "float"):
            raise UnsupportedError("an item of a number")
        if v[0] == "multi":
            self.vals[node] = ("slot", v[1][idx])
        else:
            dst = self.slot()
            self.program.append(ir.ListItem(dst, v[1], idx))
            self.vals[node] = ("slot", dst)

    def triton(self, node) -> None:

        k = self.nlaunch
        self.nlaunch += 1
        if k >= len(self.launches):
            raise UnsupportedError("a Triton launch in the graph was not recorded at capture")
        rec = self.launches[k]
        res = resolve(rec)
        kw = node.kwargs
        grids = kw["grid"]
        grid = grids[res.grid_index] if len(grids) > 1 else (grids[0] if grids else (1, 1, 1))
        grid = tuple(grid) + (1,) * (3 - len(grid))
        grid_exprs = tuple(self.sym_operand(g) for g in grid)
        node_kwargs = dict(kw["kwargs"])
        select = self.launch_select(rec, node_kwargs, grids, res)
        self.program.append(lower_launch(res, node_kwargs, grid_exprs,
                                         lambda v: self.arg(v, None), self.rt, self.consts,
                                         select=select))

    def launch_select(self, rec, node_kwargs: dict, grids, res):
        """An ir.LaunchSelect for an autotuned launch with symbolic operands
        (its config, specialisation and grid then vary per call), else None."""
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table


        kernel = kernel_side_table.get_kernel(rec.kernel_idx)
        info = select_info(kernel)
        if info is None:
            return None
        dynamo_tuner, user_tuner, jit = info
        keys, names, kinds, args = [], [], [], {}
        symbolic = False
        for name, v in node_kwargs.items():
            if not isinstance(v, torch.fx.Node):
                continue
            ex = v.meta.get("val", v.meta.get("example_value"))
            if isinstance(ex, torch.Tensor):
                kind = "ptr"
            elif isinstance(ex, (float, torch.SymFloat)):
                kind, symbolic = "double", True
            else:
                kind, symbolic = "int", True
            a = self.arg(v, None)
            keys.append((name, a, kind))
            names.append(name)
            kinds.append(kind)
            args[name] = a
        if not symbolic:
            return None  # every key value is fixed by the version's guards
        if len(grids) not in (1, len(dynamo_tuner.configs)):
            raise UnsupportedError("autotuned launch: Dynamo's grids do not match its configs")
        rows = []
        for g in (grids or [(1, 1, 1)]):
            g = tuple(g) + (1,) * (3 - len(g))
            rows.append(tuple(self.sym_operand(x) for x in g))
        consts = dict(kernel_side_table.get_constant_args(rec.constant_args_idx))
        consts.update({n: v for n, v in node_kwargs.items() if not isinstance(v, torch.fx.Node)})
        transforms = key_transforms(user_tuner, names, kinds, jit)
        resolver = Resolver(dynamo_tuner, user_tuner, jit, names, kinds, consts, args, self.rt,
                            len(rows), transforms)
        # seed the table with the capturing call's own variant
        real = {**consts, **rec.kwargs}
        key = key_of(tuple(kinds), tuple(rec.kwargs[n] for n in names), transforms)
        best = rec.best_config or user_tuner.best_config
        real_grids = [tuple(g) + (1,) * (3 - len(g)) for g in rec.grid] or [(1, 1, 1)]
        if resolver.variant(key, real, best, real_grids) is None:
            raise UnsupportedError(f"autotuned launch of {jit.fn.__qualname__}: "
                                   f"{resolver.python_only.get(key)}")
        return ir.LaunchSelect(self.consts.add(resolver), tuple(keys), tuple(rows), transforms)

    def node(self, node) -> None:
        t = node.target
        for a in (*node.args, *node.kwargs.values()):
            if isinstance(a, torch.fx.Node) and self.vals.get(a, ("",))[0] == "float_arg":
                if t is not torch.ops.aten._local_scalar_dense.default:
                    raise UnsupportedError("a float argument used as a tensor "
                                           f"({node.format_node()})")
                self.vals[node] = ("float", *self.vals[a][1:])
                return
        if "triton_kernel_wrapper" in str(t):
            if not is_triton_hop(t):
                raise UnsupportedError(f"unknown Triton wrapper {t}")
            self.triton(node)
        elif isinstance(t, torch._ops.OpOverload):
            self.call(node)
        elif t is operator.getitem:
            self.getitem(node)
        elif (t in _FLOAT_BINOPS or t is operator.neg) and _is_float(node) \
                or t is torch.sym_float or (t is _SYM_SQRT and t is not None):
            self.float_node(node)
        elif t in _TO_INT and not node.kwargs and (
                len(node.args) == 1 or (t is round and node.args[1:] == (None,))):
            a = node.args[0]
            if isinstance(a, torch.fx.Node) and _is_float(a):
                self.vals[node] = self.sym(ir.IntOfFloat(_TO_INT[t], self.float_operand(a)))
            else:  # of an int: the int
                self.vals[node] = self.sym(self.sym_operand(a))
        elif t in _SYM_BINOPS:
            a, b = node.args
            self.vals[node] = self.sym(ir.BinOp(_SYM_BINOPS[t], self.sym_operand(a),
                                                self.sym_operand(b)))
        elif t in _SYM_UNOPS:
            self.vals[node] = self.sym(ir.UnOp(_SYM_UNOPS[t], self.sym_operand(node.args[0])))
        elif t is getattr(torch, "sym_sum", None):
            (terms,) = node.args
            if not terms:
                raise UnsupportedError("torch.sym_sum of no terms")
            e = self.sym_operand(terms[0])
            for term in terms[1:]:
                e = ir.BinOp("+", e, self.sym_operand(term))
            self.vals[node] = self.sym(e)
        else:
            raise UnsupportedError(f"graph node {node.format_node()} is not an ATen operator")


def lower(cap, conv, consts, rt, guards) -> tuple:
    """Returns (program, output tree, nslots)."""
    tensor_guards = {g.source: g for g in guards if isinstance(g, ir.TensorMatch)}
    lo = _Lowering(conv, consts, rt, tensor_guards)
    lo.plan = lowering_plan(cap, guards)
    lo.launches = list(getattr(cap, "launches", []))
    g = cap.aten_graph.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    if len(placeholders) != len(cap.inputs):
        raise UnsupportedError("ATen graph inputs do not match Dynamo's")
    for n, gin in zip(placeholders, cap.inputs):
        lo.placeholder(n, gin)
    out_node = None
    for n in g.nodes:
        if n.op == "call_function":
            lo.node(n)
        elif n.op == "output":
            out_node = n
        elif n.op == "get_attr":
            lo.tensor_constant(n, getattr(cap.aten_graph, n.target, None))
        elif n.op != "placeholder":
            raise UnsupportedError(f"graph node kind {n.op}")
    graph_outs = out_node.args[0] if out_node is not None else ()
    if not isinstance(graph_outs, (tuple, list)):
        graph_outs = (graph_outs,)
    out_vals = []
    for o in graph_outs:
        if isinstance(o, torch.fx.Node):
            v = lo.vals[o]
            if v[0] == "sym":
                out_vals.append(ir.OutSym(v[1]))
            elif v[0] == "slot":
                out_vals.append(ir.OutSlot(v[1]))
            elif v[0] == "float":
                out_vals.append(ir.OutSlot(v[2]))
            else:
                raise UnsupportedError("multi-output value returned")
        else:
            out_vals.append(None if o is None else o)
    output = _output_tree(cap, out_vals, conv, consts, lo, placeholders)
    return tuple(lo.program), output, lo.nslots


_CONST_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _output_tree(cap, out_vals, conv, consts, lo, placeholders) -> ir.Out:
    """The result as Dynamo rebuilds it (cap.ret, a `capture.returns.Returned`), over IR
    values."""
    from ..capture import returns as ret

    if cap.ret is None:
        raise UnsupportedError("no description of the return value")

    def names_of(d) -> tuple:
        # A new tuple for each object: ConstPool.add keys on identity, and each OutNew has its
        # own keyword-names constant.
        return tuple(n for n in d.names)

    def build(d: ret.ReturnDesc) -> ir.Out:
        if isinstance(d, ret.GraphOutput):
            v = out_vals[d.index]
            if v is None:
                raise UnsupportedError("a returned graph output is None")
            if d.kind == "bool" and isinstance(v, ir.OutSym):
                return ir.OutSym(v.var, "bool")
            return v
        if isinstance(d, ret.InputRef):
            if d.kind == "tensor":
                return ir.OutSource(conv(cap.inputs[d.index].source))
            val = lo.vals[placeholders[d.index]]
            if val[0] != "sym":
                raise UnsupportedError("a returned input scalar")
            return ir.OutSym(val[1], d.kind)
        if isinstance(d, ret.SourceRef):
            return ir.OutSource(conv(d.source))
        if isinstance(d, ret.Const):
            if type(d.value) not in _CONST_TYPES:
                raise UnsupportedError(f"a returned constant of type {type(d.value).__name__}")
            return ir.OutConst(consts.add(d.value), repr(d.value))
        if isinstance(d, ret.Seq):
            items = tuple(build(x) for x in d.items)
            if d.kind == "size":
                return ir.OutSeq("size", items, consts.add(torch.Size))
            return ir.OutSeq(d.kind, items)
        if isinstance(d, ret.DictOf):
            if not all(type(k) in (str, int) for k in d.keys):
                raise UnsupportedError("a returned dict has non-constant keys")
            return ir.OutDict(tuple(consts.add(k) for k in d.keys),
                              tuple(repr(k) for k in d.keys), tuple(build(v) for v in d.values))
        if isinstance(d, ret.NewObject):
            names = names_of(d)
            return ir.OutNew(consts.add(d.cls), d.cls.__qualname__, consts.add(names), names,
                             tuple(build(x) for x in d.values))
        if isinstance(d, ret.Rebuild):  # capture.rebuild's d.fn(**{name: value})
            names = names_of(d)
            values = tuple(ir.OutConst(consts.add(x.value), repr(x.value))
                           if isinstance(x, ret.RebuildArg) else build(x) for x in d.values)
            return ir.OutNew(consts.add(d.fn), d.fn.__name__, consts.add(names), names, values)
        if isinstance(d, ret.Shared):
            return ir.OutShared(d.number, None if d.desc is None else build(d.desc))
        raise UnsupportedError(f"result element {type(d).__name__}")

    if not cap.ret.stores:
        return build(cap.ret.value)
    stores = []
    for s in cap.ret.stores:
        if not isinstance(s.name, str) or not s.name.isidentifier():
            raise UnsupportedError(f"an attribute store to {s.name!r}")
        stores.append(ir.Store(conv(s.target), consts.add(s.name), s.name, build(s.value)))
    return ir.OutStores(build(cap.ret.value), tuple(stores))
