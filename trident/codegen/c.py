"""Host IR versions -> the C source of one SCM.  Pure: text in, text out.

Codegen prints; it decides nothing.  What a version's C does was decided by lowering and by the
passes over the host IR (trident/ir/passes: the environment block, shared subexpressions of
shape guards, the int64 checks, the order of the program), and the printer dispatches on node
type.  An SCM is several translation units, so that a rebuild after a miss compiles only what
changed (native/build.py caches each unit's object by content hash):

  * one unit per version (`generate_version`): `version.c.in` filled in with its guards in
    order (a failed guard records its index and returns TRT_MISS), then its program (an
    operator error returns TRT_ERROR with the Python exception set), then its result; plus
    that version's own init and free.  Its text depends on that version alone, so it stays
    byte-identical, and its object cached, while later versions are added;
  * the dispatcher unit (`dispatch.generate_dispatcher`), the only one compiled on every
    rebuild, with the dispatch index.  The exported entries around it (`trident_scm_call` /
    `_init` / `_stats` / `_profile` / `_free`, see trident_rt.h) are fixed C in
    runtime/scm_main.c, and
    runtime/scm_dispatch.h says how the units fit together.

The constant tuple passed at init is: (globals, builtins, *version pools
concatenated); the dispatcher hands each version a pointer to its own pool,
which it indexes as `K[i]`.  Everything mutable lives in the state structs,
so two SCMs built from identical text stay independent.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from .. import abi
from ..errors import UnsupportedError
from ..ir import nodes as ir
from .dispatch import (  # noqa: F401 - the SCM's callers use them through this module
    DispatchIndex, Layout, consts_tuple, dispatch_index, generate_dispatcher, layout,
    version_key)
from .tables import Tables, braced, cstr
from .unit import SCMSource, Unit


# ir.IntOfFloat's operations, as trt_float_to_int's `mode` (scm_prelude.h)
_ROUNDING = {"trunc": 0, "floor": 1, "ceil": 2, "round": 3}

class _VersionGen:
    """The printer of one version's function body: a method per kind of node (`load` for
    sources, `expr` for integer expressions, `guard` / `env_check`, `instr`, `out`), each
    dispatching on the node's type; init-time tables go to `self.mod` (tables.py)."""

    def __init__(self, v: ir.Version, profile: bool = False):
        self.mod = Tables()
        self.v = v
        self.profile = profile
        self.lines: list[str] = []
        self.src_vars: dict = {}
        self.meta: dict = {}  # tensor source -> (meta var, ndim)
        self.tmp = 0

    def K(self, i: int) -> str:
        return f"K[{i}]"

    # -- sources: every load is a new reference kept in o<N>, released at exit
    def load(self, src) -> str:
        if src in self.src_vars:
            return self.src_vars[src]
        if isinstance(src, ir.Local):
            expr = f"(Py_INCREF(L[{src.index}]), L[{src.index}])"
        elif isinstance(src, ir.Global):
            expr = f"trt_load_global(S->globals, S->builtins, {self.mod.name(src.name)})"
        elif isinstance(src, ir.TypeOf):
            b = self.load(src.base)
            expr = f"({b} ? (Py_INCREF(Py_TYPE({b})), (PyObject *)Py_TYPE({b})) : NULL)"
        elif isinstance(src, ir.CallNoArgs):
            b = self.load(src.base)
            expr = f"trt_call_noargs({b})"
        elif isinstance(src, ir.ContextVarGet):
            b = self.load(src.base)
            d = "NULL" if src.default_const is None else self.K(src.default_const)
            expr = f"trt_contextvar_get({b}, {d})"
        elif isinstance(src, ir.DictEntryAt):
            b = self.load(src.base)
            expr = f"trt_dict_entry_at({b}, {src.index}, {int(src.value)})"
        elif isinstance(src, ir.ConstObj):
            expr = f"(Py_INCREF({self.K(src.index)}), {self.K(src.index)})"
        elif isinstance(src, ir.Attr):
            b = self.load(src.base)
            expr = _attr_expr(b, src.name, self.mod.name(src.name))
        elif isinstance(src, ir.GenericAttr):
            b = self.load(src.base)
            expr = f"trt_generic_getattr({b}, {self.mod.name(src.name)})"
        elif isinstance(src, ir.DictItem):
            b = self.load(src.base)
            expr = f"trt_dict_item({b}, {self.K(src.key_const)})"
        elif isinstance(src, ir.Item):
            b = self.load(src.base)
            if isinstance(src.key, int):
                expr = f"trt_getitem_int({b}, {src.key})"
            else:
                expr = f"trt_getitem_obj({b}, {self.mod.name(src.key)})"
        else:
            raise UnsupportedError(f"cannot load source {src}")
        var = f"o{len(self.src_vars)}"
        self.src_vars[src] = var
        self.lines.append(f"  {var} = {expr};")
        return var

    # -- integer expressions
    def leaf(self, leaf) -> str:
        if isinstance(leaf, ir.PyInt):
            o = self.load(leaf.source)
            return f"trt_pyint({o}, &ok)"
        if isinstance(leaf, ir.FloatIsNan):
            o = self.load(leaf.source)
            return f"trt_float_isnan({o}, &ok)"
        if leaf.tensor not in self.meta:
            # A tensor Dynamo reasons about without a tensor guard (a view's
            # `_base`): read the property, failing the guard if it is absent.
            o = self.load(leaf.tensor)
            if isinstance(leaf, ir.TensorSize):
                return f"api->tensor_prop({o}, {abi.TENSOR_PROPS['size']}, {leaf.dim}, &ok)"
            if isinstance(leaf, ir.TensorStride):
                return f"api->tensor_prop({o}, {abi.TENSOR_PROPS['stride']}, {leaf.dim}, &ok)"
            return f"api->tensor_prop({o}, {abi.TENSOR_PROPS['offset']}, 0, &ok)"
        m, nd = self.meta[leaf.tensor]
        if isinstance(leaf, ir.TensorSize):
            return f"{m}[{leaf.dim}]"
        if isinstance(leaf, ir.TensorStride):
            return f"{m}[{nd + leaf.dim}]"
        return f"{m}[{2 * nd}]"

    def expr(self, e, sub=None) -> str:
        """C of `e`; `sub` renders its operands (default: this method)."""
        sub = sub or self.expr
        if isinstance(e, ir.IntConst):
            return f"INT64_C({e.value})"
        if isinstance(e, ir.SymVar):
            return e.name
        if isinstance(e, ir.SymLeaf):
            return self.leaf(e.leaf)
        if isinstance(e, ir.UnOp):
            a = sub(e.operand)
            return {"-": f"trt_neg({a}, &ok)", "not": f"(!{a})", "abs": f"trt_abs({a}, &ok)"}[e.op]
        if isinstance(e, ir.FloatCmp):
            return f"({self.fexpr(e.lhs)} {e.op} {self.fexpr(e.rhs)})"
        if isinstance(e, ir.IntOfFloat):
            return f"trt_float_to_int({self.fexpr(e.operand)}, {_ROUNDING[e.op]}, &ok)"
        if isinstance(e, ir.BinOp):
            a, b = sub(e.lhs), sub(e.rhs)
            if e.op == "**":
                return f"trt_ipow({a}, {b}, &ok)"
            if e.op == "//":
                return f"trt_floordiv({a}, {b}, &ok)"
            if e.op == "%":
                return f"trt_mod({a}, {b}, &ok)"
            if e.op in ("max", "min"):
                return f"trt_{e.op}({a}, {b})"
            if e.op in ("<<", ">>"):
                return f"trt_shift({a}, {b}, {int(e.op == '<<')}, &ok)"
            if e.op in ("+", "-", "*"):  # beyond int64: fails (Python's ints do not wrap)
                return f"trt_{ {'+': 'add', '-': 'sub', '*': 'mul'}[e.op] }({a}, {b}, &ok)"
            op = {"and": "&&", "or": "||"}.get(e.op, e.op)
            return f"({a} {op} {b})"
        raise UnsupportedError(f"cannot emit expression {e}")

    def fexpr(self, e) -> str:
        """C (a double) of the float expression `e` (ir.FloatExpr); see scm_prelude.h."""
        if isinstance(e, ir.FloatVar):
            return e.name
        if isinstance(e, ir.PyFloat):
            return f"trt_pyfloat({self.load(e.source)}, &ok)"
        if isinstance(e, ir.FloatConst):
            v = e.value
            if v != v:
                return "((double)NAN)"
            if v in (float("inf"), float("-inf")):
                return "((double)INFINITY)" if v > 0 else "(-(double)INFINITY)"
            return f"({v.hex()})"  # exact: C99 hexadecimal floating constant
        if isinstance(e, ir.FloatOf):
            if e.exact:
                return f"trt_exact_double({self.expr(e.expr)}, &ok)"
            return f"((double){self.expr(e.expr)})"
        if isinstance(e, ir.IntDiv):
            return f"trt_idiv({self.expr(e.lhs)}, {self.expr(e.rhs)}, &ok)"
        if isinstance(e, ir.FloatUn):
            a = self.fexpr(e.operand)
            return {"-": f"(-{a})", "sqrt": f"trt_fsqrt({a}, &ok)"}[e.op]
        if isinstance(e, ir.FloatBin):
            a, b = self.fexpr(e.lhs), self.fexpr(e.rhs)
            if e.op == "/":
                return f"trt_fdiv({a}, {b}, &ok)"
            if e.op == "**":
                return f"trt_fpow({a}, {b}, &ok)"
            return f"({a} {e.op} {b})"
        raise UnsupportedError(f"cannot emit float expression {e}")

    def shared_expr(self, e, prefix: str) -> tuple[list, str]:
        """`e` (a shape guard's, `ShapeGuard.shared` when passes/shared_subexpressions set it)
        as (temporaries, C): each `ir.Shared` is an `int64_t` temporary `<prefix><index>`
        declared where its computation ends, each `ir.SharedRef` that temporary."""
        pre: list = []

        def emit(n) -> str:
            if isinstance(n, ir.Shared):
                name = f"{prefix}{n.index}"
                pre.append(f"int64_t {name} = {self.expr(n.expr, emit)};")
                return name
            if isinstance(n, ir.SharedRef):
                return f"{prefix}{n.index}"
            return self.expr(n, emit)

        return pre, emit(e)

    # -- guards
    def guard(self, k: int, g) -> None:
        text = _guard_comment(g)
        self.lines.append(f"  /* [{k}] {text} */")
        fail = f"FAIL({k})"
        if isinstance(g, ir.GlobalState):
            words = braced(*(f"INT64_C({w})" for w in g.words))
            self.mod.decls.append(
                f"static const trt_global_state gs_v{self.v.index}_{k} = {braced(words)};")
            self.lines.append(f"  if (memcmp(now, &gs_v{self.v.index}_{k}, sizeof(trt_global_state)) != 0) {fail};")
        elif isinstance(g, ir.TensorMatch):
            o = self.load(g.source)
            nd = len(g.sizes)
            spec = len(self.mod.specs)
            dims = lambda xs: braced(  # noqa: E731
                *("TRT_DYN" if x is None else f"INT64_C({x})" for x in xs))
            if nd:
                self.mod.decls.append(f"static const int64_t sz{spec}[] = {dims(g.sizes)};")
                self.mod.decls.append(f"static const int64_t st{spec}[] = {dims(g.strides)};")
            init = braced("NULL", g.dtype, g.device_type, g.device_index, int(g.requires_grad),
                          f"UINT64_C({g.dispatch_keys})", nd, f"sz{spec}" if nd else "NULL",
                          f"st{spec}" if nd else "NULL")
            self.mod.specs.append((init, g.type_const))
            m = f"m{len(self.meta)}"
            self.meta[g.source] = (m, nd)
            self.lines.insert(0, f"  int64_t {m}[{2 * nd + 1}];")
            self.lines.append(
                f"  if (!{o} || !api->tensor_match({o}, &S->spec[{spec}], {m})) {fail};")
        elif isinstance(g, ir.TypeMatch):
            o = self.load(g.source)
            self.lines.append(
                f"  if (!{o} || (PyObject *)Py_TYPE({o}) != {self.K(g.type_const)}) {fail};")
        elif isinstance(g, ir.IdMatch):
            o = self.load(g.source)
            self.lines.append(f"  if (!{o} || {o} != {self.K(g.const)}) {fail};")
        elif isinstance(g, ir.EqualsMatch):
            o = self.load(g.source)
            self.lines.append(
                f"  if (!trt_equals({o}, {self.K(g.type_const)}, {self.K(g.const)})) {fail};")
        elif isinstance(g, ir.LengthMatch):
            o = self.load(g.source)
            self.lines.append(
                f"  if (!trt_len_is({o}, {self.K(g.type_const)}, {g.length})) {fail};")
        elif isinstance(g, ir.DictKeysMatch):
            o = self.load(g.source)
            self.lines.append(f"  if (!trt_dict_keys({o}, {self.K(g.const)})) {fail};")
        elif isinstance(g, ir.NotInDict):
            o = self.load(g.source)
            self.lines.append(f"  if (!trt_not_in_dict({o}, {self.mod.name(g.name)})) {fail};")
        elif isinstance(g, ir.HasAttr):
            o = self.load(g.source)
            self.lines.append(f"  if (trt_has_attr({o}, {self.mod.name(g.name)}) != "
                              f"{int(g.present)}) {fail};")
        elif isinstance(g, ir.CallCheck):
            o = self.load(g.source)
            self.lines.append(f"  if (!trt_call_check({o}, {self.K(g.fn)}, {self.K(g.arg)})) {fail};")
        elif isinstance(g, ir.Contains):
            o = self.load(g.source)
            fn = "trt_dict_has" if g.kind == "dict" else "trt_set_has"
            want = 1 if g.present else 0
            self.lines.append(f"  if ({fn}({o}, {self.K(g.key)}) != {want}) {fail};")
        elif isinstance(g, ir.LoggerQuiet):
            o = self.load(g.source)
            self.lines.append(
                f"  if (!trt_logger_quiet({o}, {self.mod.name('disabled')}, "
                f"{self.mod.name('_cache')}, {self.mod.name('isEnabledFor')}, "
                f"{self.K(g.level_const)})) {fail};")
        elif isinstance(g, ir.SameObject):
            a, b = self.load(g.a), self.load(g.b)
            self.lines.append(f"  if (!{a} || {a} != {b}) {fail};")
        elif isinstance(g, ir.Distinct):
            vs = [self.load(s) for s in g.sources]
            conds = [f"{vs[i]} == {vs[j]}" for i in range(len(vs)) for j in range(i + 1, len(vs))]
            self.lines.append(f"  if ({' || '.join(conds)}) {fail};")
        elif isinstance(g, ir.ShapeGuard):
            pre, cond = self.shared_expr(g.expr if g.shared is None else g.shared, f"c{k}_")
            if not pre:
                self.lines.append(f"  ok = 1; if (!({cond}) || !ok) {fail};")
            else:
                self.lines.append("  ok = 1;\n  {")
                self.lines.extend(f"    {t}" for t in pre)
                self.lines.append(f"    if (!({cond}) || !ok) {fail};\n  }}")
        else:
            raise UnsupportedError(f"guard {type(g).__name__} has no C lowering")

    def env_check(self, c: ir.EnvCheck, g) -> None:
        """Guard `c.guard` of the environment block (`ir.EnvBlock`, passes/env_block.py): a row
        of the version's `envg_desc` table, evaluated with the block's other rows by
        scm_main.c (trt_envblock in scm_prelude.h), which the version's function re-evaluates
        only when something they read has changed.  The check of the block is emitted where
        the first of them stood."""
        k = c.guard
        if not self.mod.env:
            self.lines.append(f"  /* [{k}...] environment guards: envg_desc, cached */")
            args = "envg_desc, envg_ix, TRT_NENV, &S->envctx, &S->h.failed"
            self.lines.append(
                "  if (!trt_envblock_hit(&S->h.eb)) {\n"
                f"    if (!trt_envblock_eval(&S->h.eb, {args})) goto miss;\n"
                "  } else if (S->h.eb.valid == 2) {\n"
                "    FAIL(S->h.eb.failed);\n"
                f"  }} else if (S->h.eb.nlive && !trt_envblock_live(&S->h.eb, {args})) {{\n"
                "    goto miss;\n  }")
        self.mod.env.append(k)
        name = self.mod.name_ix(c.name) if c.name is not None else 0
        # names are interned from each chain's last step back to its root, as they always
        # were (the order of the version's name table, and so its C text, stays the same)
        chains = [[self._env_step(s) for s in reversed(ch)][::-1] for ch in c.chains]
        steps = [st for ch in chains for st in ch]
        flags = sum(abi.ENV_GUARD_FLAGS[f] for f in c.flags)
        self.mod.helpers.append(f"/* [{k}] {_guard_comment(g)} */")
        self.mod.helpers.append(f"static const trt_envstep es{k}[] = {braced(*steps)};")
        row = braced(f"TRT_EG_{c.kind.upper()}", flags, len(steps), len(chains[0]), f"es{k}",
                     c.c0, c.c1, name, f"INT64_C({c.n})")
        self.mod.env_rows.append(f"  {row},  /* [{k}] */")

    def _env_step(self, s: ir.EnvStep) -> str:
        """The C initializer of one step (`trt_envstep`)."""
        arg = self.mod.name_ix(s.arg) if s.op in ("global", "attr", "item_str") else s.arg
        return braced(f"TRT_ES_{s.op.upper()}", arg)

    # -- program
    def instr(self, ins) -> None:
        if isinstance(ins, ir.LoadTensor):
            # A pooled constant is Trident's own tensor; any other source needs its guard.
            if ins.source not in self.meta and not isinstance(ins.source, ir.ConstObj):
                raise UnsupportedError(f"tensor input {ins.source} has no tensor guard")
            self.lines.append(f"  api->frame_set_tensor(F, {ins.slot}, {self.load(ins.source)});")
        elif isinstance(ins, ir.LoadScalar):
            o = self.load(ins.source)
            if ins.kind == "int":
                self.lines.append(f"  ok = 1; {{ int64_t v = trt_pyint({o}, &ok); if (!ok) "
                                  f"goto bad_arg; api->frame_set_int(F, {ins.slot}, v); }}")
            else:
                self.lines.append(f"  if (!{o} || !PyFloat_CheckExact({o})) goto bad_arg;")
                self.lines.append(
                    f"  api->frame_set_double(F, {ins.slot}, PyFloat_AS_DOUBLE({o}));")
                if ins.var is not None:
                    self.lines.insert(0, f"  double {ins.var} = 0;")
                    self.lines.append(f"  {ins.var} = PyFloat_AS_DOUBLE({o});")
        elif isinstance(ins, (ir.SymDef, ir.FloatDef)):
            # An integer beyond int64, a division by zero, a float's domain error: a miss, so
            # that the call runs as eager does (Python's ints do not overflow); after a side
            # effect no miss can undo, an error.
            if isinstance(ins, ir.SymDef):
                ctype, value, setter = "int64_t", self.expr(ins.expr), "frame_set_int"
                exc, what = "PyExc_OverflowError", ("an integer of the version's program is "
                                                    "beyond int64 (or divided by zero)")
            else:
                ctype, value, setter = "double", self.fexpr(ins.expr), "frame_set_double"
                exc, what = "PyExc_ArithmeticError", ("a float of the version's program failed "
                                                      "(a division by zero, a domain error or "
                                                      "an overflow)")
            self.lines.insert(0, f"  {ctype} {ins.var} = 0;")
            late = (f"{{ PyErr_SetString({exc}, \"trident: {what} after the program wrote to "
                    "its arguments\"); goto error; }")
            miss = f"FAIL({len(self.v.guards)})"
            self.lines.append(f"  ok = 1; {ins.var} = {value}; "
                              f"if (!ok) {late if self.side_effects else miss};")
            self.lines.append(f"  api->{setter}(F, {ins.slot}, {ins.var});")
        elif isinstance(ins, ir.SymFromSlot):
            self.lines.insert(0, f"  int64_t {ins.var} = 0;")
            self.lines.append(f"  {ins.var} = api->frame_get_int(F, {ins.slot});")
        elif isinstance(ins, ir.Call):
            k = self.mod.op(ins)
            self.lines.append(f"  if (api->op_call(S->ops[{k}], F)) goto error;  /* {ins.op}.{ins.overload} */")
            self.side_effects = self.side_effects or ins.mutates
        elif isinstance(ins, ir.TritonLaunch):
            k = self.mod.launch(ins)
            if ins.select is None:
                g = [self.expr(e) for e in ins.grid]
                self.lines.append(f"  ok = 1; gx = {g[0]}; gy = {g[1]}; gz = {g[2]}; "
                                  "if (!ok) goto bad_arg;")
                self.lines.append(f"  rc = api->launch_call(S->launches[{k}], F, gx, gy, gz);"
                                  f"  /* {ins.kernel} */")
            else:
                rows = ins.select.grids
                self.lines.append(f"  {{ int64_t G[{3 * len(rows)}]; ok = 1;")
                for r, row in enumerate(rows):
                    self.lines.append("    " + " ".join(
                        f"G[{3 * r + d}] = {self.expr(e)};" for d, e in enumerate(row)))
                self.lines.append("    if (!ok) goto bad_arg;")
                self.lines.append(f"    rc = api->launch_select(S->launches[{k}], F, G, "
                                  f"{len(rows)}); }}  /* {ins.kernel}, selecting */")
            if self.side_effects:
                self.lines.append(
                    "  if (rc == TRT_PRECONDITION) { PyErr_SetString(PyExc_RuntimeError, "
                    f"{cstr(PRECONDITION_LATE % ins.kernel)}); goto error; }}")
            else:
                self.lines.append(f"  if (rc == TRT_PRECONDITION) {{ S->h.failed = "
                                  f"{len(self.v.guards)} + {k}; goto miss; }}")
            self.lines.append("  if (rc) goto error;")
            self.side_effects = True
        elif isinstance(ins, ir.ListItem):
            self.lines.append(
                f"  if (api->frame_list_item(F, {ins.src}, {ins.index}, {ins.dst})) goto error;")
        else:
            raise UnsupportedError(f"instruction {type(ins).__name__} has no C lowering")

    # -- result
    def out(self, o) -> str:
        """Emit code building `o`; returns the C variable holding a new ref."""
        var = f"r{self.tmp}"
        self.tmp += 1
        self.lines.insert(0, f"  PyObject *{var} = NULL;")
        self.cleanup.append(var)
        if isinstance(o, ir.OutSlot):
            self.lines.append(f"  {var} = api->frame_to_py(F, {o.slot}); if (!{var}) goto error;")
        elif isinstance(o, ir.OutSym):
            ctor = "PyBool_FromLong" if o.kind == "bool" else "PyLong_FromLongLong"
            self.lines.append(f"  {var} = {ctor}({o.var}); if (!{var}) goto error;")
        elif isinstance(o, ir.OutConst):
            self.lines.append(f"  {var} = {self.K(o.const)}; Py_INCREF({var});")
        elif isinstance(o, ir.OutSource):
            s = self.load(o.source)
            self.lines.append(f"  if (!{s}) goto bad_arg; {var} = {s}; Py_INCREF({var});")
        elif isinstance(o, ir.OutSeq):
            items = [self.out(x) for x in o.items]
            ctor = "PyList_New" if o.kind == "list" else "PyTuple_New"
            setter = "PyList_SET_ITEM" if o.kind == "list" else "PyTuple_SET_ITEM"
            self.lines.append(f"  {var} = {ctor}({len(items)}); if (!{var}) goto error;")
            for i, it in enumerate(items):
                self.lines.append(f"  {setter}({var}, {i}, {it}); {it} = NULL;")
            if o.kind == "size":  # torch.Size(tuple)
                self.lines.append(
                    f"  {{ PyObject *sz = PyObject_CallOneArg({self.K(o.ctor)}, {var}); "
                    f"Py_DECREF({var}); {var} = sz; if (!{var}) goto error; }}")
        elif isinstance(o, ir.OutStores):  # Dynamo's order: the stores, then the result
            for st in o.stores:
                t = self.load(st.target)
                val = self.out(st.value)
                self.lines.append(
                    f"  if (!{t}) goto bad_arg; "
                    f"if (PyObject_SetAttr({t}, {self.K(st.name)}, {val}) < 0) goto error;")
            res = self.out(o.result)
            self.lines.append(f"  {var} = {res}; {res} = NULL;")
        elif isinstance(o, ir.OutNew):  # K[cls](**{names: values}), one vectorcall
            vals = [self.out(x) for x in o.values]
            argv = f"{var}_argv"
            self.lines.append(f"  {{ PyObject *{argv}[{max(len(vals), 1)}] = "
                              f"{{{', '.join(vals) or 'NULL'}}};")
            self.lines.append(f"    {var} = PyObject_Vectorcall({self.K(o.cls)}, {argv}, 0, "
                              f"{self.K(o.kwnames)}); if (!{var}) goto error; }}")
        elif isinstance(o, ir.OutShared):  # the same object at each of its places
            if o.item is not None:
                self.shared[o.share] = self.out(o.item)
            elif o.share not in self.shared:
                raise UnsupportedError("a shared result object is used before it is built")
            self.lines.append(f"  {var} = {self.shared[o.share]}; Py_INCREF({var});")
        elif isinstance(o, ir.OutDict):
            vals = [self.out(x) for x in o.values]
            self.lines.append(f"  {var} = PyDict_New(); if (!{var}) goto error;")
            for kc, val in zip(o.keys, vals):
                self.lines.append(
                    f"  if (PyDict_SetItem({var}, {self.K(kc)}, {val}) < 0) goto error;")
        else:
            raise UnsupportedError(f"output {o}")
        return var

    def emit(self) -> str:
        """The body of the version's function (`${body}` of version.c.in)."""
        v = self.v
        self.cleanup: list[str] = []
        self.shared: dict[int, str] = {}  # OutShared number -> the C variable holding it
        self.side_effects = False
        self.lines.append("  int ok = 1, rc = 0;\n  int64_t gx = 1, gy = 1, gz = 1;")
        env = {c.guard: c for c in v.env.checks} if v.env else {}
        for k, g in enumerate(v.guards):
            if k in env:
                self.env_check(env[k], g)
            else:
                self.guard(k, g)
        # Python ints the program reads must fit in int64: checked here, so a
        # huge int is a specialization miss (Dynamo then decides), not an error.
        for src in v.int_checks:  # passes/int_checks.py
            o = self.load(src)
            self.lines.append(f"  ok = 1; (void)trt_pyint({o}, &ok); if (!ok) FAIL({len(v.guards)});")
        if self.profile:
            self.lines.append("  trt_t1 = trt_now_ns(); S->h.ns_guards += trt_t1 - trt_t0;")
        self.lines.append("  S->h.hits++;")
        if v.run_mode:  # the function's own whole-body mode, left at done:
            self.lines.append(f"  M = api->mode_enter({ir.RUN_MODES[v.run_mode][0]}); "
                              "if (!M) goto error;")
        self.lines.append(f"  F = api->frame_acquire({max(v.nslots, 1)});")
        for ins in v.program:
            self.instr(ins)
        res = self.out(v.output)
        self.lines.append(f"  result = {res}; {res} = NULL;")
        self.lines.append("  *status = TRT_HIT;")
        self.lines.append("  goto done;")
        return "\n".join(self.lines)


PRECONDITION_LATE = (
    "trident: the CUBIN captured for %s does not fit these arguments (alignment, divisibility "
    "or dtype), and the call already wrote data, so it cannot be retried; this input needs "
    "eager mode (trident.jit(..., strict=False) falls back once this is reported)")


def _attr_expr(base: str, name: str, name_ref: str) -> str:
    if name == "__dict__":
        return f"trt_attr_dict({base}, {name_ref})"
    if name in abi.FUNC_ATTRS:  # trt_attr_func's `which` (TRT_FN_*)
        return f"trt_attr_func({base}, {name_ref}, {abi.FUNC_ATTRS[name]})"
    return f"trt_getattr({base}, {name_ref})"


_COMMENT_MAX = 400


def _guard_comment(g) -> str:
    text = _comment(str(g))
    if len(text) > _COMMENT_MAX:  # explain() prints the whole guard
        text = text[:_COMMENT_MAX] + f" ... ({len(text)} characters)"
    return text


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _comment(s: str) -> str:
    # No memory addresses: the text (and so the build hash) must not change
    # from one process to the next.
    return _ADDRESS.sub("", s).replace("*/", "* /").replace("\n", " ")


def generate(versions, profile: bool = False) -> SCMSource:
    """The C of an SCM holding `versions`, tried in order."""
    return SCMSource(tuple(generate_version(v, profile) for v in versions),
                     generate_dispatcher(versions))


def generate_version(v: ir.Version, profile: bool = False) -> Unit:
    """The translation unit of one version: `version.c.in` filled in.  Its text depends on `v`
    (its index names its symbols) and `profile` alone, so adding versions never changes it.
    With `profile` (TRIDENT_PROFILE=1) the function also times its guards and its program into
    its head."""
    gen = _VersionGen(v, profile)
    body = gen.emit()
    mod = gen.mod
    ovars = list(gen.src_vars.values())
    local = "".join(f"  PyObject *{o} = NULL;\n" for o in ovars)
    release = "".join(f"  Py_XDECREF({o});\n" for o in ovars)
    release += "".join(f"  Py_XDECREF({r});\n" for r in gen.cleanup)
    if profile:  # TRIDENT_PROFILE=1: the counters trident_scm_profile reads
        local = "  int64_t trt_t0 = trt_now_ns(), trt_t1 = 0;\n" + local
        release += ("  if (trt_t1) S->h.ns_program += trt_now_ns() - trt_t1;\n"
                    "  else { S->h.misses++; S->h.ns_misses += trt_now_ns() - trt_t0; }\n")
    if v.run_mode:  # the function's own mode, entered after the guards, left at done:
        local = "  void *M = NULL;\n" + local
        release = "  if (M) api->mode_exit(M);\n" + release
    env_table = ""
    if mod.env:
        env_table = "".join(f"{line}\n" for line in (
            f"#define TRT_NENV {len(mod.env)}", "static const trt_envg_desc envg_desc[] = {",
            *mod.env_rows, "};",
            "static const int envg_ix[] = {" + ", ".join(map(str, mod.env)) + "};", ""))
    init = []
    if mod.names:  # a table and a loop: a call and a branch per name compiled slower
        init.append("  static const char *const names[] = {"
                    + ", ".join(cstr(n) for n in mod.names) + "};")
        init.append(f"  for (int i = 0; i < {len(mod.names)}; ++i)")
        init.append("    if (!(S->N[i] = PyUnicode_InternFromString(names[i]))) goto fail;")
    for j, (spec, tk) in enumerate(mod.specs):
        init.append("  {")
        init.append(f"    const trt_tensor_spec t = {spec};")
        init.append(f"    S->spec[{j}] = t;\n    S->spec[{j}].type = (PyTypeObject *)S->K[{tk}];")
        init.append("  }")
    init.extend(mod.ops)
    init.extend(mod.launches)
    text = _VERSION_C.substitute(
        index=v.index, names_size=max(len(mod.names), 1), specs_size=max(len(mod.specs), 1),
        ops_size=max(len(mod.ops), 1), launches_size=max(len(mod.launches), 1),
        decls="".join(f"{d}\n" for d in mod.decls),
        helpers="".join(f"{h}\n" for h in (*mod.helpers, "")) if mod.helpers else "",
        env_table=env_table, locals=local, body=body, exit=release,
        nops=len(mod.ops), nlaunches=len(mod.launches), nnames=len(mod.names),
        init="".join(f"{line}\n" for line in init))
    return Unit(f"version_{v.index}.c", text)


# The skeleton of a version's unit, with ${name} placeholders (string.Template).
_VERSION_C = string.Template((Path(__file__).parent / "version.c.in").read_text())


