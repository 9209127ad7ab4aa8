"""Triton launches in a captured graph: whether one needs static shapes, and recording each
launch's real values while the capturing call runs the graph (`LaunchRecord`)."""

from __future__ import annotations

import torch

from ..triton.launch import LaunchRecord, select_info


def triton_needs_static(gm) -> bool:
    """Does a Triton launch in `gm` feed a dynamic value to an autotune key
    or to a kernel under @triton.heuristics?  (Its config would then hold
    only for the captured value.)"""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from triton.runtime.autotuner import Autotuner, Heuristics

    for n in gm.graph.nodes:
        if not is_triton_node(n):
            continue
        k = kernel_side_table.get_kernel(n.kwargs["kernel_idx"])
        if select_info(k) is not None:
            continue  # its config is chosen per call (ir.LaunchSelect)
        keys: set = set()
        heur = False
        while hasattr(k, "fn") and not hasattr(k, "device_caches"):
            if isinstance(k, Autotuner):
                keys.update(getattr(k, "keys", None) or getattr(k, "key", None) or ())
            elif isinstance(k, Heuristics):
                heur = True
            k = k.fn
        for name, v in dict(n.kwargs.get("kwargs", {})).items():
            if isinstance(v, torch.fx.Node):
                ex = v.meta.get("example_value", v.meta.get("val"))
                if not isinstance(ex, torch.Tensor) and (heur or name in keys):
                    return True
    return False


def is_triton_node(n) -> bool:
    return n.op == "call_function" and "triton_kernel_wrapper" in str(n.target)


class RecordingInterpreter(torch.fx.Interpreter):
    """Runs the captured graph and records each Triton launch's real values."""

    def __init__(self, gm, out: list[LaunchRecord]):
        super().__init__(gm)
        self.out = out

    def call_function(self, target, args, kwargs):
        if "triton_kernel_wrapper" in str(target):
            from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

            rec = LaunchRecord(
                kernel_idx=kwargs["kernel_idx"], constant_args_idx=kwargs["constant_args_idx"],
                grid=list(kwargs["grid"]), kwargs=dict(kwargs["kwargs"]))
            self.out.append(rec)
            kernel = kernel_side_table.get_kernel(rec.kernel_idx)
            info = select_info(kernel)
            if info is not None:
                # Launch through the user's own autotuner (its cache and its
                # choice for this key, as eager), not Dynamo's key-less copy.
                dynamo_tuner, user_tuner, _jit = info
                consts = dict(kernel_side_table.get_constant_args(rec.constant_args_idx))
                grids = [tuple(g) + (1,) * (3 - len(g)) for g in rec.grid] or [(1, 1, 1)]
                configs = dynamo_tuner.configs

                def grid_fn(meta):
                    for i, c in enumerate(configs):
                        if all(meta.get(k, _MISSING) == v for k, v in c.kwargs.items()):
                            return grids[i if len(grids) > 1 else 0]
                    raise RuntimeError("trident: no captured grid for this autotune config")

                user_tuner[grid_fn](**consts, **rec.kwargs)
                rec.best_config = user_tuner.best_config
                return None
            out = super().call_function(target, args, kwargs)
            if hasattr(kernel, "best_config"):
                rec.best_config = kernel.best_config
            return out
        return super().call_function(target, args, kwargs)


_MISSING = object()
