"""Pass: shared subexpressions of shape guards.

Dynamo's shape guards are trees in which a symbolic value computed by a chain of operations
(Triton's next_power_of_2: six shifts and ors) is written out again at every use; nested,
FlagGems' cumsum made one guard of 500 KB.  A subexpression that occurs twice or more is
computed once, into an `int64_t` temporary evaluated before the condition: the pass wraps its
first occurrence in `ir.Shared` and refers to it from the others (`ir.SharedRef`), in
`ShapeGuard.shared`; codegen prints each `Shared` as a temporary.
"""

from __future__ import annotations

import dataclasses

from .. import nodes as ir

_TOTAL_OPS = frozenset(("+", "-", "*", "|", "&", "^", "max", "min",
                        "==", "!=", "<", "<=", ">", ">="))


def shared_subexpressions(v: ir.Version) -> ir.Version:
    """`v` with `shared` set on each shape guard that has a subexpression worth sharing."""
    guards = []
    for g in v.guards:
        if isinstance(g, ir.ShapeGuard) and g.shared is None:
            shared = share(g.expr)
            if shared is not None:
                g = dataclasses.replace(g, shared=shared)
        guards.append(g)
    return dataclasses.replace(v, guards=tuple(guards))


def share(e) -> "ir.SymExpr | None":
    """`e` with each repeated subexpression computed once, or None when none is.

    A subexpression is shared when its evaluation can neither fail nor depend on a short
    circuit (`_total`): + - * | & ^ min max, comparisons, unary - abs not, // and % by a
    nonzero constant, and >> by a constant in [0, 62].  Other divisions, modulos and left
    shifts (which can set `ok`) stay in place; a leaf read inside a temporary may still clear
    `ok` (a miss, as before).  Temporaries are numbered in the order their computation ends
    (an inner one first), the order in which codegen declares them."""
    ids: dict = {}    # id(node) -> canonical number
    canon: dict = {}  # structure -> canonical number
    count: dict = {}  # canonical number -> uses

    def number(n) -> int:
        c = ids.get(id(n))
        if c is None:
            if isinstance(n, ir.BinOp):
                key = ("b", n.op, number(n.lhs), number(n.rhs))
            elif isinstance(n, ir.UnOp):
                key = ("u", n.op, number(n.operand))
            else:
                key = ("l", n)
            c = canon.setdefault(key, len(canon))
            ids[id(n)] = c
        count[c] = count.get(c, 0) + 1
        return c

    number(e)
    temps: dict = {}  # canonical number -> temporary index

    def rewrite(n):
        c = ids[id(n)]
        if c in temps:
            return ir.SharedRef(temps[c])
        out = n
        if isinstance(n, ir.BinOp):
            lhs = rewrite(n.lhs)  # the left operand first, as codegen evaluates it
            out = ir.BinOp(n.op, lhs, rewrite(n.rhs))
        elif isinstance(n, ir.UnOp):
            out = ir.UnOp(n.op, rewrite(n.operand))
        if count[c] >= 2 and _total(n):
            temps[c] = len(temps)
            return ir.Shared(temps[c], out)
        return out

    out = rewrite(e)
    return out if temps else None


def _total(e) -> bool:
    """An operation whose C does not short-circuit and sets `ok` only on an int64 overflow
    (leaves are not worth a temporary). A temporary is evaluated even where the expression
    would short-circuit past it, so an overflow there makes the guard miss where Python's
    would not have evaluated it: a needless capture, never a wrong hit."""
    if isinstance(e, ir.BinOp):
        if e.op in _TOTAL_OPS:
            return True
        if not isinstance(e.rhs, ir.IntConst):
            return False
        if e.op in ("//", "%"):  # by a constant: never by zero (Dynamo writes x >> 1 as x // 2)
            return e.rhs.value != 0
        return e.op == ">>" and 0 <= e.rhs.value <= 62
    return isinstance(e, ir.UnOp) and e.op in ("-", "abs", "not")
