"""Triton kernel -> CUBIN, parameter ABI and launch preconditions.

At capture, the captured graph runs once with real tensors; every Triton
launch it makes is recorded (`LaunchRecord`).  `resolve` then asks Triton
itself which compiled kernel those arguments select (its own binder and
cache, compiling if needed), and `lower_launch` turns that into an IR
`TritonLaunch`: the CUBIN, the metadata the launch needs, each parameter's
kind in Triton's launch ABI, and the preconditions (alignment,
divisibility, equality to 1, dtype) the CUBIN was specialised on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UnsupportedError
from ..ir import nodes as ir

# Triton pointer element types -> torch dtypes (for the dtype precondition).
_PTR_DTYPES = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
    "fp64": torch.float64, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
    "i64": torch.int64, "u8": torch.uint8, "i1": torch.bool,
    "fp8e4nv": getattr(torch, "float8_e4m3fn", None),
    "fp8e5": getattr(torch, "float8_e5m2", None),
}
_SCALAR_KINDS = {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16",
                 "fp32", "fp64"}
_FLOAT_KINDS = {"fp16", "bf16", "fp32", "fp64", "f32"}


@dataclass
class LaunchRecord:
    """One launch as the capturing call made it (real values)."""

    kernel_idx: int
    constant_args_idx: int
    grid: list
    kwargs: dict


@dataclass
class Resolved:
    jit: object            # the triton.JITFunction
    compiled: object       # triton CompiledKernel
    names: list            # parameter names, in signature order
    specialization: list   # [(type, attr)] per parameter, from Triton's binder
    values: dict           # every parameter's value at capture (constexprs included)
    grid_index: int        # which of Dynamo's per-config grids applies
    heuristics: list       # names set by @triton.heuristics
    autotune_key: list     # @triton.autotune key names
    config: str


def is_triton_hop(target) -> bool:
    try:
        from torch._higher_order_ops.triton_kernel_wrap import (
            triton_kernel_wrapper_functional,
            triton_kernel_wrapper_mutation,
        )
    except ImportError:
        return False
    if target is triton_kernel_wrapper_functional:
        raise UnsupportedError("functional Triton wrapper (triton_kernel_wrapper_functional)")
    return target is triton_kernel_wrapper_mutation


def resolve(rec: LaunchRecord) -> Resolved:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    kernel = kernel_side_table.get_kernel(rec.kernel_idx)
    consts = dict(kernel_side_table.get_constant_args(rec.constant_args_idx))
    values = {**consts, **rec.kwargs}
    grid_index = 0
    heur_names: list = []
    key: list = []
    config = ""
    k = kernel
    while not isinstance(k, JITFunction):
        if isinstance(k, Autotuner):
            best = getattr(k, "best_config", None)
            if best is None:
                raise UnsupportedError("autotuner has no best_config after the capturing call")
            if best in k.configs:
                grid_index = k.configs.index(best)
            values.update(best.all_kwargs())
            key = list(k.keys) if hasattr(k, "keys") else list(getattr(k, "key", []))
            config = f"config={best}"
            k = k.fn
        elif isinstance(k, Heuristics):
            names = k.arg_names
            for name, h in k.values.items():
                values[name] = h({**{n: values.get(n) for n in names}, **values})
                heur_names.append(name)
            k = k.fn
        else:
            raise UnsupportedError(f"Triton kernel wrapper {type(k).__name__}")
    jit = k
    grid = rec.grid[grid_index] if rec.grid else (1, 1, 1)
    compiled = jit.run(grid=grid, warmup=True, **values)
    if compiled is None:
        raise UnsupportedError(f"Triton did not compile {jit.fn.__qualname__}")
    if hasattr(compiled, "result"):
        compiled = compiled.result()
    device = torch.cuda.current_device()
    binder = jit.device_caches[device][4]
    bound, specialization, _options = binder(**values)
    names = [p.name for p in jit.params]
    return Resolved(jit=jit, compiled=compiled, names=names, specialization=list(specialization),
                    values=dict(bound), grid_index=grid_index, heuristics=heur_names,
                    autotune_key=key, config=config)


def lower_launch(res: Resolved, node_kwargs: dict, grid_exprs: tuple, arg_of, rt,
                 consts) -> ir.TritonLaunch:
    """Build the IR launch.  `node_kwargs` are the graph's values (fx nodes or
    constants) by parameter name; `arg_of(value)` encodes one as an IR Arg."""
    md = res.compiled.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise UnsupportedError(f"{res.jit.fn.__qualname__} needs scratch memory")
    if getattr(md, "tensordesc_meta", None):
        raise UnsupportedError(f"{res.jit.fn.__qualname__} uses tensor descriptors")
    dynamic = {n for n, v in node_kwargs.items() if isinstance(v, torch.fx.Node)
               and not isinstance(v.meta.get("val", v.meta.get("example_value")), torch.Tensor)}
    for name in res.heuristics + res.autotune_key:
        deps = dynamic if name in res.autotune_key else dynamic
        if name in res.autotune_key and name in deps:
            raise UnsupportedError(f"autotune key {name!r} is symbolic in this version")
    if res.heuristics and dynamic:
        raise UnsupportedError("@triton.heuristics over symbolic arguments "
                               f"({', '.join(sorted(dynamic))})")
    params = []
    for name, (ty, attr) in zip(res.names, res.specialization):
        value = node_kwargs.get(name, res.values.get(name))
        if isinstance(ty, tuple):
            raise UnsupportedError(f"tuple kernel argument {name}")
        if ty == "constexpr":
            if isinstance(value, torch.fx.Node):  # an int Triton specialised to 1
                params.append(ir.LaunchParam(name, "one", arg_of(value), False, -1))
            continue
        div16 = attr == "D"
        if ty.startswith("*"):
            if not isinstance(value, torch.fx.Node):
                raise UnsupportedError(f"pointer argument {name} is not a graph tensor")
            dt = _PTR_DTYPES.get(ty[1:])
            code = rt.enum_code(dt) if dt is not None else -1
            params.append(ir.LaunchParam(name, "ptr", arg_of(value), div16, code))
        elif ty in _SCALAR_KINDS or ty == "f32":
            kind = "fp32" if ty == "f32" else ty
            if isinstance(value, torch.fx.Node):
                arg = arg_of(value)
            elif kind in _FLOAT_KINDS:
                arg = ir.ConstArg("double", float(value))
            else:
                arg = ir.ConstArg("int", int(value))
            params.append(ir.LaunchParam(name, kind, arg, div16, -1))
        else:
            raise UnsupportedError(f"Triton argument type {ty} ({name})")
    cubin = res.compiled.asm.get("cubin")
    if not cubin:
        raise UnsupportedError("the compiled kernel has no CUBIN (not an NVIDIA target)")
    return ir.TritonLaunch(
        kernel=res.jit.fn.__qualname__, symbol=md.name, cubin_const=consts.add(bytes(cubin)),
        num_warps=int(md.num_warps), num_ctas=int(getattr(md, "num_ctas", 1)),
        shared=int(md.shared), cooperative=bool(getattr(md, "launch_cooperative_grid", False)),
        pdl=bool(getattr(md, "launch_pdl", False)), params=tuple(params), grid=grid_exprs,
        config=res.config)
