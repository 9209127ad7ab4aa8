"""What Trident asks Triton: which compiled kernel a launch selects, and how a launch's variant
is keyed.  No IR here (ir/launch.py lowers a launch): capture and lowering both use this.

At capture, the captured graph runs once with real tensors; every Triton launch it makes is
recorded (`LaunchRecord`).  `resolve` then asks Triton itself which compiled kernel those
arguments select (its own binder and cache, compiling if needed): the CUBIN, its metadata and
the specialisation of each parameter (`Resolved`).  `select_info`, `key_of`,
`key_transforms`, `spec_class` and `bucket` describe what an autotuned launch's choice
depends on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

from ..errors import UnsupportedError

# Triton pointer element types -> torch dtypes (for the dtype precondition).
PTR_DTYPES = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
    "fp64": torch.float64, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
    "i64": torch.int64, "u8": torch.uint8, "i1": torch.bool,
    "fp8e4nv": getattr(torch, "float8_e4m3fn", None),
    "fp8e5": getattr(torch, "float8_e5m2", None),
}
SCALAR_KINDS = {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16",
                 "fp32", "fp64"}
FLOAT_KINDS = {"fp16", "bf16", "fp32", "fp64", "f32"}


@dataclass
class LaunchRecord:
    """One launch as the capturing call made it (real values)."""

    kernel_idx: int
    constant_args_idx: int
    grid: list
    kwargs: dict
    best_config: object = None  # the config the user's autotuner chose for this launch


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
            best = rec.best_config or getattr(k, "best_config", None)
            if best is None:
                raise UnsupportedError("autotuner has no best_config after the capturing call")
            if best in k.configs:
                grid_index = k.configs.index(best)
            else:  # chosen by the user's autotuner; Dynamo's copy has its configs
                c = config_index(k.configs, best)
                if c is None:
                    raise UnsupportedError("the autotuner chose a config Dynamo's copy lacks")
                grid_index, best = c, k.configs[c]
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
    grid = rec.grid[grid_index] if len(rec.grid) > 1 else (rec.grid[0] if rec.grid else (1, 1, 1))
    res = resolved_for(k, values, grid, grid_index, config)
    res.heuristics, res.autotune_key = heur_names, key
    return res


def check_metadata(res: Resolved) -> None:
    md = res.compiled.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise UnsupportedError(f"{res.jit.fn.__qualname__} needs scratch memory")
    if getattr(md, "tensordesc_meta", None):
        raise UnsupportedError(f"{res.jit.fn.__qualname__} uses tensor descriptors")
    mode = getattr(md, "instrumentation_mode", "") or ""
    if mode:
        # TRITON_INSTRUMENTATION_MODE (Triton 3.8's gsan adds a kernel parameter after the
        # signature's; the others need profile scratch or hooks)
        raise UnsupportedError(f"{res.jit.fn.__qualname__} was compiled with Triton "
                               f"instrumentation ({mode!r}): its launch is not Triton 3.6's ABI")
    if not res.compiled.asm.get("cubin"):
        raise UnsupportedError("the compiled kernel has no CUBIN (not an NVIDIA target)")


# ------------------------------------------------------------ selection

# trt_launch_param kinds, trt_launch_key kinds and transforms (runtime/trident_rt.h)
from ..abi import KEY_CODES, PARAM_CODES, TRANSFORM_CODES  # noqa: F401

_BUCKET_LIMIT = 1 << 40
_MISSING = object()


def config_index(configs, best):
    """Index of the config in `configs` (Dynamo's copy, heuristics folded in)
    that is `best` (a config of the user's autotuner), or None."""
    want = best.all_kwargs()
    for i, c in enumerate(configs):
        have = c.all_kwargs()
        if all(have.get(k, _MISSING) == v for k, v in want.items()):
            return i
    return None


def select_info(kernel):
    """(dynamo_autotuner, user_autotuner, jit) when the side table's `kernel`
    is an @triton.autotune directly over its @triton.jit function whose config
    the user's own autotuner can choose per call; else None."""
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    if not isinstance(kernel, Autotuner) or not isinstance(kernel.fn, JITFunction):
        return None
    user = getattr(kernel, "_trident_orig_autotuner", kernel)
    if len(user.configs) != len(kernel.configs) or len(kernel.configs) < 1:
        return None  # Dynamo pruned configs: a choice could have no grid here
    if any(c.pre_hook is not None for c in user.configs):
        return None
    if any(config_index(kernel.configs, c) is None for c in user.configs):
        return None
    return kernel, user, kernel.fn


def spec_class(x: int) -> int:
    """What Triton's specialisation reads of an int argument (== 1, a multiple
    of 16, 32 or 64 bits), as one number: the native key's class word."""
    return int(x == 1) | (int(x % 16 == 0) << 1) | (int(not -2**31 <= x < 2**31) << 2)


def bucket(transform: str, x: int) -> int:
    """FlagGems' LibTuner key strategies ("log", "align32"), where exact."""
    if transform == "log2" and 1 <= x <= _BUCKET_LIMIT:
        return 1 << (x - 1).bit_length()
    if transform == "align32" and -_BUCKET_LIMIT <= x <= _BUCKET_LIMIT:
        return -(-x // 32) * 32
    return x


def key_of(kinds: tuple, values: tuple, transforms: tuple = ()) -> tuple:
    """The selection key launch_select computes natively, from Python values."""
    out = []
    transforms = tuple(transforms) or ("raw",) * len(kinds)
    for kind, v, t in zip(kinds, values, transforms):
        if kind == "ptr":
            out.append(int(v.data_ptr() % 16 == 0))
        elif kind == "int":
            x = int(v)
            if t == "raw":
                out.append(x)
            elif t == "class":
                out.append(spec_class(x))
            else:
                out += [bucket(t, x), spec_class(x)]
        else:
            out.append(struct.unpack("<q", struct.pack("<d", float(v)))[0])
    return tuple(out)


def key_transforms(tuner, names, kinds, jit=None) -> tuple:
    """Per key operand, what the native key keeps of it (TRANSFORM_CODES).

    A variant (config and CUBIN) is a function of the autotuner's key and of
    Triton's specialisation of each argument (heuristics are constants of the
    version, config pre_hooks are refused).  So an int operand the tuner's key
    does not name keeps only its specialisation class, and a key operand the
    tuner buckets with a strategy known here keeps its bucket and class.
    Triton's own Autotuner keys on raw values; FlagGems' LibTuner on its
    strategies.  Any other tuner (its own `run`): every int stays raw, as
    does an operand that is not a plain (non-constexpr) parameter of `jit`."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # pragma: no cover - only reached with Triton
        return ("raw",) * len(names)
    tk = [k for k in (getattr(tuner, "keys", None) or ())]
    per_key: dict | None
    if type(tuner).run is Autotuner.run:
        per_key = {k: "raw" for k in tk}
    else:
        per_key = _libtuner_strategies(tuner, tk)
    plain = None
    if jit is not None:
        plain = {p.name for p in getattr(jit, "params", ())
                 if not getattr(p, "is_constexpr", True)}
    out = []
    for n, kind in zip(names, kinds):
        if kind != "int" or per_key is None or plain is None or n not in plain:
            out.append("raw")
        else:
            out.append(per_key.get(n, "class"))
    return tuple(out)


def _libtuner_strategies(tuner, keys) -> dict | None:
    """{key name: transform} for a FlagGems LibTuner (its cache key is
    get_key(args): each key's strategy, then the tensors' dtypes), else None."""
    cls = type(tuner)
    lib = next((c for c in cls.__mro__ if c.__name__ == "LibTuner"
                and c.__module__.startswith("flag_gems.")), None)
    table = getattr(lib, "_strategy_table", None)
    if lib is None or not isinstance(table, dict) or cls.run is not lib.run:
        return None
    if cls.get_key is not lib.get_key:
        return None
    strategy = getattr(tuner, "strategy", None)
    if strategy is None:
        return {k: "raw" for k in keys}
    if len(strategy) != len(keys):
        return None
    known = {"log": "log2", "align32": "align32", "default": "raw", None: "raw"}
    out = {}
    for k, fn in zip(keys, strategy):
        name = next((n for n, f in table.items() if f is fn and n in known), _MISSING)
        # an unknown strategy: the raw value (finer than any bucket)
        out[k] = known[name] if name is not _MISSING else "raw"
    return out


def resolved_for(jit, values: dict, grid, grid_index: int, config: str) -> Resolved:
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
                    values=dict(bound), grid_index=grid_index, heuristics=[], autotune_key=[],
                    config=config)
