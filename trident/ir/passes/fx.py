"""Small readers of ATen-level FX graphs shared by lowering and the graph analyses."""

from __future__ import annotations

import torch


def arg_value(node, i: int, a):
    """The value of schema argument `a` (index i) of an FX call node, or None."""
    if i < len(node.args):
        return node.args[i]
    return node.kwargs.get(a.name)


def flat_nodes(a) -> list:
    """Every FX node inside a (nested) tuple/list/dict of node arguments."""
    found = []
    torch.fx.node.map_arg(a, lambda x: found.append(x) or x)
    return found


def op_key(target) -> str:
    """`ns::name.overload` of an OpOverload (the overload empty for `.default`)."""
    s = target._schema
    return f"{s.name}.{s.overload_name}"
