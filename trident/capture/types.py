"""What capture hands on: a `Capture` for a path that became a graph, `PathGuards` for one
whose capture was refused (carried by the error as `.guards`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from ..ir.nodes import Frozen, frozen
from .guard_record import ShapeExpr, SizesStrides
from .returns import Returned

if TYPE_CHECKING:
    from torch._dynamo.source import Source
    from torch._dynamo.types import GuardFilterEntry

    from ..triton.launch import LaunchRecord

# A guard one of Trident's adapters adds (see capture/adapters.py): (kind, Source, payload).
ExtraGuard = tuple[str, "Source", object]


@frozen
class GraphInput(Frozen):
    """One placeholder of the graph: where its value comes from at call time."""

    source: Source | None  # None only in a capture that is refused
    example: object  # FakeTensor, SymInt, int, float
    # A Python float that Dynamo passes to the graph as a 0-d float64 tensor, which the graph
    # reads only through `.item()` (a dynamic float: `_Recorder.float_uses`)
    float_arg: bool = False


@frozen
class PathGuards(Frozen):
    """The guards Dynamo recorded for a path whose capture was refused, with what
    `guards.translate` reads beside the entries (the fields of `Capture` of the same names):
    the refused path's eager version runs under exactly these. For a trace that stopped (a
    graph break under fullgraph, an unsupported construct) they are the guards of the trace up
    to the point where it stopped, inlined functions included: every call that passes them
    traces the same way to the same point, and stops there too."""

    guard_entries: tuple[GuardFilterEntry, ...]
    shape_exprs: tuple[ShapeExpr, ...]
    sizes_strides: dict[Source, SizesStrides]
    global_state: bytes
    tf_mode_stack_len: int
    extra_guards: tuple[ExtraGuard, ...] = ()
    installed_globals: dict[str, object] = dataclasses.field(default_factory=dict)
    global_scope: dict[str, object] | None = None


@frozen
class Capture(Frozen):
    """One executed path of the function, captured: built once, at the end of a capture."""

    aten_graph: torch.fx.GraphModule
    dynamo_graph: torch.fx.GraphModule
    inputs: tuple[GraphInput, ...]
    # Every guard Dynamo built for the path (GuardFilterEntry, read before the call:
    # guard_record.before_call), and its shape guards over Trident's own names.
    guard_entries: tuple[GuardFilterEntry, ...]
    shape_exprs: tuple[ShapeExpr, ...]
    sizes_strides: dict[Source, SizesStrides]  # Dynamo Source -> sizes, strides (None: symbolic)
    global_state: bytes  # the runtime's global state before the call (rt.global_state())
    result: object  # the capturing call's own result
    graph_outputs: tuple[object, ...]  # the runner's outputs for the capturing call
    launches: tuple[LaunchRecord, ...]  # per Triton launch, in graph order
    ret: Returned  # the return value as Dynamo knows it (capture/returns.py)
    tf_mode_stack_len: int
    dynamic: bool = False
    notes: tuple[str, ...] = ()
    # Guards Trident's adapters add (see capture/adapters.py).
    extra_guards: tuple[ExtraGuard, ...] = ()
    # Globals Dynamo installed for the trace, name -> object (see SourceConverter.installed).
    installed_globals: dict[str, object] = dataclasses.field(default_factory=dict)
    # A dynamic attempt stopped because a Triton launch's autotune key or heuristics read a
    # dynamic size, and this capture is the static retry.
    triton_needs_static: bool = False
    # The function's own whole-body mode (ir.RUN_MODES; see checks.whole_function_mode).
    run_mode: int = 0
    # The globals of the frame Dynamo traced (the function's own, or those of Dynamo's
    # wrap_inline frame around a function of torch's files: guards.translate.dynamo_wrapped).
    global_scope: dict[str, object] | None = None
    # Seconds the capturing run took: the graph's operators and Triton launches, a Triton
    # JIT compile of a kernel new to this process included (work an eager call does too).
    run_seconds: float = 0.0
    # A symbolic capture whose trace took `triton.next_power_of_2` as a power-of-two range
    # (TRIDENT_POW2_BUCKETS): the version's guards bound a size to that range.
    pow2_bucketed: bool = False

    def with_note(self, note: str) -> Capture:
        """This capture with one more note (kept on the version: `Version.notes`)."""
        return dataclasses.replace(self, notes=(*self.notes, note))
