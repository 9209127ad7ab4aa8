"""Analysis: in-place reuse of dead intermediates (`TRIDENT_REUSE_BUFFERS`).

`t = f(x, w); u = g(t, b)` where nothing but g reads t runs g in place on t (`g_(t, b)`). It
needs what only the FX graph holds (each node's users, the traced result's dtype, device, sizes
and strides), so lowering calls it (`passes.lowering_plan`) and emits the in-place operator it
names; the host IR shows the result (`aten::mul_.Tensor` where the graph had `mul.Tensor`).
`fresh_dead` and `same_layout` are shared with the dead-clone analysis.
"""

from __future__ import annotations

import torch

from .fx import op_key


# In-place reuse of a dead intermediate: `t = f(x, w); u = g(t, b)` where nothing but g reads t
# runs g in place on t (`g_(t, b)`), which saves one allocation (about 0.6-0.9 us per op on a
# CPU). Only for these operators, whose results are exactly rounded (every correct kernel, and
# the in-place one, gives the same bits) and computed elementwise into self's shape:
INPLACE = {
    "aten::mul.Tensor": "aten::mul_.Tensor",
    "aten::add.Tensor": "aten::add_.Tensor",
    "aten::sub.Tensor": "aten::sub_.Tensor",
    "aten::relu.": "aten::relu_.",
    "aten::neg.": "aten::neg_.",
}
# Operators whose result is always a new tensor that aliases nothing (ATen's functional
# contract), so that once its only reader runs in place on it nothing observes the change.
FRESH = set(INPLACE) | {
    "aten::div.Tensor", "aten::exp.", "aten::log.", "aten::rsqrt.", "aten::sqrt.",
    "aten::sin.", "aten::cos.", "aten::abs.", "aten::reciprocal.", "aten::sigmoid.",
    "aten::tanh.", "aten::silu.", "aten::gelu.", "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor", "aten::_to_copy.", "aten::clone.", "aten::mean.dim",
    "aten::sum.dim_IntList", "aten::mm.", "aten::bmm.", "aten::addmm.", "aten::_softmax.",
    "aten::where.self", "aten::cat.",
}


def inplace_nodes(graph) -> dict:
    """{node: (op, overload)} for each call node that runs in place on its first argument
    (`reusable`), with the in-place operator it runs as (`aten::mul_`, `Tensor`)."""
    out = {}
    for n in graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) \
                and reusable(n):
            full, _, overload = INPLACE[op_key(n.target)].partition(".")
            out[n] = (full, overload)
    return out


def reusable(node) -> bool:
    """`node` may run in place on its first argument: an operator of INPLACE whose self
    is the only use of a fresh intermediate (no other reader, no view of it, not an output)
    with the result's dtype, device, sizes and strides, and nothing else reads that
    intermediate in `node`'s arguments."""
    if op_key(node.target) not in INPLACE or not node.args:
        return False
    src = node.args[0]
    if not fresh_dead(src):
        return False
    uses = [a for a in (*node.args, *node.kwargs.values()) if a is src]
    # Not where a size is 0 or 1: there the trace's strides can differ from the real
    # kernels' (fake tensors canonicalize them; TensorIterator keeps an input's), and in
    # place keeps the intermediate's (`y * 1.5` on y = (4, 1).t(): real strides (1, 1),
    # traced (4, 1); `+ z` of it (4, 1) in both; a (0, 0, 2) transposed y likewise).
    # Dynamo specializes sizes 0 and 1, so a symbolic size is neither.
    return len(uses) == 1 and same_layout(src, node, min_size=2)


def fresh_dead(src) -> bool:
    """`src` is a fresh intermediate (the result of an operator of FRESH: one tensor, in a
    slot) whose only FX user is the node at hand."""
    return (isinstance(src, torch.fx.Node) and src.op == "call_function"
            and isinstance(src.target, torch._ops.OpOverload)
            and op_key(src.target) in FRESH and len(src.users) == 1)


def same_layout(src, node, *, min_size: int) -> bool:
    """The traced results of FX nodes `src` and `node` are strided tensors of the same dtype,
    device, sizes and strides, and no static size of `src` is below `min_size`."""
    a, b = src.meta.get("val"), node.meta.get("val")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return (a.dtype == b.dtype and a.device == b.device and a.layout == torch.strided
            and b.layout == torch.strided and same_ints(a.shape, b.shape)
            and same_ints(a.stride(), b.stride())
            and not any(type(d) is int and d < min_size for d in a.shape))


def same_ints(a, b) -> bool:
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
