"""Liger-Kernel's forward functions, unmodified, under trident.jit (issue 32's bar).

Each must run natively (no eager path, no fallback warning) and return eager's results on
fresh random inputs, for two shapes.  Skipped without CUDA or without liger_kernel (the device
run installs Liger-Kernel 0.8.5 from a carried wheel).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
pytest.importorskip("triton")
pytest.importorskip("liger_kernel")

from liger_kernel.ops import geglu, layer_norm, rms_norm, rope, softmax, swiglu  # noqa: E402

DEV = "cuda"
BF16 = torch.bfloat16


def _swiglu(shape):
    return (torch.randn(shape, device=DEV, dtype=BF16), torch.randn(shape, device=DEV, dtype=BF16))


def _rms(shape):
    return (torch.randn(shape, device=DEV, dtype=BF16),
            torch.randn(shape[-1], device=DEV, dtype=BF16), 1e-6, 0.0, "llama", None)


def _ln(shape):
    return (torch.randn(shape, device=DEV, dtype=BF16),
            torch.randn(shape[-1], device=DEV, dtype=BF16),
            torch.randn(shape[-1], device=DEV, dtype=BF16), 1e-5)


def _rope(shape):
    b, s, h, d = shape
    q = torch.randn(b, h, s, d, device=DEV, dtype=BF16)
    k = torch.randn(b, h // 2, s, d, device=DEV, dtype=BF16)
    cos = torch.randn(1, s, d, device=DEV, dtype=BF16)
    sin = torch.randn(1, s, d, device=DEV, dtype=BF16)
    return q, k, cos, sin


def _softmax(shape):
    return (torch.randn(shape, device=DEV, dtype=BF16),)


CASES = {
    "swiglu_forward": (swiglu.swiglu_forward, _swiglu, [(4, 256), (2, 3, 1024)]),
    "geglu_forward": (geglu.geglu_forward, _swiglu, [(4, 256), (2, 3, 1024)]),
    "rms_norm_forward": (rms_norm.rms_norm_forward, _rms, [(4, 256), (2, 3, 1024)]),
    "layer_norm_forward": (layer_norm.layer_norm_forward, _ln, [(4, 256), (2, 3, 1024)]),
    "rope_forward": (rope.rope_forward, _rope, [(1, 8, 4, 64), (2, 16, 8, 128)]),
    "softmax_forward": (softmax._softmax_forward, _softmax, [(4, 256), (2, 3, 5000)]),
}


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.shape == want.shape and got.dtype == want.dtype and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)  # the same kernels: bitwise
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want, (got, want)


@pytest.mark.parametrize("name", list(CASES))
def test_liger_forward_is_native_and_equal_to_eager(name):
    fn, make, shapes = CASES[name]
    f = trident.jit(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shape in shapes:
            for _ in range(3):  # capture, then hits on fresh inputs
                args = make(shape)
                _same(f(*_clone(args)), fn(*_clone(args)))
    eager_warnings = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    st = trident.stats(f)
    assert not eager_warnings, (eager_warnings, trident.explain(f)[:4000])
    assert not st["eager_paths"] and st["fallback_reason"] is None, st
    assert sum(st["hits"]) >= 2 * len(shapes) - 1, st
