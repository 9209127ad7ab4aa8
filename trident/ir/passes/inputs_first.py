"""Pass: integers of the inputs first.

Every `SymDef` and `FloatDef` computed from the inputs alone (their sizes, strides, ints and
dynamic float arguments, read when the guards ran; not an integer an operator returned) moves
to the front of the program, in order, after the float arguments' loads.
The values are the same wherever they are computed, but one beyond int64 is then found before
any operator writes to an argument: a miss (the call runs as eager does), not the late
OverflowError (found by the fuzzer: `x.clamp_(min=0); return s * 2` with s = 2**62).
"""

from __future__ import annotations

import dataclasses

from .. import nodes as ir


def inputs_first(v: ir.Version) -> ir.Version:
    """`v` with its program reordered so: the SymDefs of the inputs, then the rest."""
    early: list = []
    rest: list = []
    known: set = set()

    def from_inputs(e) -> bool:
        if isinstance(e, ir.SymVar):
            return e.name in known
        if isinstance(e, ir.BinOp):
            return from_inputs(e.lhs) and from_inputs(e.rhs)
        if isinstance(e, ir.UnOp):
            return from_inputs(e.operand)
        if isinstance(e, ir.IntOfFloat):
            return float_from_inputs(e.operand)
        return isinstance(e, (ir.SymLeaf, ir.IntConst))

    def float_from_inputs(e) -> bool:
        return all(from_inputs(p) for p in ir.float_int_parts(e)) \
            and all(n in known for n in ir.float_vars(e))

    for ins in v.program:
        if isinstance(ins, ir.LoadScalar) and ins.var is not None:
            known.add(ins.var)  # a float argument (its FloatDefs may move up: it goes first)
            early.append(ins)
        elif isinstance(ins, ir.SymDef) and from_inputs(ins.expr) or \
                isinstance(ins, ir.FloatDef) and float_from_inputs(ins.expr):
            known.add(ins.var)
            early.append(ins)
        else:
            rest.append(ins)
    return dataclasses.replace(v, program=tuple(early + rest))
