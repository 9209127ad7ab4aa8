"""GPU: @triton.autotune launches whose key changes within a version (skipped
without CUDA).  The SCM keeps one version over the sizes and selects the
variant per call natively (ir.LaunchSelect); a key it has not seen runs the
user's own autotuner, as eager does.  Compared with eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

DEV = "cuda"


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 1024}, num_warps=8)], key=["n"])
@triton.jit
def _tuned(X, Y, n, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(Y + i, tl.load(X + i, mask=m) * s, mask=m)


def _scale(x):
    y = torch.empty_like(x)
    n = x.numel()
    _tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 7.0)
    return y


def test_one_version_over_sizes_key_table_native():
    f = trident.jit(_scale, strict=True)
    sizes = (256, 257, 4096, 257, 256, 10_000, 3001, 4096, 3001)
    for n in sizes:
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), x * 7.0)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] <= 2, st
    lv = st["launch_variants"]
    assert lv and sum(v["variants"] for v in lv) >= 3
    # the user's autotuner saw every key eager would have shown it
    assert {k[0] for k in _tuned.cache} >= set(sizes) - {256}
    # repeated sizes hit the native table: fewer resolver calls than calls
    assert sum(v["table_misses"] for v in lv) < len(sizes)
    assert "select key(" in trident.explain(f)


def test_misaligned_view_gets_its_own_variant():
    f = trident.jit(_scale, strict=True)
    base = torch.randn(5000, device=DEV)
    for x in (base[:4000], base[1:4001], base[:3000], base[3:3003], base[1:4001]):
        torch.testing.assert_close(f(x), x * 7.0)
    assert trident.stats(f)["fallbacks"] == 0


# FlagGems' shape: autotune over heuristics that read the sizes
# (DIVISIBLE_N = N % TILE_N == 0), key over the sizes.
@triton.autotune(configs=[triton.Config({"TILE_N": 32}, num_warps=2),
                          triton.Config({"TILE_N": 64}, num_warps=4),
                          triton.Config({"TILE_N": 128}, num_warps=4)], key=["N"])
@triton.heuristics({"DIVISIBLE_N": lambda args: args["N"] % args["TILE_N"] == 0})
@triton.jit
def _row_scale(X, Y, N, stride, s, TILE_N: tl.constexpr, DIVISIBLE_N: tl.constexpr):
    row = tl.program_id(1)
    i = tl.program_id(0) * TILE_N + tl.arange(0, TILE_N)
    if DIVISIBLE_N:
        v = tl.load(X + row * stride + i)
        tl.store(Y + row * stride + i, v * s + 1.0)
    else:
        m = i < N
        v = tl.load(X + row * stride + i, mask=m)
        tl.store(Y + row * stride + i, v * s + 1.0, mask=m)


def _rows(x):
    y = torch.empty_like(x)
    rows, n = x.shape
    _row_scale[lambda meta: (triton.cdiv(n, meta["TILE_N"]), rows)](x, y, n, x.stride(0), 2.0)
    return y


def test_autotune_over_heuristics_over_a_growing_length():
    # like decode: one dimension grows by one each call
    f = trident.jit(_rows, strict=True)
    for n in list(range(100, 140)) + [128, 256, 64, 100]:
        x = torch.randn(4, n, device=DEV, dtype=torch.float16)
        torch.testing.assert_close(f(x), _rows(x))
        torch.testing.assert_close(f(x), x * 2.0 + 1.0)
    st = trident.stats(f)
    assert st["fallbacks"] == 0, st
    # the heuristics split the lengths by divisibility (shape guards), not one version each
    assert st["versions"] <= 6, trident.explain(f)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"],
                 restore_value=["Y"])
@triton.jit
def _acc(X, Y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(Y + i, tl.load(Y + i, mask=m) + tl.load(X + i, mask=m), mask=m)


def _accumulate(x, y):
    n = x.numel()
    _acc[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y


def test_in_place_kernel_runs_once_per_call_on_new_and_known_keys():
    f = trident.jit(_accumulate, strict=True)
    for n in (300, 301, 302, 301, 5000, 302):
        x = torch.randn(n, device=DEV)
        y = torch.randn(n, device=DEV)
        want = y + x
        got = f(x, y)
        assert got is y
        torch.testing.assert_close(y, want)
    assert trident.stats(f)["fallbacks"] == 0



# An int the autotuner's key does not name only reaches Triton's specialisation:
# the native key keeps its class (== 1, multiple of 16, width), not its value.
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"])
@triton.jit
def _plus_rows(X, Y, rows, n, BLOCK: tl.constexpr):
    r = tl.program_id(1)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(Y + r * n + i, tl.load(X + r * n + i, mask=m) * 2.0 + rows, mask=m)


def _add_rows(x):
    y = torch.empty_like(x)
    rows, n = x.shape
    _plus_rows[lambda meta: (triton.cdiv(n, meta["BLOCK"]), rows)](x, y, rows, n)
    return y


def test_a_size_outside_the_tuner_key_is_keyed_by_its_class():
    f = trident.jit(_add_rows, strict=True)
    rows_seen = (3, 5, 7, 9, 3, 32, 48, 17, 1, 1, 33)
    for rows in rows_seen:
        x = torch.randn(rows, 256, device=DEV)
        torch.testing.assert_close(f(x), x * 2.0 + rows)
    st = trident.stats(f)
    # 3 (static), then one dynamic version; 1 is a version of its own (Dynamo's 0/1
    # specialisation)
    assert st["fallbacks"] == 0 and st["versions"] <= 3, trident.explain(f)
    lv = st["launch_variants"]
    assert lv, trident.explain(f)
    # odd sizes share one class, 32/48 another: a handful of resolver calls (a new class,
    # or a known key asked again after an SCM rebuild), not one per new size (7 of them
    # after the dynamic version's capture)
    assert sum(v["table_misses"] for v in lv) <= 4, trident.explain(f)
    assert sum(v["kernels"] for v in lv) <= sum(v["variants"] for v in lv)
    assert "rows:int/class=" in trident.explain(f)


def test_flaggems_bmm_over_a_growing_length_stays_native():
    """FlagGems' bmm keys its autotuner on log2 buckets of M, N, K: a decode
    step's longer KV length inside a known bucket and class never calls back
    into Python."""
    flag_gems = pytest.importorskip("flag_gems")
    from flag_gems.ops.bmm import bmm as fg_bmm

    f = trident.jit(fg_bmm, strict=True)
    for s in range(100, 128):  # the attention-output bmm of decode: K = the KV length
        a = torch.randn(8, 1, s, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(8, s, 128, device=DEV, dtype=torch.bfloat16)
        torch.testing.assert_close(f(a, b), torch.bmm(a, b), atol=2e-2, rtol=2e-2)
    st = trident.stats(f)
    assert st["fallbacks"] == 0, trident.explain(f)
    lv = st["launch_variants"]
    # 28 lengths in one log2 bucket (128): their classes are "multiple of 16" or not
    assert lv and sum(v["table_misses"] for v in lv) <= 8, trident.explain(f)
    assert "/log2=" in trident.explain(f)
