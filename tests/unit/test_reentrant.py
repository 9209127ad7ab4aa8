"""An SCM's program can re-enter Trident: an ATen op in a compiled region whose kernel is a
Python function registered with torch.library, itself a trident.jit function (how a Triton
operator library plugs into a model, compiled once per operator and once per region).  The
inner call must leave the outer call's boxed stack alone; outputs equal eager's."""

from __future__ import annotations

import torch

import trident


def _bmm_out(a, b):
    out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
    return torch.ops.aten.bmm.out(a, b, out=out)


def _attn(q, k, v):
    s = torch.matmul(q, k.transpose(1, 2)) * 0.5
    p = s.softmax(-1)
    return torch.matmul(p, v), p


def test_region_calls_registered_trident_kernel():
    inner = trident.jit(_bmm_out, max_versions=16)
    calls = []

    def kernel(a, b):
        calls.append(a.shape)
        return inner(a, b)

    outer = trident.jit(_attn, max_versions=16)
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("bmm", kernel, "CPU")
        for n in (5, 6, 7, 8, 9, 12):  # static, then dynamic: the later calls are native hits
            q, k, v = torch.randn(4, 1, 8), torch.randn(4, n, 8), torch.randn(4, n, 8)
            got = outer(q, k, v)
            ref = _attn(q, k, v)  # the same registered kernel, eagerly
            for g, r in zip(got, ref):
                assert torch.equal(g, r)
    finally:
        lib._destroy()
    assert len(calls) >= 2 * 6 * 2  # both bmm of every call, in both runs, reached the kernel
    assert sum(trident.stats(outer)["hits"]) > 0
    assert sum(trident.stats(inner)["hits"]) > 0


def test_custom_op_kernel_reenters_and_raises_like_eager():
    inner = trident.jit(_bmm_out, max_versions=16)
    lib = torch.library.Library("trident_reenter", "DEF")
    try:
        lib.define("mybmm(Tensor a, Tensor b) -> Tensor")
        lib.impl("mybmm", lambda a, b: inner(a, b), "CPU")
        # shapes for Dynamo's fake tensors (without it the capture falls back)
        lib.impl("mybmm", lambda a, b: a.new_empty((a.shape[0], a.shape[1], b.shape[2])),
                 "Meta")

        def f(q, k):
            return torch.ops.trident_reenter.mybmm(q, k).relu() + 1

        tf = trident.jit(f, max_versions=16)
        for n in (3, 4, 5, 6):
            q, k = torch.randn(2, 3, 4), torch.randn(2, 4, n)
            assert torch.equal(tf(q, k), f(q, k))
        # an error raised inside the nested call surfaces as eager's, and the next call works
        bad = torch.randn(2, 5, n)
        try:
            f(q, bad)
        except RuntimeError as e:
            eager_msg = str(e).splitlines()[0]
        else:  # pragma: no cover
            raise AssertionError("eager accepted mismatched shapes")
        try:
            tf(q, bad)
        except RuntimeError as e:
            assert str(e).splitlines()[0] == eager_msg
        else:
            raise AssertionError("Trident accepted mismatched shapes")
        q, k = torch.randn(2, 3, 4), torch.randn(2, 4, 7)
        assert torch.equal(tf(q, k), f(q, k))
        st = trident.stats(tf)
        assert st["fallbacks"] == 0 and sum(st["hits"]) > 0  # native, not eager
        assert sum(trident.stats(inner)["hits"]) > 0
    finally:
        lib._destroy()
