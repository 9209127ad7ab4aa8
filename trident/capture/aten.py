"""Dynamo's (torch-level) graph -> the ATen-level graph a version lowers.

`to_aten` traces the graph with `make_fx` under Dynamo's fake mode (with the Python
dispatcher on when an input has a symbolic size, as AOTAutograd traces) and rewrites whole
`aten::size` / `aten::stride` lists read by index into `sym_size.int` / `sym_stride.int`.
`float_uses` says whether a dynamic float argument stays within what a version lowers.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator

import torch

from ..errors import UnsupportedError


def fake_mode_of(fakes, example_inputs):
    """The fake mode of Dynamo's example inputs (None for an empty graph of constants)."""
    for f in fakes:
        if isinstance(f, torch._subclasses.fake_tensor.FakeTensor):
            return f.fake_mode
    return torch._guards.detect_fake_mode(example_inputs)


def to_aten(gm: torch.fx.GraphModule, fakes: list, example_inputs,
            fake_mode) -> torch.fx.GraphModule:
    """`gm` traced to ATen over `fakes` (Dynamo's example value of each placeholder) under
    `fake_mode`, or over `example_inputs` where there is none; raises what the trace raises."""
    from torch.fx.experimental.proxy_tensor import make_fx

    # Identity saved-tensor hooks on top: the user's own hooks must not
    # see the tracing (they run on the real tensors of the capturing run).
    # With symbolic sizes, the Python dispatcher is on while tracing (as AOTAutograd
    # does): composite operators then decompose through their symbolic-aware Python
    # decompositions (matmul's C++ one calls numel() on CUDA inputs).
    # An explicit (empty) decomposition table: without one, torch 2.14's make_fx traces
    # `detach` as `alias`, a view with a `_base` that autograd does not cut.
    trace = functools.partial(make_fx, tracing_mode="real", decomposition_table={})
    with torch.autograd.graph.saved_tensors_hooks(_same, _same), \
            (_python_dispatcher() if _symbolic(fakes) else contextlib.nullcontext()):
        if fake_mode is not None:
            with fake_mode:
                aten = trace(gm)(*fakes)
        else:
            aten = trace(gm)(*example_inputs)
    rewrite_size_lists(aten)
    return aten


def _same(t):
    return t


def _symbolic(fakes) -> bool:
    """Whether any graph input has a symbolic size or stride."""
    for f in fakes:
        if isinstance(f, torch.Tensor):
            if any(isinstance(v, torch.SymInt) for v in (*f.shape, *f.stride())):
                return True
        elif isinstance(f, torch.SymInt):
            return True
    return False


def _python_dispatcher():
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


_SIZE_LISTS = {"size": "sym_size", "stride": "sym_stride"}


def rewrite_size_lists(gm) -> None:
    """`aten::size(t)` / `aten::stride(t)` (a whole list, not a dispatcher operator) read one
    element at a time: `getitem(size(t), i)` becomes `sym_size.int(t, i)`.  A list used any
    other way is refused (the runtime cannot call it)."""
    import operator

    if gm is None:
        return
    g = gm.graph
    changed = False
    for node in list(g.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        kind = _SIZE_LISTS.get(node.target._schema.name.partition("::")[2])
        if kind is None or node.target._schema.overload_name != "" or \
                not node.target._schema.name.startswith("aten::"):
            continue
        one = getattr(torch.ops.aten, kind).int
        for user in list(node.users):
            if not (user.op == "call_function" and user.target is operator.getitem
                    and len(user.args) == 2 and isinstance(user.args[1], int)):
                raise UnsupportedError(
                    f"the ATen graph uses the list {node.format_node()} other than by index")
            with g.inserting_before(user):
                new = g.call_function(one, (node.args[0], user.args[1]))
            new.meta.update(user.meta)
            user.replace_all_uses_with(new)
            g.erase_node(user)
        g.erase_node(node)
        changed = True
    if changed:
        g.lint()
        gm.recompile()



# What a dynamic float may flow into (what ir/lower.py lowers over a float value): float
# arithmetic, float -> int conversions, an ATen operator's scalar argument, the result.  Not
# yet a Triton launch: a float may be a constexpr, an autotune key or a heuristic's input
# there, and the launch of a dynamic float has not run on a GPU; such a float stays specialised.
_FLOAT_ARITH = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
                operator.neg, torch.sym_float, getattr(torch, "_sym_sqrt", None)} - {None}
_FLOAT_TO_INT = {math.trunc, math.floor, math.ceil, round, torch.sym_int}


def float_uses(aten: torch.fx.GraphModule, float_args: list) -> str | None:
    """Why a dynamic float argument cannot stay dynamic in `aten` (`float_args`: whether each
    placeholder is one), or None: Dynamo's 0-d float64 tensor of it must be read only by
    `.item()`, and the float only computed with (`_FLOAT_ARITH`, `_FLOAT_TO_INT`), passed to
    an ATen operator, or returned."""
    places = [n for n in aten.graph.nodes if n.op == "placeholder"]
    todo = []
    for node, is_float in zip(places, float_args):
        if not is_float:
            continue
        for u in node.users:
            if u.target is not torch.ops.aten._local_scalar_dense.default:
                return f"the float {node.name} is used as a tensor ({u.format_node()})"
            todo.append(u)
    seen = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for u in n.users:
            t = u.target
            if "triton_kernel_wrapper" in str(t):
                return f"a float argument reaches a Triton launch ({u.name})"
            if u.op == "output" or isinstance(t, torch._ops.OpOverload) or t in _FLOAT_TO_INT:
                continue
            val = u.meta.get("val")
            if t in _FLOAT_ARITH and isinstance(val, (float, torch.SymFloat)):
                todo.append(u)
                continue
            return f"a float argument reaches {u.format_node()}"
    return None
