"""ATen-level FX graph -> host-IR program, and the call's result -> output tree.

Every value of the program lives in a frame slot (an IValue in the runtime).
Integers computed from sizes also live in C variables (`SymDef`), so shape
arithmetic is native code; the slot mirror feeds operators that take them.
"""

from __future__ import annotations

import operator

import torch

from .. import config
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


# In-place reuse of a dead intermediate: `t = f(x, w); u = g(t, b)` where nothing but g reads t
# runs g in place on t (`g_(t, b)`), which saves one allocation (about 0.6-0.9 us per op on a
# CPU). Only for these operators, whose results are exactly rounded (every correct kernel, and
# the in-place one, gives the same bits) and computed elementwise into self's shape:
_INPLACE = {
    "aten::mul.Tensor": "aten::mul_.Tensor",
    "aten::add.Tensor": "aten::add_.Tensor",
    "aten::sub.Tensor": "aten::sub_.Tensor",
    "aten::relu.": "aten::relu_.",
    "aten::neg.": "aten::neg_.",
}
# Operators whose result is always a new tensor that aliases nothing (ATen's functional
# contract), so that once its only reader runs in place on it nothing observes the change.
_FRESH = set(_INPLACE) | {
    "aten::div.Tensor", "aten::exp.", "aten::log.", "aten::rsqrt.", "aten::sqrt.",
    "aten::sin.", "aten::cos.", "aten::abs.", "aten::reciprocal.", "aten::sigmoid.",
    "aten::tanh.", "aten::silu.", "aten::gelu.", "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor", "aten::_to_copy.", "aten::clone.", "aten::mean.dim",
    "aten::sum.dim_IntList", "aten::mm.", "aten::bmm.", "aten::addmm.", "aten::_softmax.",
    "aten::where.self", "aten::cat.",
}


def _arg_value(node, i: int, a):
    """The value of schema argument `a` (index i) of an FX call node, or None."""
    if i < len(node.args):
        return node.args[i]
    return node.kwargs.get(a.name)


def below_autograd_nodes(graph) -> set:
    """The call nodes whose operator may run below the autograd layer (with the Autograd and
    ADInplaceOrView dispatch keys excluded, as ATen's own autograd kernels do before they
    redispatch), in a version where no operator records autograd history (`_no_autograd`):

    - a functional ATen operator (no argument written, no result aliasing an argument): with no
      tensor requiring grad its autograd kernel only redispatches, and its results are fresh
      tensors either way;
    - an ATen view whose base (the start of its chain of views) no graph output aliases: below
      ADInplaceOrView a view gets no view metadata (no `_base`, its own version counter),
      which nothing can observe on a tensor that stays inside the program, provided that
      nothing writes through a view of a base the program did not make (an input, a
      constant: the write would not bump the base's version counter, which the caller sees).

    Operators that write (in-place, out=) keep the full path, and so do views of escaping
    tensors and operators outside the `aten` namespace.  Python code sees what it is handed:
    for an operator with a kernel registered from Python (`torch.library`, as FlagGems does
    for aten::mm; looked up when the version is lowered), every view of a base that any view
    of is passed to it keeps the full path, so that the kernel sees the `_base` eager gives it
    (a nested `trident.jit` kernel guards on it: a bare alias would not match the version its
    capture made, one more version per call site).  The operator itself runs below unless
    its Python kernel is at the autograd layer (a backend kernel runs below it in eager too).
    Forward-mode AD is checked at run time (`op_call`: only while no dual level is active)."""
    py, py_autograd = _python_kernel_ops()
    fresh, root, tainted, writes, seen_by_py = set(), {}, set(), set(), set()
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if t is operator.getitem:
            src = n.args[0]
            if src in fresh:
                fresh.add(n)
            elif src in root:
                root[n] = root[src]
            continue
        if not isinstance(t, torch._ops.OpOverload):
            continue
        s = t._schema
        if _library_key(t) in py:
            if _library_key(t) in py_autograd:
                writes.add(n)  # keeps the full path: its Python kernel is that path
            for w in _flat_nodes((n.args, n.kwargs)):
                if w in root:
                    seen_by_py.add(root[w])
        for i, a in enumerate(s.arguments):  # writes through a view taint its base
            if a.alias_info is not None and a.alias_info.is_write:
                writes.add(n)
                for w in _flat_nodes(_arg_value(n, i, a)):
                    if w in root:
                        tainted.add(root[w])
        aliased = None
        if any(r.alias_info is not None for r in s.returns):
            for i, a in enumerate(s.arguments):
                if a.alias_info is not None:
                    aliased = _arg_value(n, i, a)
                    break
            if isinstance(aliased, torch.fx.Node):
                root[n] = root.get(aliased, aliased)
            continue
        if any(a.alias_info is not None for a in s.arguments):
            continue  # writes an argument without returning it
        fresh.add(n)
    out = next((n for n in graph.nodes if n.op == "output"), None)
    escaping = set()
    if out is not None:
        for o in _flat_nodes(out.args):
            escaping.add(root.get(o, o))
    below = set()
    for n in graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload) \
                or not n.target._schema.name.startswith("aten::") or n in writes:
            continue
        if n in fresh or (n in root and root[n] not in escaping and root[n] not in seen_by_py
                          and (root[n] in fresh or root[n] not in tainted)):
            below.add(n)
    return below


def _library_key(op) -> str:
    """`ns/name[.overload]`, as torch.library records the kernels registered from Python."""
    name = op._schema.name.replace("::", "/")
    return f"{name}.{op._schema.overload_name}" if op._schema.overload_name else name


def _python_kernel_ops() -> tuple:
    """The operators with a kernel registered from Python under a key a real tensor's call can
    reach (every key but Meta), and those of them with one at the autograd layer (which running
    below would skip), as sets of `ns/name[.overload]`."""
    out, autograd = set(), set()
    for k in getattr(torch.library, "_impls", ()):
        op, _, key = k.rpartition("/")
        if key == "Meta":
            continue
        op = op[:-len(".default")] if op.endswith(".default") else op
        out.add(op)
        if key.startswith("Autograd") or key == "ADInplaceOrView":
            autograd.add(op)
    return out, autograd


def _flat_nodes(a) -> list:
    """Every FX node inside a (nested) tuple/list/dict of node arguments."""
    found = []
    torch.fx.node.map_arg(a, lambda x: found.append(x) or x)
    return found


def _op_key(target) -> str:
    s = target._schema
    return f"{s.name}.{s.overload_name}"


def _same_layout(src, node, *, min_size: int) -> bool:
    """The traced results of FX nodes `src` and `node` are strided tensors of the same dtype,
    device, sizes and strides, and no static size of `src` is below `min_size`."""
    a, b = src.meta.get("val"), node.meta.get("val")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return (a.dtype == b.dtype and a.device == b.device and a.layout == torch.strided
            and b.layout == torch.strided and _same_ints(a.shape, b.shape)
            and _same_ints(a.stride(), b.stride())
            and not any(type(d) is int and d < min_size for d in a.shape))


def _same_ints(a, b) -> bool:
    """Equal sizes or strides, without asking the shape environment (which would add guards
    after they were taken): ints equal, or symbolic ints with the same expression."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is int and type(y) is int:
            if x != y:
                return False
        elif isinstance(x, torch.SymInt) and isinstance(y, torch.SymInt):
            if x.node.expr != y.node.expr:
                return False
        else:
            return False
    return True


def _no_autograd(cap, guards) -> bool:
    """No operator of the version records autograd history: the program runs under the
    function's own no_grad / inference_mode (run_mode), grad mode was off at capture (the
    global-state guard keeps it so) and the function does not enable it (run_mode
    enable_grad), or no graph input requires grad (tensor guards keep that; Dynamo refuses
    creating a tensor with requires_grad=True inside the graph)."""
    run_mode = getattr(cap, "run_mode", 0)
    if run_mode in (1, 3):  # the whole program under no_grad / inference_mode
        return True
    gs = [g for g in guards if isinstance(g, ir.GlobalState)]
    if run_mode != 2 and gs and gs[0].words and gs[0].words[0] == 0:
        return True
    return not any(isinstance(gin.example, torch.Tensor) and gin.example.requires_grad
                   for gin in cap.inputs)


class _Lowering:
    def __init__(self, conv, consts, rt, tensor_guards):
        self.conv = conv
        self.consts = consts
        self.rt = rt
        self.tensor_guards = tensor_guards  # IR source -> TensorMatch
        self.reuse = False  # in-place reuse of dead intermediates allowed (see _INPLACE)
        self.below: set = set()  # call nodes that run below the autograd layer
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
        if self.reuse and self._dead_clone(node):
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
                    and _library_key(op) in _python_kernel_ops()[0]):
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
        inplace = self.reuse and self._reusable(node)
        below = node in self.below
        if inplace:
            # writes only a tensor this program made and nothing reads after: no side effect
            # (nor below the autograd layer, where the dead tensor's version is not bumped)
            full, ovl = _INPLACE[_op_key(op)].split(".")
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
        a, b, c = (_arg_value(node, i, x) for i, x in enumerate(node.target._schema.arguments))
        if any(v is None for v in (a, b, c)):
            raise UnsupportedError("prims::fma with a missing argument")
        below = node in self.below
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

    def _reusable(self, node) -> bool:
        """`node` may run in place on its first argument: an operator of _INPLACE whose self
        is the only use of a fresh intermediate (no other reader, no view of it, not an output)
        with the result's dtype, device, sizes and strides, and nothing else reads that
        intermediate in `node`'s arguments."""
        if _op_key(node.target) not in _INPLACE or not node.args:
            return False
        src = node.args[0]
        if not self._dead_fresh(src):
            return False
        uses = [a for a in (*node.args, *node.kwargs.values()) if a is src]
        # Not where a size is 0 or 1: there the trace's strides can differ from the real
        # kernels' (fake tensors canonicalize them; TensorIterator keeps an input's), and in
        # place keeps the intermediate's (`y * 1.5` on y = (4, 1).t(): real strides (1, 1),
        # traced (4, 1); `+ z` of it (4, 1) in both; a (0, 0, 2) transposed y likewise).
        # Dynamo specializes sizes 0 and 1, so a symbolic size is neither.
        return len(uses) == 1 and _same_layout(src, node, min_size=2)

    def _dead_fresh(self, src) -> bool:
        """`src` is a fresh intermediate (the result of an operator of _FRESH, in a slot)
        whose only FX user is the node at hand."""
        return (isinstance(src, torch.fx.Node) and src.op == "call_function"
                and isinstance(src.target, torch._ops.OpOverload)
                and _op_key(src.target) in _FRESH and len(src.users) == 1
                and self.vals.get(src, ("",))[0] == "slot")

    def _dead_clone(self, node) -> bool:
        """`node` is `aten::clone` (keeping the layout) of a fresh intermediate that nothing
        else reads (no other reader, no view of it, not an output): the intermediate itself
        serves as the copy, and no copy runs.  ATen's decomposition of `dropout` at inference
        (`p == 0` or not training) is `input.clone()` where eager's dropout returns its input:
        a copy kernel per attention layer and token that eager does not run.  A fresh
        intermediate is non-overlapping and dense (every operator of _FRESH allocates its
        result so), and `clone` with `preserve_format` copies such a tensor's strides
        exactly, so the clone eager would make has the same sizes, strides and values.  Not
        where a size is 0 (there a dense layout's strides are not unique)."""
        if node.target is not torch.ops.aten.clone.default or not node.args:
            return False
        fmt = node.kwargs.get("memory_format", node.args[1] if len(node.args) > 1 else None)
        if fmt not in (None, torch.preserve_format):
            return False
        src = node.args[0]
        return self._dead_fresh(src) and _same_layout(src, node, min_size=1)

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

        from ..triton.launch import Resolver, key_of, key_transforms, select_info

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
    no_autograd = _no_autograd(cap, guards)
    lo.reuse = config.reuse_buffers() and no_autograd
    if config.below_autograd() and no_autograd:
        lo.below = below_autograd_nodes(cap.aten_graph.graph)
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
