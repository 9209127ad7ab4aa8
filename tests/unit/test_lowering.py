"""Lowering details of capture: with symbolic sizes the ATen graph comes from the Python
dispatcher's decompositions (as AOTAutograd traces), and a whole-list `aten::size` /
`aten::stride` (not a dispatcher operator the runtime can call) is read element-wise."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

import trident
from trident.capture.dynamo import _rewrite_size_lists
from trident.errors import UnsupportedError


def _graph_with_size_list(use):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    sizes = g.call_function(torch.ops.aten.size.default, (x,))
    if use == "index":
        n0 = g.call_function(operator.getitem, (sizes, 0))
        n1 = g.call_function(operator.getitem, (sizes, 1))
        out = g.call_function(torch.ops.aten.new_zeros.default, (x, [n1, n0]))
        g.output(out)
    else:
        g.output(sizes)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_size_list_read_by_index_becomes_sym_size():
    gm = _graph_with_size_list("index")
    _rewrite_size_lists(gm)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.size.default not in targets
    assert targets.count(torch.ops.aten.sym_size.int) == 2
    x = torch.randn(3, 5)
    assert gm(x).shape == (5, 3)


def test_size_list_used_whole_is_refused():
    with pytest.raises(UnsupportedError, match="other than by index"):
        _rewrite_size_lists(_graph_with_size_list("whole"))


def _mlp(x, w1, w2):
    return F.linear(F.silu(F.linear(x, w1)), w2)


def test_linear_on_dynamic_sequence_length_matches_eager():
    tf = trident.jit(_mlp, max_versions=8)
    w1, w2 = torch.randn(16, 8), torch.randn(8, 16)
    for n in (3, 5, 7, 9):  # static, then one dynamic version through the Python dispatcher
        x = torch.randn(1, n, 8)
        assert torch.equal(tf(x, w1, w2), _mlp(x, w1, w2))
    st = trident.stats(tf)
    assert st["fallbacks"] == 0
    assert len(st["hits"]) == 2 and st["hits"][1] >= 2
