"""GPU slice of the differential fuzz (tests/fuzz/test_fuzz.py): host code launching a Triton
elementwise kernel, called through trident.jit and eagerly on the same inputs, where the
inputs are misaligned views (x[k:] of a flat tensor), have sizes not divisible by 16, or
size 1.  Each jitted function sees a sequence of such inputs (new versions for new
alignments/divisibilities, hits for repeats) and every call must equal eager: values,
dtype, shape, the inputs after the call, and `out is x` for the in-place kernel.

Skipped without CUDA or Triton (tests/gpu/conftest.py)."""

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


@triton.jit
def _axpy_kernel(X, Y, Z, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    y = tl.load(Y + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(Z + offs, (x * a + y).to(Z.dtype.element_ty), mask=m)


@triton.jit
def _scale_inplace_kernel(X, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(X + offs, (x * a).to(X.dtype.element_ty), mask=m)


def axpy(x, y, a: float = 2.0):
    """z = a * x + y for flat contiguous x, y (views with any storage offset)."""
    z = torch.empty_like(x)
    n = x.numel()
    _axpy_kernel[(triton.cdiv(n, 128),)](x, y, z, n, a, BLOCK=128)
    return z


def axpy_then_aten(x, y):
    z = axpy(x, y, 0.5)
    return z.sum(), z[1:], x.numel()


def scale_(x):
    n = x.numel()
    _scale_inplace_kernel[(triton.cdiv(n, 64),)](x, n, 3.0, BLOCK=64)
    return x


def _tol(dtype):
    return {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]


def _flat_view(n, off, dtype, seed):
    """A flat tensor of n elements starting `off` elements into its storage."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    base = torch.randn(n + off, device=DEV, generator=g).to(dtype)
    return base[off:]


# (n, offset of x, offset of y): sizes 1, < 16, not divisible by 16, divisible by 16;
# offsets 0 (aligned) and 1, 3 (misaligned); repeats give hits.
CALLS = [(64, 0, 0), (64, 0, 0), (64, 1, 0), (64, 1, 0), (17, 0, 1), (1, 0, 0), (1, 1, 1),
         (15, 3, 3), (4097, 1, 0), (4096, 0, 0), (64, 0, 0), (17, 0, 1), (1, 1, 1)]


def _check_same(got, want, dtype, path="out"):
    assert type(got) is type(want), path
    if isinstance(want, torch.Tensor):
        assert got.shape == want.shape and got.dtype == want.dtype, path
        assert got.device == want.device, path
        torch.testing.assert_close(got, want, rtol=_tol(dtype), atol=_tol(dtype), msg=path)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _check_same(g, w, dtype, f"{path}[{i}]")
    else:
        assert got == want, path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("host", [axpy, axpy_then_aten])
def test_elementwise_kernel_on_misaligned_views(host, dtype):
    f = trident.jit(host)
    for i, (n, ox, oy) in enumerate(CALLS):
        xj, yj = _flat_view(n, ox, dtype, i), _flat_view(n, oy, dtype, 1000 + i)
        xe, ye = _flat_view(n, ox, dtype, i), _flat_view(n, oy, dtype, 1000 + i)
        got, want = f(xj, yj), host(xe, ye)
        _check_same(got, want, dtype)
        assert torch.equal(xj, xe) and torch.equal(yj, ye)  # inputs untouched
        z = got if isinstance(got, torch.Tensor) else got[1]  # a fresh result, no alias
        zs = z.untyped_storage().data_ptr()
        assert zs not in (xj.untyped_storage().data_ptr(), yj.untyped_storage().data_ptr())
    # reference independent of Triton, on the last inputs
    ref = (xe.float() * 2.0 + ye.float()).to(dtype) if host is axpy else None
    if ref is not None:
        torch.testing.assert_close(want, ref, rtol=_tol(dtype), atol=_tol(dtype))
    assert sum(trident.stats(f)["hits"]) >= 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_kernel_on_misaligned_views(dtype):
    f = trident.jit(scale_)
    for i, (n, ox, _) in enumerate(CALLS):
        xj, xe = _flat_view(n, ox, dtype, i), _flat_view(n, ox, dtype, i)
        before = xj.clone()
        out_j, out_e = f(xj), scale_(xe)
        assert out_j is xj and out_e is xe
        torch.testing.assert_close(xj, xe, rtol=_tol(dtype), atol=_tol(dtype))
        torch.testing.assert_close(xj, (before.float() * 3.0).to(dtype), rtol=_tol(dtype),
                                   atol=_tol(dtype))
    assert sum(trident.stats(f)["hits"]) >= 3
