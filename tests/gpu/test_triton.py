"""GPU end-to-end: Triton launches from the SCM against eager (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from trident.examples.triton_kernels import rms_norm, rms_norm_ref, silu  # noqa: E402

DEV = "cuda"


def _tol(dtype):
    return {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1024, 128), (7, 33), (1, 1), (3, 5000)])
def test_rms_norm_matches_eager(dtype, shape):
    f = trident.jit(rms_norm, strict=True)
    for _ in range(3):  # capture, then hits with fresh data
        x = torch.randn(shape, device=DEV, dtype=dtype)
        w = torch.randn(shape[1], device=DEV, dtype=dtype)
        got = f(x, w)
        want = rms_norm(x, w)
        torch.testing.assert_close(got, want, rtol=_tol(dtype), atol=_tol(dtype))
        torch.testing.assert_close(got.float(), rms_norm_ref(x, w).float(), rtol=5e-2, atol=5e-2)
    assert trident.stats(f)["hits"] and sum(trident.stats(f)["hits"]) >= 1


def test_misaligned_view_is_a_new_version_not_a_wrong_launch():
    f = trident.jit(rms_norm, strict=True)
    base = torch.randn(65, 128, device=DEV)
    w = torch.randn(128, device=DEV)
    torch.testing.assert_close(f(base[:64], w), rms_norm(base[:64], w))
    # x[1:] starts 512 bytes in: still aligned. A 1-element offset of a flat view is not.
    flat = torch.randn(64 * 128 + 1, device=DEV)
    xv = flat[1:].view(64, 128)
    torch.testing.assert_close(f(xv, w), rms_norm(xv, w))
    torch.testing.assert_close(f(xv, w), rms_norm(xv, w))
    torch.testing.assert_close(f(base[:64], w), rms_norm(base[:64], w))


@pytest.mark.parametrize("n", [1, 17, 4096, 100_003])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_silu(n, dtype):
    f = trident.jit(silu, strict=True)
    for _ in range(3):
        x = torch.randn(n, device=DEV, dtype=dtype)
        torch.testing.assert_close(f(x), silu(x), rtol=_tol(dtype), atol=_tol(dtype))


@triton.jit
def _add_kernel(X, Y, Z, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Z + offs, tl.load(X + offs, mask=m) + tl.load(Y + offs, mask=m), mask=m)


def _two_kernels_and_aten(x, y):
    z = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 256),)](x, y, z, n, BLOCK=256)
    z = z * 2 + 1
    out = silu(z)
    return out, z.sum()


def test_several_kernels_and_aten_ops():
    f = trident.jit(_two_kernels_and_aten, strict=True)
    for n in (1000, 1000, 4096):
        x = torch.randn(n, device=DEV)
        y = torch.randn(n, device=DEV)
        a, b = f(x, y)
        ea, eb = _two_kernels_and_aten(x, y)
        torch.testing.assert_close(a, ea)
        torch.testing.assert_close(b, eb)


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 512}, num_warps=8)], key=["n"])
@triton.jit
def _scale_autotuned(X, Y, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * s, mask=m)


def _autotuned(x):
    y = torch.empty_like(x)
    n = x.numel()
    _scale_autotuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 3.0)
    return y


def test_autotune():
    f = trident.jit(_autotuned, strict=True)
    for _ in range(3):
        x = torch.randn(3000, device=DEV)
        torch.testing.assert_close(f(x), x * 3.0)


@triton.jit
def _scale_kernel(X, Y, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * s, mask=m)


def _size_scaled(x):
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 256),)](x, y, n, 1.0 / n ** 0.5, BLOCK=256)
    return y


def test_float_of_a_dynamic_size_as_a_launch_argument():
    # `1.0 / n ** 0.5` computed natively as a double (ir.FloatDef) and passed as the
    # kernel's fp32 argument, as Triton's launcher converts eager's Python float
    f = trident.jit(_size_scaled, strict=True)
    for n in (1000, 1500, 2000, 1500, 3000):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), _size_scaled(x.clone()), rtol=0, atol=0)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and sum(st["hits"]) >= 1, st


def _temperature_scaled(x, t):
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 256),)](x, y, n, 1.0 / (t + 0.5), BLOCK=256)
    return y


def test_a_float_argument_that_reaches_a_launch_stays_specialised():
    # Not yet dynamic (capture/aten.py: float_uses): the capture that would make `t` dynamic
    # is retried with floats specialised; past TRIDENT_FLOAT_VALUES values, calls run eagerly.
    from trident.capture.dynamo import FLOATS_SPECIALISED

    f = trident.jit(_temperature_scaled)
    g = torch.Generator().manual_seed(5)
    values = [float(v) for v in torch.rand(6, generator=g) * 2]
    for t in values:
        x = torch.randn(2000, device=DEV)
        torch.testing.assert_close(f(x, t), _temperature_scaled(x.clone(), t), rtol=0, atol=0)
    st = trident.stats(f)
    assert st["captures"] == 4 and st["eager_float_values"] == {"L['t']": 2}, st
    notes = [n for v in trident.versions(f) for n in v.notes]
    assert any(n.startswith(FLOATS_SPECIALISED) for n in notes), notes


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _heur_kernel(X, Y, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(Y + offs, tl.load(X + offs) + 1)
    else:
        m = offs < n
        tl.store(Y + offs, tl.load(X + offs, mask=m) + 1, mask=m)


def _heur(x):
    y = torch.empty_like(x)
    n = x.numel()
    _heur_kernel[(triton.cdiv(n, 128),)](x, y, n, BLOCK=128)
    return y


def test_heuristics():
    f = trident.jit(_heur, dynamic=False, strict=True)
    for n in (256, 300, 256, 300):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), x + 1)


def test_cuda_graph_capture_replays():
    f = trident.jit(silu, strict=True)
    x = torch.randn(4096, device=DEV)
    f(x)
    f(x)  # warm: a hit
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            out = f(x)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        x.copy_(torch.randn(4096, device=DEV))
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, silu(x))


def test_shape_error_matches_eager():
    f = trident.jit(rms_norm)
    x = torch.randn(8, 16, device=DEV)
    w = torch.randn(16, device=DEV)
    f(x, w)
    with pytest.raises(Exception) as eager_exc:
        torch.randn(2, 3, device=DEV) @ torch.randn(4, 5, device=DEV)

    def mm(a, b):
        return a @ b

    g = trident.jit(mm)
    g(torch.randn(2, 3, device=DEV), torch.randn(3, 5, device=DEV))
    with pytest.raises(type(eager_exc.value)):
        g(torch.randn(2, 3, device=DEV), torch.randn(4, 5, device=DEV))


def test_background_build_serves_triton_launches_after_eager_calls():
    """TRIDENT_BACKGROUND_BUILD: the capturing call and the calls while the version compiles
    (eager, one on a side stream) match eager; then the version launches natively from the
    build thread's loaded SCM (the CUBIN is loaded in the calling thread)."""
    from trident import config

    def fn(x, w):
        return rms_norm(x, w) * 2

    with config.scope(TRIDENT_BACKGROUND_BUILD="1"):
        f = trident.jit(fn)
        w = torch.randn(256, device=DEV)
        for rows in (8, 8, 8):
            x = torch.randn(rows, 256, device=DEV)
            torch.testing.assert_close(f(x, w), fn(x, w))
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = torch.randn(8, 256, device=DEV)
            got = f(x, w)
            side.synchronize()
            torch.testing.assert_close(got, fn(x, w))
        assert trident.wait(f, timeout=120)
        for rows in (8, 8):
            x = torch.randn(rows, 256, device=DEV)
            torch.testing.assert_close(f(x, w), fn(x, w))
        st = trident.stats(f)
        assert st["versions"] == 1 and not st["building"]
        assert st["hits"][0] >= 2 and st["eager_while_building"] + st["hits"][0] == 5
