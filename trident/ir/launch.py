"""A Triton launch in the host IR: `lower_launch` turns what Triton selected for the capturing
call (`triton.launch.Resolved`) into an `ir.TritonLaunch` (the CUBIN, the metadata the launch
needs, each parameter's kind in Triton's launch ABI, and the preconditions: alignment,
divisibility, equality to 1, dtype, that the CUBIN was specialised on); `Resolver` makes the
same for each new key of a selecting launch, at call time."""

from __future__ import annotations

import torch

from ..abi import DTYPE_ANY, PARAM_CODES, PARAM_CONST
from ..errors import UnsupportedError
from ..triton.launch import (
    FLOAT_KINDS,
    PTR_DTYPES,
    SCALAR_KINDS,
    Resolved,
    check_metadata,
    config_index,
    resolved_for,
)
from . import nodes as ir

_MISSING = object()


def lower_launch(res: Resolved, node_kwargs: dict, grid_exprs: tuple, arg_of, rt,
                 consts, select=None) -> ir.TritonLaunch:
    """Build the IR launch.  `node_kwargs` are the graph's values (fx nodes or
    constants) by parameter name; `arg_of(value)` encodes one as an IR Arg.
    `select`: the launch's ir.LaunchSelect when it chooses its variant per call."""
    md = res.compiled.metadata
    check_metadata(res)
    dynamic = {n for n, v in node_kwargs.items() if isinstance(v, torch.fx.Node)
               and not isinstance(v.meta.get("val", v.meta.get("example_value")), torch.Tensor)}
    if select is None:
        for name in res.autotune_key:
            if name in dynamic:
                raise UnsupportedError(f"autotune key {name!r} is symbolic in this version")
        if res.heuristics and dynamic:
            raise UnsupportedError("@triton.heuristics over symbolic arguments "
                                   f"({', '.join(sorted(dynamic))})")
    args = {n: (arg_of(v) if isinstance(v, torch.fx.Node) else v) for n, v in node_kwargs.items()}
    params = launch_params(res, args, rt)
    cubin = res.compiled.asm.get("cubin")
    return ir.TritonLaunch(
        kernel=res.jit.fn.__qualname__, symbol=md.name, cubin_const=consts.add(bytes(cubin)),
        num_warps=int(md.num_warps), num_ctas=int(getattr(md, "num_ctas", 1)),
        shared=int(md.shared), cooperative=bool(getattr(md, "launch_cooperative_grid", False)),
        pdl=bool(getattr(md, "launch_pdl", False)), params=tuple(params), grid=grid_exprs,
        config=res.config, select=select)


def launch_params(res: Resolved, args: dict, rt) -> list:
    """Each passed parameter of `res`'s CUBIN, in Triton's launch ABI.  `args`:
    parameter name -> ir.Arg (a graph value) or a Python constant."""
    params = []
    for name, (ty, attr) in zip(res.names, res.specialization):
        value = args.get(name, res.values.get(name))
        is_arg = isinstance(value, (ir.Slot, ir.ConstArg))
        if isinstance(ty, tuple):
            raise UnsupportedError(f"tuple kernel argument {name}")
        if ty == "constexpr":
            if isinstance(value, ir.Slot):  # an int Triton specialised to 1
                params.append(ir.LaunchParam(name, "one", value, False, DTYPE_ANY))
            continue
        div16 = attr == "D"
        if ty.startswith("*"):
            if not isinstance(value, ir.Slot):
                raise UnsupportedError(f"pointer argument {name} is not a graph tensor")
            dt = PTR_DTYPES.get(ty[1:])
            code = rt.enum_code(dt) if dt is not None else DTYPE_ANY
            params.append(ir.LaunchParam(name, "ptr", value, div16, code))
        elif ty in SCALAR_KINDS or ty == "f32":
            kind = "fp32" if ty == "f32" else ty
            if is_arg:
                arg = value
            elif kind in FLOAT_KINDS:
                arg = ir.ConstArg("double", float(value))
            else:
                arg = ir.ConstArg("int", int(value))
            params.append(ir.LaunchParam(name, kind, arg, div16, DTYPE_ANY))
        else:
            raise UnsupportedError(f"Triton argument type {ty} ({name})")
    return params


def param_tuple(p: ir.LaunchParam) -> tuple:
    """(kind, slot, ival, dval, div16, dtype): one trt_launch_param."""
    code = PARAM_CODES[p.kind]
    if isinstance(p.arg, ir.Slot):
        return (code, p.arg.index, 0, 0.0, int(p.div16), p.dtype)
    if p.arg.kind == "double":
        return (code, PARAM_CONST, 0, float(p.arg.value), int(p.div16), p.dtype)
    return (code, PARAM_CONST, int(p.arg.value), 0.0, int(p.div16), p.dtype)


class Resolver:
    """The variants of one selecting launch, by key.

    Called natively (launch_select) for a key the launch's table lacks, with
    the key, the values of its operands and the evaluated grid of every
    config.  A key it has seen returns its variant at once; a new key runs the
    user's autotuner exactly as eager would (benchmarking a key it has not
    tuned, then launching the chosen config), and the CUBIN Triton compiled for
    that config and these arguments becomes the key's variant.  Keys that
    come to the same CUBIN and grid row get the same variant object, which
    the native side parses (and loads) once.  Its table outlives SCM rebuilds
    (it lives in the version's constant pool).

    The key is what key_transforms keeps of each operand: a bucket of the
    tuner's and a specialisation class where that is all the variant
    depends on, so a new size inside a known bucket and class (a decode
    step's longer KV length) never leaves native code."""

    def __init__(self, dynamo_tuner, user_tuner, jit, names, kinds, const_kwargs, args, rt,
                 nrows, transforms=()):
        self.dynamo_tuner = dynamo_tuner
        self.user_tuner = user_tuner
        self.jit = jit
        self.names = tuple(names)
        self.kinds = tuple(kinds)
        self.transforms = tuple(transforms) or ("raw",) * len(self.kinds)
        self.const_kwargs = dict(const_kwargs)
        self.args = dict(args)
        self.rt = rt
        self.nrows = nrows
        self.table: dict = {}
        self.configs: dict = {}      # key -> the config, for humans
        self.python_only: dict = {}  # key -> why it launches through Triton each time
        self.kernels: dict = {}      # variant -> itself: one object per distinct variant
        self.calls = 0               # resolver calls (native table misses)
        self.tuned = 0               # of which ran the user's autotuner

    def __call__(self, key, operands, grids):
        self.calls += 1
        v = self.table.get(key)
        if v is not None:
            return (False, v)
        kwargs = {**self.const_kwargs, **dict(zip(self.names, operands))}
        self.tuned += 1
        self.run_user(kwargs, grids)
        best = self.user_tuner.best_config
        v = self.variant(key, kwargs, best, grids)
        return (True, v)

    def grid_row(self, c: int) -> int:
        return c if self.nrows > 1 else 0

    def run_user(self, kwargs, grids):
        configs = self.dynamo_tuner.configs

        def grid_fn(meta):
            for i, c in enumerate(configs):
                if all(meta.get(k, _MISSING) == v for k, v in c.kwargs.items()):
                    return tuple(grids[self.grid_row(i)])
            raise RuntimeError("trident: no captured grid for the autotuner's config "
                               f"{ {k: meta.get(k) for k in configs[0].kwargs} }")

        self.user_tuner[grid_fn](**kwargs)

    def variant(self, key, kwargs, best, grids=None):
        """The key's variant tuple for `best`, or None when it cannot launch
        natively (it then runs through Triton on every call of that key)."""
        c = config_index(self.dynamo_tuner.configs, best)
        if c is None:
            self.python_only[key] = "the chosen config is not among the captured ones"
            return None
        cfg = self.dynamo_tuner.configs[c]
        values = {**kwargs, **cfg.all_kwargs()}
        grid = tuple(grids[self.grid_row(c)]) if grids else (1, 1, 1)
        try:
            res = resolved_for(self.jit, values, grid, c, f"config={cfg}")
            check_metadata(res)
            params = launch_params(res, self.args, self.rt)
        except UnsupportedError as e:
            self.python_only[key] = str(e)
            return None
        md = res.compiled.metadata
        v = (str(md.name), bytes(res.compiled.asm["cubin"]), int(md.num_warps),
             int(getattr(md, "num_ctas", 1)), int(md.shared),
             int(bool(getattr(md, "launch_cooperative_grid", False))),
             int(bool(getattr(md, "launch_pdl", False))), self.grid_row(c),
             tuple(param_tuple(p) for p in params))
        v = self.kernels.setdefault(v, v)
        self.table[key] = v
        self.configs[key] = str(cfg)
        return v

    def summary(self) -> str:
        s = (f"{len(self.table)} keys, {len(self.kernels)} kernels, {self.calls} table misses, "
             f"{self.tuned} autotuner runs")
        if self.python_only:
            s += f", {len(self.python_only)} keys through Triton"
        return s
