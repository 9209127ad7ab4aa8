"""ATen-level FX graph -> host-IR program, and the call's result -> output tree.

Every value of the program lives in a frame slot (an IValue in the runtime).
Integers computed from sizes also live in C variables (`SymDef`), so shape
arithmetic is native code; the slot mirror feeds operators that take them.
"""

from __future__ import annotations

import operator

import torch

from ..errors import UnsupportedError
from . import nodes as ir

_SYM_BINOPS = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.floordiv: "//",
    operator.mod: "%", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
    operator.le: "<=", operator.gt: ">", operator.ge: ">=", torch.sym_max: "max",
    torch.sym_min: "min", operator.or_: "|", operator.and_: "&", operator.xor: "^",
    operator.lshift: "<<", operator.rshift: ">>",
}
_SYM_UNOPS = {operator.neg: "-", torch.sym_not: "not"}


class _Lowering:
    def __init__(self, conv, consts, rt, tensor_guards):
        self.conv = conv
        self.consts = consts
        self.rt = rt
        self.tensor_guards = tensor_guards  # IR source -> TensorMatch
        self.program: list = []
        self.nslots = 0
        self.vals: dict = {}  # fx node -> ("slot", i) | ("sym", var, slot) | ("multi", [slots])
        self.nsym = 0
        self.launches: list = []
        self.nlaunch = 0

    def slot(self) -> int:
        self.nslots += 1
        return self.nslots - 1

    def sym(self, expr) -> tuple:
        var = f"s{self.nsym}"
        self.nsym += 1
        s = self.slot()
        self.program.append(ir.SymDef(var, expr, s))
        return ("sym", var, s)

    # -- inputs
    def placeholder(self, node, gin) -> None:
        from torch._dynamo.source import TensorPropertySource

        ex = gin.example
        src = gin.source
        if isinstance(ex, torch.Tensor):
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
            raise UnsupportedError("symbolic arithmetic on a multi-output value")
        if isinstance(a, bool) or isinstance(a, int):
            return ir.IntConst(int(a))
        raise UnsupportedError(f"symbolic arithmetic on {type(a).__name__}")

    def arg(self, value, ty) -> ir.Arg:
        """Encode one operator argument for its schema type `ty`."""
        tys = str(ty)
        if isinstance(value, torch.fx.Node):
            v = self.vals[value]
            if v[0] == "multi":
                raise UnsupportedError("a tuple-valued node passed as an argument")
            return ir.Slot(v[-1] if v[0] == "sym" else v[1])
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
            args.append(self.arg(v, a.type))
        name, _, overload = schema.name.partition("::")
        full = schema.name
        nret = len(schema.returns)
        outs = tuple(self.slot() for _ in range(nret))
        mutates = any(a.alias_info is not None and a.alias_info.is_write
                      for a in schema.arguments)
        self.program.append(ir.Call(full, schema.overload_name, tuple(args), outs, mutates))
        if nret == 1:
            self.vals[node] = ("slot", outs[0])
        else:
            self.vals[node] = ("multi", list(outs))

    def getitem(self, node) -> None:
        base, idx = node.args
        v = self.vals[base]
        if v[0] == "multi":
            self.vals[node] = ("slot", v[1][idx])
        else:
            dst = self.slot()
            self.program.append(ir.ListItem(dst, v[1], idx))
            self.vals[node] = ("slot", dst)

    def triton(self, node) -> None:
        from ..triton.launch import lower_launch, resolve

        k = self.nlaunch
        self.nlaunch += 1
        if k >= len(self.launches):
            raise UnsupportedError("a Triton launch in the graph was not recorded at capture")
        res = resolve(self.launches[k])
        kw = node.kwargs
        grids = kw["grid"]
        grid = grids[res.grid_index] if grids else (1, 1, 1)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        grid_exprs = tuple(self.sym_operand(g) for g in grid)
        self.program.append(lower_launch(res, dict(kw["kwargs"]), grid_exprs,
                                         lambda v: self.arg(v, None), self.rt, self.consts))

    def node(self, node) -> None:
        t = node.target
        if "triton_kernel_wrapper" in str(t):
            from ..triton.launch import is_triton_hop

            if not is_triton_hop(t):
                raise UnsupportedError(f"unknown Triton wrapper {t}")
            self.triton(node)
        elif isinstance(t, torch._ops.OpOverload):
            self.call(node)
        elif t is operator.getitem:
            self.getitem(node)
        elif t in _SYM_BINOPS:
            a, b = node.args
            self.vals[node] = self.sym(ir.BinOp(_SYM_BINOPS[t], self.sym_operand(a),
                                                self.sym_operand(b)))
        elif t in _SYM_UNOPS:
            self.vals[node] = self.sym(ir.UnOp(_SYM_UNOPS[t], self.sym_operand(node.args[0])))
        else:
            raise UnsupportedError(f"graph node {node.format_node()} is not an ATen operator")


def lower(cap, conv, consts, rt, guards) -> tuple:
    """Returns (program, output tree, nslots)."""
    tensor_guards = {g.source: g for g in guards if isinstance(g, ir.TensorMatch)}
    lo = _Lowering(conv, consts, rt, tensor_guards)
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
            else:
                raise UnsupportedError("multi-output value returned")
        else:
            out_vals.append(None if o is None else o)
    output = _output_tree(cap, out_vals, conv, consts)
    return tuple(lo.program), output, lo.nslots


_LEAF_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _output_tree(cap, out_vals, conv, consts) -> ir.Out:
    """Map the capturing call's real result onto graph outputs by identity."""
    from torch._dynamo.source import LocalSource

    outs = cap.graph_outputs
    inputs = []
    for gin in cap.inputs:
        inputs.append(gin)

    def input_source_of(obj):
        # Tensors passed in and returned unchanged (e.g. after an in-place op).
        for e in cap.guard_entries:
            if e.guard_type == "TENSOR_MATCH" and e.value is obj:
                return conv(e.orig_guard.originating_source)
        return None

    def build(obj, depth=0):
        if depth > 32:
            raise UnsupportedError("result nested too deeply")
        if isinstance(obj, torch.Tensor):
            for i, o in enumerate(outs):
                if o is obj and isinstance(out_vals[i], ir.OutSlot):
                    return out_vals[i]
            s = input_source_of(obj)
            if s is not None:
                return ir.OutSource(s)
            raise UnsupportedError("a returned tensor is neither a graph output nor an input")
        if type(obj) in (tuple, list):
            return ir.OutSeq(type(obj).__name__, tuple(build(x, depth + 1) for x in obj))
        if type(obj) is dict:
            keys = tuple(obj.keys())
            if not all(type(k) in (str, int) for k in keys):
                raise UnsupportedError("a returned dict has non-constant keys")
            return ir.OutDict(tuple(consts.add(k) for k in keys), tuple(repr(k) for k in keys),
                              tuple(build(obj[k], depth + 1) for k in keys))
        if type(obj) in _LEAF_TYPES:
            if type(obj) is int:
                for i, o in enumerate(outs):
                    if type(o) is int and o == obj and isinstance(out_vals[i], ir.OutSym):
                        return out_vals[i]
            if type(obj) is float and any(type(o) is float for o in outs):
                raise UnsupportedError("a returned float may be computed by the graph")
            return ir.OutConst(consts.add(obj), repr(obj))
        raise UnsupportedError(f"a returned value of type {type(obj).__name__}")

    _ = LocalSource
    return build(cap.result)
