"""A version's init-time tables: its interned names, tensor specs, operators and Triton launches,
as C initializers (`trt_arg`, `trt_launch_param`, `trt_launch_spec`, ...).  Pure: text out."""

from __future__ import annotations

import json

from .. import abi
from ..errors import UnsupportedError
from ..ir import nodes as ir


def cstr(s: str) -> str:
    return json.dumps(s)  # a valid C string literal for printable text


def cdouble(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        return {"inf": "(1.0/0.0)", "-inf": "(-1.0/0.0)"}.get(str(x), "(0.0/0.0)")
    return repr(float(x))


def braced(*fields) -> str:
    """A C brace initializer of `fields` (each printed with str)."""
    return "{" + ", ".join(map(str, fields)) + "}"


def _arg(kind: str, n=0, i="0", d="0.0", s="NULL", items="NULL", values="NULL") -> str:
    """A `trt_arg` initializer: kind (a key of abi.ARG_KINDS), list length, int, double,
    string, list items and their values."""
    if kind not in abi.ARG_KINDS:
        raise UnsupportedError(f"constant argument kind {kind}")
    return braced(f"TRT_ARG_{kind.upper()}", n, i, d, s, items, values)


class Tables:
    """One version's init-time tables, accumulated while its code is printed."""

    def __init__(self):
        self.names: list[str] = []
        self.specs: list[tuple[str, int]] = []  # (C initializer, type const)
        self.ops: list[str] = []  # C statements creating ops (in init)
        self.launches: list[str] = []  # C statements creating Triton launches
        self.env: list[int] = []  # indices of the guards in the environment block
        self.env_rows: list[str] = []  # their trt_envg_desc initializers
        self.decls: list[str] = []
        self.helpers: list[str] = []  # static data before the version's function (env steps)

    def name(self, s: str) -> str:
        return f"S->N[{self.name_ix(s)}]"

    def name_ix(self, s: str) -> int:
        if s not in self.names:
            self.names.append(s)
        return self.names.index(s)

    def op(self, c: ir.Call) -> int:
        """Resolve operator call `c` at init (`api->op_new`); its index in S->ops."""
        k = len(self.ops)
        args = []
        extra = []
        for j, a in enumerate(c.args):
            if isinstance(a, ir.Slot):
                args.append(_arg("slot", i=a.index))
            elif isinstance(a, ir.ConstArg):
                if a.kind in ("int", "bool"):
                    args.append(_arg(a.kind, i=f"INT64_C({int(a.value)})"))
                elif a.kind == "double":
                    args.append(_arg("double", d=cdouble(a.value)))
                elif a.kind in ("str", "device"):
                    args.append(_arg(a.kind, s=cstr(a.value)))
                else:
                    args.append(_arg(a.kind))  # none
            elif isinstance(a, ir.ListArg):
                items, ivals = [], []
                for it in a.items:
                    if isinstance(it, ir.Slot):
                        items.append(str(it.index))
                        ivals.append("0")
                    elif it is None:
                        items.append("TRT_ITEM_NONE")
                        ivals.append("0")
                    elif isinstance(it, float):
                        raise UnsupportedError("float list constants")
                    else:
                        items.append("TRT_ITEM_CONST")
                        ivals.append(f"INT64_C({int(it)})")
                n = len(items)
                if n:
                    extra.append(f"    static const int32_t it{k}_{j}[] = {braced(*items)};")
                    extra.append(f"    static const int64_t iv{k}_{j}[] = {braced(*ivals)};")
                    args.append(_arg("list", n, items=f"it{k}_{j}", values=f"iv{k}_{j}"))
                else:
                    args.append(_arg("list"))
            else:
                raise UnsupportedError(f"argument {a}")
        outs = ", ".join(str(o) for o in c.outs) or "0"
        stmts = ["  {"] + extra
        stmts.append(f"    static const trt_arg a[] = {braced(', '.join(args) or '{0}')};")
        stmts.append(f"    static const int32_t outs[] = {braced(outs)};")
        flags = "TRT_OP_BELOW_AUTOGRAD" if c.below else "0"
        stmts.append(f"    S->ops[{k}] = api->op_new({cstr(c.op)}, {cstr(c.overload)}, "
                     f"{len(c.args)}, a, {len(c.outs)}, outs, {flags});")
        stmts.append(f"    if (!S->ops[{k}]) goto fail;")
        stmts.append("  }")
        self.ops.append("\n".join(stmts))
        return k

    def launch(self, t: ir.TritonLaunch) -> int:
        """Prepare Triton launch `t` at init (`api->launch_new`); its index in S->launches."""
        k = len(self.launches)
        ps = []
        for p in t.params:
            kind = "TRT_P_" + p.kind.upper()
            if isinstance(p.arg, ir.Slot):
                ps.append(braced(kind, p.arg.index, 0, "0.0", int(p.div16), p.dtype))
            elif p.arg.kind == "double":
                ps.append(braced(kind, abi.PARAM_CONST, 0, cdouble(p.arg.value), int(p.div16),
                                 p.dtype))
            else:
                ps.append(braced(kind, abi.PARAM_CONST, f"INT64_C({int(p.arg.value)})", "0.0",
                                 int(p.div16), p.dtype))
        stmts = ["  {"]
        stmts.append(f"    static const trt_launch_param p[] = {braced(', '.join(ps) or '{0}')};")
        cub = f"S->K[{t.cubin_const}]"
        sel = "NULL, 0, NULL"
        if t.select is not None:
            ts = t.select.transforms or ("raw",) * len(t.select.keys)
            ks = ", ".join(braced(a.index, abi.KEY_CODES[kind], abi.TRANSFORM_CODES[tr])
                           for (_n, a, kind), tr in zip(t.select.keys, ts))
            stmts.append(f"    static const trt_launch_key keys[] = {braced(ks or '{0, 0, 0}')};")
            sel = f"S->K[{t.select.resolver_const}], {len(t.select.keys)}, keys"
        spec = braced(cstr(t.symbol), f"PyBytes_AS_STRING({cub})",
                      f"(int64_t)PyBytes_GET_SIZE({cub})", t.num_warps, t.num_ctas, t.shared,
                      int(t.cooperative), int(t.pdl), len(t.params), "p", sel)
        stmts.append(f"    trt_launch_spec s = {spec};")
        stmts.append(f"    S->launches[{k}] = api->launch_new(&s);")
        stmts.append(f"    if (!S->launches[{k}]) goto fail;")
        stmts.append("  }")
        self.launches.append("\n".join(stmts))
        return k
