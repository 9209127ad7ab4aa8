"""Analysis: the dead clone (`TRIDENT_REUSE_BUFFERS`).

An `aten::clone` (keeping the layout) of a fresh intermediate that nothing else reads is no
instruction at all: the intermediate itself serves as the copy.  It reads the FX graph (users,
traced layouts), so lowering calls it (`passes.lowering_plan`) and maps the clone's node to its
input's slot; the host IR shows no clone.
"""

from __future__ import annotations

import torch

from .buffer_reuse import fresh_dead, same_layout


def dead_clones(graph) -> frozenset:
    """The clone nodes of `graph` whose input serves as the copy (`dead_clone`)."""
    return frozenset(n for n in graph.nodes if n.op == "call_function" and dead_clone(n))


def dead_clone(node) -> bool:
    """`node` is `aten::clone` (keeping the layout) of a fresh intermediate that nothing
    else reads (no other reader, no view of it, not an output): the intermediate itself
    serves as the copy, and no copy runs.  ATen's decomposition of `dropout` at inference
    (`p == 0` or not training) is `input.clone()` where eager's dropout returns its input:
    a copy kernel per attention layer and token that eager does not run.  A fresh
    intermediate is non-overlapping and dense (every operator of FRESH allocates its
    result so), and `clone` with `preserve_format` copies such a tensor's strides
    exactly, so the clone eager would make has the same sizes, strides and values.  Not
    where a size is 0 (there a dense layout's strides are not unique)."""
    if node.target is not torch.ops.aten.clone.default or not node.args:
        return False
    fmt = node.kwargs.get("memory_format", node.args[1] if len(node.args) > 1 else None)
    if fmt not in (None, torch.preserve_format):
        return False
    src = node.args[0]
    return fresh_dead(src) and same_layout(src, node, min_size=1)
