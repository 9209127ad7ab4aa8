"""The operator providers (FlagGems' wrappers, or CPU stand-ins) and the models
(transformers' Qwen3 and DeepSeek-V2, built from their config classes with random weights)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .common import OPS, say

MODELS = ("qwen3", "deepseek_v2")
PUBLISHED_LAYERS = {"qwen3": 36, "deepseek_v2": 27}


# ---------------------------------------------------------------- operator providers


@dataclass(frozen=True)
class Provider:
    name: str
    device: str
    dispatch_key: str
    ops: dict  # ATen op name -> plain Python wrapper (what each mode wraps)


def flaggems_provider(mm: str = "hopper") -> Provider:
    """FlagGems' own wrappers: the functions `flag_gems.only_enable` would register.

    `mm="generic"` takes `flag_gems.ops.mm.mm` for aten::mm instead of the registered one (on
    Hopper GPUs FlagGems' `runtime.replace_customized_ops` puts `hopper.ops.mm.mm` there)."""
    import importlib

    import flag_gems

    table = {}
    for item in getattr(flag_gems, "_FULL_CONFIG", ()):
        if item and item[0] in OPS and (len(item) < 3 or item[2]()):
            table[item[0]] = item[1]
    if mm == "generic":
        table.pop("mm", None)
    ops = {}
    for op in OPS:
        # `flag_gems.ops.mm` is the function (ops/__init__ rebinds it); the module is in sys.modules.
        ops[op] = table.get(op) or getattr(importlib.import_module(f"flag_gems.ops.{op}"), op)
    return Provider("flaggems", "cuda", "CUDA", ops)


# The stub provider: what a Triton operator's Python wrapper does on the host (check arguments,
# pick block sizes, compute a grid, allocate the output, launch), with an ATen out= operator as
# the "kernel". The out= overloads are separate operators from the functional ones registered
# here, so a stub never reaches itself.

BLOCK_M, BLOCK_N = 32, 64
_DTYPE_ORDER = (torch.float16, torch.bfloat16, torch.float32)


def _cdiv(a, b):
    return (a + b - 1) // b


def _launch(kernel, grid, *args, **kwargs):
    """The stand-in launch: a real launcher would bind the arguments and call the driver with
    `grid`; here the "kernel" is an ATen out= operator writing into the allocated output."""
    return kernel(*args, **kwargs)


def _higher_dtype(a, b):
    if a is b:
        return a
    assert a in _DTYPE_ORDER and b in _DTYPE_ORDER, "unsupported dtype"
    for d in _DTYPE_ORDER:
        if a is d:
            return b
        if b is d:
            return a


def stub_mm(a, b):
    assert a.dim() == 2 and b.dim() == 2, "mm expects matrices"
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    if a.stride(0) > 1 and a.stride(1) > 1:
        a = a.contiguous()
    if b.stride(0) > 1 and b.stride(1) > 1:
        b = b.contiguous()
    M = a.shape[0]
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=_higher_dtype(a.dtype, b.dtype))
    grid = (_cdiv(M, BLOCK_M) * _cdiv(N, BLOCK_N), 1, 1)
    _launch(torch.mm, grid, a, b, out=c)
    return c


def stub_addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    assert mat1.shape[1] == mat2.shape[0], "incompatible dimensions"
    M = mat1.shape[0]
    N = mat2.shape[1]
    mat1 = mat1.contiguous()
    out = torch.empty((M, N), device=mat1.device, dtype=mat1.dtype)
    bias = bias.broadcast_to(out.shape)
    grid = (_cdiv(M, BLOCK_M), _cdiv(N, BLOCK_N), 1)
    _launch(torch.addmm, grid, bias, mat1, mat2, beta=beta, alpha=alpha, out=out)
    return out


def stub_bmm(A, B):
    assert A.shape[0] == B.shape[0], "batch dim mismatch"
    assert A.shape[2] == B.shape[1], "K dim mismatch"
    batch, M = A.shape[0], A.shape[1]
    N = B.shape[2]
    out = torch.empty((batch, M, N), dtype=A.dtype, device=A.device)
    grid = (_cdiv(M, BLOCK_M), _cdiv(N, BLOCK_N), batch)
    _launch(torch.bmm, grid, A, B, out=out)
    return out


def stub_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    assert not sparse, "sparse embedding is not supported"
    M = indices.numel()
    N = weight.shape[-1]
    indices = indices.contiguous()
    weight = weight.contiguous()
    out = torch.empty((M, N), device=weight.device, dtype=weight.dtype)
    _launch(torch.index_select, (M, 1, 1), weight, 0, indices.reshape(-1), out=out)
    return out.view(*indices.shape, N)


def stub_provider() -> Provider:
    return Provider(
        "stub",
        "cpu",
        "CPU",
        {"mm": stub_mm, "addmm": stub_addmm, "bmm": stub_bmm, "embedding": stub_embedding},
    )


# ---------------------------------------------------------------- models


def model_config(name: str, tiny: bool, layers: int, attn: str, experts: str):
    if name == "qwen3":
        from transformers import Qwen3Config

        dims = {
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
        }
        if tiny:
            dims = {
                "vocab_size": 1024,
                "hidden_size": 64,
                "intermediate_size": 192,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
            }
        return Qwen3Config(
            **dims,
            num_hidden_layers=layers,
            hidden_act="silu",
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            max_window_layers=36,
            bos_token_id=151643 if not tiny else 1,
            eos_token_id=151645 if not tiny else 2,
            attn_implementation=attn,
        )
    if name == "deepseek_v2":
        from transformers import DeepseekV2Config

        dims = {
            "vocab_size": 102400,
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "moe_intermediate_size": 1408,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_experts_per_tok": 6,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        }
        if tiny:
            dims = {
                "vocab_size": 1024,
                "hidden_size": 64,
                "intermediate_size": 192,
                "moe_intermediate_size": 32,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "n_routed_experts": 8,
                "n_shared_experts": 2,
                "num_experts_per_tok": 2,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8,
                "v_head_dim": 16,
            }
        return DeepseekV2Config(
            **dims,
            num_hidden_layers=layers,
            q_lora_rank=None,
            first_k_dense_replace=1,
            topk_method="greedy",
            n_group=1,
            topk_group=1,
            routed_scaling_factor=1.0,
            norm_topk_prob=False,
            hidden_act="silu",
            max_position_embeddings=163840,
            rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
            },
            tie_word_embeddings=False,
            attention_bias=False,
            bos_token_id=100000 if not tiny else 1,
            eos_token_id=100001 if not tiny else 2,
            attn_implementation=attn,
            experts_implementation=experts,
        )
    raise ValueError(name)


def build_model(name: str, a, device: str):
    from transformers import AutoModelForCausalLM

    cfg = model_config(name, a.tiny, a.layers, a.attn, a.experts)
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval().requires_grad_(False)  # inference: no parameter asks for autograd
    n = sum(p.numel() for p in model.parameters())
    say(
        f"built {name}: {type(model).__name__}, {cfg.num_hidden_layers} layer(s) "
        f"(published {PUBLISHED_LAYERS[name]}), {n / 1e6:.1f} M parameters, "
        f"attention={model.config._attn_implementation}, "
        f"experts={getattr(model.config, '_experts_implementation', None)}, "
        f"{time.perf_counter() - t:.1f}s"
    )
    return model
