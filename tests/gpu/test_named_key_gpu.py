"""A trident.jit wrapper registered as aten::mm's CUDA kernel and reached both from eager
`F.linear` (torch <= 2.12 runs its mm under at::NoNamesGuard on CUDA) and from another
trident.jit function's native program (which calls aten::mm directly) serves both from the
same version: the Named key is not part of the global-state guard."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import trident

try:
    torch.zeros(1, names=("n",))
    _HAS_NAMES = True
except (TypeError, RuntimeError):
    _HAS_NAMES = False


@pytest.mark.skipif(not _HAS_NAMES, reason="this torch has no named tensors (nor NoNamesGuard)")
def test_linear_and_native_mm_share_the_wrapper_version():
    def inner(a, b):
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        return torch.ops.aten.mm.out(a, b, out=out)

    w_inner = trident.jit(inner)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("mm", lambda a, b: w_inner(a, b), "CUDA")
    try:
        outer = trident.jit(lambda x, w: F.linear(x, w))
        for _ in range(4):
            x = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                ref = torch.ops.aten.mm.out(
                    x.view(1, 256), w.t(),
                    out=torch.empty(1, 256, device="cuda", dtype=torch.bfloat16)).view(1, 1, 256)
                eager = F.linear(x, w)
                got = outer(x, w)
            assert torch.equal(eager, ref)
            assert torch.equal(got, ref)
        st = trident.stats(w_inner)
        assert st["versions"] == 1, trident.explain(w_inner)
        assert trident.stats(outer)["versions"] == 1, trident.explain(outer)
    finally:
        lib._destroy()
