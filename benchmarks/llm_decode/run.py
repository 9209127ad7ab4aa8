"""One request: greedy decoding with its timing (TTFT, ITL, TPOT), which prompts the measured
requests and the warm-up's settle requests take, and the two extra requests after the measured
ones (the host-time breakdown per operator, --torch-profile)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from llm_prompts import PROMPT_SETS

from .modes import Registry


@dataclass
class Request:
    prompt_set: str
    prompt: int
    n_prompt: int
    tokens: list
    ttft: float  # seconds
    itl: list  # seconds, one per token after the first
    total: float
    misses: int = 0  # trident: misses (captures) of its wrappers during this request

    @property
    def tpot(self) -> float:
        n = len(self.tokens)
        return (self.total - self.ttft) / (n - 1) if n > 1 else float("nan")


def decode(model, ids, n_new: int, device: str, sync) -> tuple:
    """Greedy decoding with a KV cache: returns (tokens, ttft, itl, total)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids], device=device)
    toks, itl = [], []
    perf = time.perf_counter
    with torch.no_grad():
        sync()
        t0 = perf()
        out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
        sync()
        prev = perf()
        ttft = prev - t0
        toks.append(tok)
        for _ in range(n_new - 1):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
            sync()
            t = perf()
            itl.append(t - prev)
            prev = t
            toks.append(tok)
    return torch.cat(toks, 1)[0].tolist(), ttft, itl, prev - t0


def settle_count(a) -> int:
    """How many of the warm-up requests replay the first measured prompts in the measured
    configuration: one per prompt set, when the warm-up has at least two requests per set (the
    others feed the filter)."""
    return len(a.prompts) if a.warmup >= 2 * len(a.prompts) else 0


def measured_order(a) -> list:
    """(prompt set, prompt index) of every measured request: round r holds request r of every
    prompt set, so that a slow stretch of the machine (it drifts over a run) falls on every
    set alike rather than on the last one."""
    return [(s, r % len(PROMPT_SETS[s])) for r in range(a.requests) for s in a.prompts]


def breakdown(reg: Registry, kernels: dict, one_request, n_tokens: int):
    """One more request with each registered kernel timed on the host: per op, calls per token,
    median us per call and ms per token. Runs after the measured requests (the timer adds a
    Python frame per call, which the measured requests do not pay)."""
    perf = time.perf_counter
    times = {op: [] for op in kernels}

    def timed(fn, ts):
        def kernel(*args, **kwargs):
            t0 = perf()
            out = fn(*args, **kwargs)
            ts.append(perf() - t0)
            return out

        return kernel

    for op, fn in kernels.items():
        reg.set(op, timed(fn, times[op]))
    try:
        req = one_request()
    finally:
        for op, fn in kernels.items():
            reg.set(op, fn)
    out = {}
    for op, ts in times.items():
        if ts:
            out[op] = (len(ts) / n_tokens, statistics.median(ts) * 1e6, sum(ts) / n_tokens * 1e3)
    return req.tpot * 1e3, out


# the host calls that say what a decode step costs besides ATen's operators: kernel launches
# (runtime and driver API: Triton's and Trident's launches are cuLaunchKernel) and the calls
# that wait for the GPU
PROFILE_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
                 "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                 "cudaEventSynchronize", "cudaMalloc", "cudaFree")


def torch_profile(one_request, n_tokens: int, title: str, rows: int = 45) -> str:
    """One more request under torch.profiler (CPU, and CUDA when there is one): the operators
    and runtime calls by host self time, with calls per generated token, then the launch and
    synchronisation calls.  What a native version's program calls goes through the dispatcher,
    whose RecordFunction hook the profiler sees, so Trident's ATen calls are in the table too."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        req = one_request()
    evs = prof.key_averages()
    total_self = sum(e.self_cpu_time_total for e in evs)
    top = sorted(evs, key=lambda e: -e.self_cpu_time_total)[:rows]
    lines = [f"## {title}: one request under torch.profiler ({n_tokens} new tokens, TPOT "
             f"{req.tpot * 1e3:.3f} ms with the profiler on)", "",
             f"host self time of all events: {total_self / 1e3:.1f} ms "
             f"({total_self / n_tokens / 1e3:.3f} ms per token)", "",
             "| event | calls/token | self host us/token | self host us/call |",
             "|---|---:|---:|---:|"]
    for e in top:
        lines.append(f"| {e.key[:70]} | {e.count / n_tokens:.1f} | "
                     f"{e.self_cpu_time_total / n_tokens:.1f} | "
                     f"{e.self_cpu_time_total / max(e.count, 1):.2f} |")
    byname = {e.key: e for e in evs}
    lines += ["", "| launch / sync call | calls/token | host us/call |", "|---|---:|---:|"]
    for k in PROFILE_CALLS:
        if k in byname:
            e = byname[k]
            lines.append(f"| {k} | {e.count / n_tokens:.1f} | "
                         f"{e.cpu_time_total / max(e.count, 1):.2f} |")
    if torch.cuda.is_available():
        gpu = sum(getattr(e, "self_device_time_total", 0) or 0 for e in evs)
        lines += ["", f"GPU kernel time: {gpu / n_tokens / 1e3:.3f} ms per token "
                  "(self device time of all events)"]
    return "\n".join(lines) + "\n"
