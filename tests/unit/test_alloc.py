"""Allocations on a hit (`empty_like`, `empty`) give exactly eager's tensors, also where the
runtime's direct-allocation path must step aside for the dispatcher: strides that empty_like
preserves, dispatch modes that must see the op, deterministic fill, inference mode."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import trident

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _layout(t):
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad, t.is_inference())


def _like(x):
    return torch.empty_like(x)


def _new(x):
    return torch.empty((x.shape[0], 3), dtype=torch.float16, device=x.device)


def _fill_like(x):
    y = torch.empty_like(x)
    y.copy_(x * 2)
    return y


def _inputs(device):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g).to(device)
    return [
        torch.randn(6, 5, generator=g).to(device),  # contiguous
        torch.randn(6, 1, generator=g).to(device).t(),  # (1, 6), strides (1, 1)
        base.t(),  # transposed: empty_like keeps the permutation
        base[:, 1:],  # not dense: empty_like makes it contiguous
        torch.randn(2, 3, 4, 5, generator=g).to(device).to(memory_format=torch.channels_last),
        torch.randn(0, 4, generator=g).to(device),
        torch.randint(0, 9, (4, 4), generator=g).to(device),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_like_layout_matches_eager(device):
    f = trident.jit(_like, dynamic=False)
    for x in _inputs(device):
        for _ in range(3):  # capture, then hits
            out, ref = f(x), _like(x)
            assert _layout(out) == _layout(ref)
            assert x.numel() == 0 or out.data_ptr() != x.data_ptr()


def _like_dtype(x):
    # FlagGems' pointwise wrappers: the output dtype passed explicitly
    return torch.empty_like(x, dtype=torch.float16, memory_format=torch.preserve_format)


def _like_bool_contig(x):
    return torch.empty_like(x, dtype=torch.bool, memory_format=torch.contiguous_format)


def _numel_fill(x):
    n = x.numel()
    y = torch.empty_like(x, dtype=torch.float64)
    y.fill_(n)
    return y, n


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [_like_dtype, _like_bool_contig])
def test_empty_like_with_options_matches_eager(device, fn):
    for dynamic in (False, None):
        f = trident.jit(fn, dynamic=dynamic)
        for x in _inputs(device):
            for _ in range(3):
                out, ref = f(x), fn(x)
                assert _layout(out) == _layout(ref)


@pytest.mark.parametrize("device", DEVICES)
def test_numel_on_dynamic_sizes_matches_eager(device):
    f = trident.jit(_numel_fill, dynamic=True)
    for shape in [(3, 4), (5, 7), (1, 9), (0, 3), (6, 6)]:
        x = torch.randn(*shape, device=device)
        for _ in range(2):
            (out, n), (ref, rn) = f(x), _numel_fill(x)
            assert n == rn
            assert _layout(out) == _layout(ref)
            torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_like_then_write_matches_eager(device):
    f = trident.jit(_fill_like)
    for x in _inputs(device):
        for _ in range(2):
            x = x.clone() if x.is_contiguous() else x
            out, ref = f(x), _fill_like(x)
            assert _layout(out) == _layout(ref)
            torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_matches_eager(device):
    f = trident.jit(_new)
    for n in (4, 7, 7, 1, 0):
        x = torch.randn(n, 2, device=device)
        assert _layout(f(x)) == _layout(_new(x))


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fn,op", [(_like, "empty_like"), (_new, "empty")])
def test_dispatch_mode_sees_the_allocation_and_compiled_code_survives(fn, op):
    f = trident.jit(fn)
    x = torch.randn(4, 3)
    f(x)
    f(x)  # warm: the next call would be a hit
    hits = sum(trident.stats(f)["hits"])
    with pytest.warns(RuntimeWarning, match="dispatch mode"), _Record() as rec:
        out = f(x)  # runs eagerly: the mode sees eager's operators
    assert op in rec.ops
    assert _layout(out) == _layout(fn(x))
    f(x)  # no mode: the version serves the call again
    s = trident.stats(f)
    assert s["fallback_reason"] is None and s["versions"] == 1
    assert sum(s["hits"]) == hits + 1


def test_deterministic_fill_like_eager():
    f = trident.jit(_like)
    x = torch.randn(8, 8)
    f(x)
    f(x)
    prev = torch.are_deterministic_algorithms_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        ref = _like(x)
        assert torch.isnan(ref).all()  # what eager gives here
        out = f(x)
        assert torch.isnan(out).all()
    finally:
        torch.use_deterministic_algorithms(prev)
        torch.utils.deterministic.fill_uninitialized_memory = prev_fill


def test_inference_mode_tensors_like_eager():
    f = trident.jit(_like)
    x = torch.randn(5, 2)
    for _ in range(3):
        with torch.inference_mode():
            out, ref = f(x), _like(x)
        assert _layout(out) == _layout(ref)
        assert out.is_inference()
    out, ref = f(x), _like(x)
    assert _layout(out) == _layout(ref) and not out.is_inference()


def test_requires_grad_input_gives_plain_output_like_eager():
    f = trident.jit(_like)
    x = torch.randn(3, 3, requires_grad=True)
    for _ in range(3):
        out, ref = f(x), _like(x)
        assert _layout(out) == _layout(ref)
        assert not out.requires_grad and out.grad_fn is None
