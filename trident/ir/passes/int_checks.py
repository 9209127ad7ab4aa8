"""Pass: the Python ints a version's program reads must fit in int64.

Each is checked after the guards and before the program (`Version.int_checks`), so that a huge
int is a specialization miss (Dynamo then decides, as eager's Python ints would), never an
error in the middle of the program.  The order is the program's as lowered: this pass runs
before `inputs_first` reorders it.
"""

from __future__ import annotations

import dataclasses

from .. import nodes as ir


def int_checks(v: ir.Version) -> ir.Version:
    """`v` with `int_checks`: the sources of its int arguments (`LoadScalar` int) and of the
    Python ints its integer expressions read (`PyInt`), each once, in program order."""
    if v.int_checks:  # already set (the sources do not depend on the order, their order does)
        return v
    return dataclasses.replace(v, int_checks=_pyint_sources(v.program))


def _pyint_sources(program) -> tuple:
    out: list = []

    def walk(e):
        if isinstance(e, ir.SymLeaf) and isinstance(e.leaf, ir.PyInt):
            out.append(e.leaf.source)
        elif isinstance(e, ir.BinOp):
            walk(e.lhs)
            walk(e.rhs)
        elif isinstance(e, ir.UnOp):
            walk(e.operand)
        elif isinstance(e, ir.IntOfFloat):
            for p in ir.float_int_parts(e.operand):
                walk(p)

    for ins in program:
        if isinstance(ins, ir.LoadScalar) and ins.kind == "int":
            out.append(ins.source)
        elif isinstance(ins, ir.SymDef):
            walk(ins.expr)
        elif isinstance(ins, ir.FloatDef):
            for e in ir.float_int_parts(ins.expr):
                walk(e)
    return tuple(dict.fromkeys(out))
