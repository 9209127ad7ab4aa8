"""Analysis: which operators of a version may run below the autograd layer.

It reads the ATen-level FX graph (aliasing from the operators' schemas, the graph's outputs,
the kernels registered from Python), which the host IR no longer holds, so lowering calls it
(`passes.lowering_plan`) and records its answer on each `ir.Call` (`below`); codegen passes
`TRT_OP_BELOW_AUTOGRAD` to `op_new` for those.  `no_autograd` says whether a version may use it
at all (it also gates in-place buffer reuse and the dead clone).
"""

from __future__ import annotations

import operator

import torch

from .. import nodes as ir
from .fx import arg_value, flat_nodes


def no_autograd(cap, guards) -> bool:
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


def below_autograd_nodes(graph) -> set:
    """The call nodes whose operator may run below the autograd layer (with the Autograd and
    ADInplaceOrView dispatch keys excluded, as ATen's own autograd kernels do before they
    redispatch), in a version where no operator records autograd history (`no_autograd`):

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
    py, py_autograd = python_kernel_ops()
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
        if library_key(t) in py:
            if library_key(t) in py_autograd:
                writes.add(n)  # keeps the full path: its Python kernel is that path
            for w in flat_nodes((n.args, n.kwargs)):
                if w in root:
                    seen_by_py.add(root[w])
        for i, a in enumerate(s.arguments):  # writes through a view taint its base
            if a.alias_info is not None and a.alias_info.is_write:
                writes.add(n)
                for w in flat_nodes(arg_value(n, i, a)):
                    if w in root:
                        tainted.add(root[w])
        aliased = None
        if any(r.alias_info is not None for r in s.returns):
            for i, a in enumerate(s.arguments):
                if a.alias_info is not None:
                    aliased = arg_value(n, i, a)
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
        for o in flat_nodes(out.args):
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


def library_key(op) -> str:
    """`ns/name[.overload]`, as torch.library records the kernels registered from Python."""
    name = op._schema.name.replace("::", "/")
    return f"{name}.{op._schema.overload_name}" if op._schema.overload_name else name


# A copy of torch.library._impls and the sets python_kernel_ops made of it.
_py_kernels: tuple = (None, None)


def python_kernel_ops() -> tuple:
    """The operators with a kernel registered from Python under a key a real tensor's call can
    reach (every key but Meta), and those of them with one at the autograd layer (which running
    below would skip), as frozensets of `ns/name[.overload]`.  Made again only when the
    registrations changed (compared with a copy: after Inductor's and FlagGems' imports the
    scan cost 1.5 ms, several times per miss)."""
    global _py_kernels
    impls = getattr(torch.library, "_impls", set())
    snap, made = _py_kernels
    if snap is not None and snap == impls:
        return made
    snap = frozenset(impls)
    out, autograd = set(), set()
    for k in snap:
        op, _, key = k.rpartition("/")
        if key == "Meta":
            continue
        op = op[:-len(".default")] if op.endswith(".default") else op
        out.add(op)
        if key.startswith("Autograd") or key == "ADInplaceOrView":
            autograd.add(op)
    made = (frozenset(out), frozenset(autograd))
    _py_kernels = (snap, made)
    return made
