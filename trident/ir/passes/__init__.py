"""The decisions between lowering and codegen, each in its own module.

Two kinds:

* passes, `Version -> Version` over the frozen host IR, run in order by `run` (`PIPELINE`)
  between lowering and codegen (`SCM._make_version`, and an eager version's guards).  Each
  records its decision in the IR, where `ir.printer` (and so `trident.explain`) shows it, and
  codegen only prints it;
* analyses of the ATen-level FX graph that lowering needs while it lowers (what only the graph
  holds: users, aliasing, traced layouts), gathered by `lowering_plan`.  They read the config
  knobs; lowering emits what they decided.
"""

from __future__ import annotations

from dataclasses import field

from ... import config
from .. import nodes as ir
from ..nodes import Frozen, frozen
from .below_autograd import below_autograd_nodes, no_autograd
from .buffer_reuse import inplace_nodes
from .dead_clone import dead_clones
from .env_block import env_block
from .inputs_first import inputs_first
from .int_checks import int_checks
from .shared_subexpressions import shared_subexpressions

# In order; each `Version -> Version`.  int_checks reads the program in the order lowering
# wrote it, before inputs_first reorders it.
PIPELINE = (env_block, shared_subexpressions, int_checks, inputs_first)


def run(v: ir.Version) -> ir.Version:
    """`v` after every pass of PIPELINE, in order."""
    for p in PIPELINE:
        v = p(v)
    return v


@frozen
class LoweringPlan(Frozen):
    """What the FX-graph analyses decided for one version's lowering."""

    below: frozenset = frozenset()  # call nodes that run below the autograd layer
    inplace: dict = field(default_factory=dict)  # node -> (op, overload) it runs as in place
    dead_clones: frozenset = frozenset()  # clone nodes whose input serves as the copy


def lowering_plan(cap, guards) -> LoweringPlan:
    """The analyses of `cap.aten_graph` that apply: all of them only where no operator records
    autograd history (`no_autograd`), buffer reuse and the dead clone under
    TRIDENT_REUSE_BUFFERS, below-autograd under TRIDENT_BELOW_AUTOGRAD."""
    if not no_autograd(cap, guards):
        return LoweringPlan()
    graph = cap.aten_graph.graph
    reuse = config.reuse_buffers()
    return LoweringPlan(
        below=frozenset(below_autograd_nodes(graph)) if config.below_autograd() else frozenset(),
        inplace=inplace_nodes(graph) if reuse else {},
        dead_clones=dead_clones(graph) if reuse else frozenset())
