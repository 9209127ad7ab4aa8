"""In-place reuse of dead intermediates (ir/passes/buffer_reuse.py, INPLACE): an elementwise
add/sub/mul/relu/neg whose first argument is an intermediate nothing else reads runs in place
on it. Every case compares with eager on fresh random inputs (values, dtype, sizes and
strides), and checks from the version's program whether the reuse happened, including where it
must not."""

from __future__ import annotations

import pytest
import torch

import trident
from trident import config


def _program(f) -> str:
    return trident.explain(f).split("program", 1)[1]


def _same(out, ref):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype and o.shape == r.shape and o.stride() == r.stride()
        assert torch.equal(o, r)


def _check(fn, make, calls=3):
    f = trident.jit(fn)
    for _ in range(calls):
        args = make()
        keep = [a.clone() for a in args]
        _same(f(*args), fn(*args))
        for a, k in zip(args, keep):  # the caller's tensors are never written
            assert torch.equal(a, k)
    return f


def _chain(x, w, b):
    return torch.relu(x * w + b)


def test_chain_runs_in_place_and_equals_eager():
    f = _check(_chain, lambda: (torch.randn(16, 16), torch.randn(16, 16), torch.randn(16)))
    prog = _program(f)
    assert "aten::add_.Tensor" in prog and "aten::relu_" in prog, prog
    assert "aten::mul.Tensor" in prog  # its operands are the caller's: not reused


def test_knob_off_keeps_functional_operators():
    with config.scope(TRIDENT_REUSE_BUFFERS="0"):
        f = _check(_chain, lambda: (torch.randn(8, 8), torch.randn(8, 8), torch.randn(8)))
    prog = _program(f)
    assert "add_" not in prog and "relu_" not in prog, prog


def test_returned_intermediate_is_not_reused():
    def fn(x, w, b):
        t = x * w
        return t + b, t

    f = _check(fn, lambda: (torch.randn(8, 8), torch.randn(8, 8), torch.randn(8)))
    assert "add_" not in _program(f)


def test_intermediate_with_a_view_is_not_reused():
    def fn(x, w, b):
        t = x * w
        v = t.view(-1)
        return t + b, v * 2

    f = _check(fn, lambda: (torch.randn(8, 8), torch.randn(8, 8), torch.randn(8)))
    assert "add_" not in _program(f)


def test_intermediate_read_twice_is_not_reused():
    def fn(x, w):
        t = x * w
        return t * t

    f = _check(fn, lambda: (torch.randn(8, 8), torch.randn(8, 8)))
    assert "mul_" not in _program(f)


def test_type_promotion_is_not_reused():
    def fn(x, w, b):
        return (x * w) + b  # bf16 intermediate, float32 result

    f = _check(fn, lambda: (torch.randn(8, 8, dtype=torch.bfloat16),
                            torch.randn(8, 8, dtype=torch.bfloat16), torch.randn(8, 8)))
    assert "add_" not in _program(f)


def test_broadcast_to_a_larger_shape_is_not_reused():
    def fn(x, w, m):
        return (x * w) + m  # (8,) intermediate, (4, 8) result

    f = _check(fn, lambda: (torch.randn(8), torch.randn(8), torch.randn(4, 8)))
    assert "add_" not in _program(f)


@pytest.mark.parametrize("other", [(6, 1), (6, 8), (8, 6)])
def test_transposed_operands_keep_eagers_strides(other):
    def fn(x, w, b):
        b = b.t() if b.shape == (8, 6) else b
        return torch.relu(x.t() * w.t() - b)

    _check(fn, lambda: (torch.randn(8, 6), torch.randn(8, 6), torch.randn(*other)))
    # whatever ran in place, _check compared the result's strides with eager's


def test_requires_grad_input_is_not_reused_and_grads_match():
    f = trident.jit(_chain)
    for _ in range(2):
        x = torch.randn(8, 8, requires_grad=True)
        w, b = torch.randn(8, 8), torch.randn(8)
        out = f(x, w, b)
        x2 = x.detach().clone().requires_grad_(True)
        ref = _chain(x2, w, b)
        assert torch.equal(out, ref)
        g = torch.randn_like(ref)
        out.backward(g)
        ref.backward(g)
        assert torch.equal(x.grad, x2.grad)
    assert "add_" not in _program(f) and "relu_" not in _program(f)


def test_no_grad_allows_reuse_with_requires_grad_inputs():
    f = trident.jit(_chain)
    with torch.no_grad():
        _check(_chain, lambda: (torch.randn(8, 8, requires_grad=True), torch.randn(8, 8),
                                torch.randn(8)))
        for _ in range(2):
            x, w, b = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8), torch.randn(8)
            _same(f(x, w, b), _chain(x, w, b))
    assert "aten::add_.Tensor" in _program(f)


@pytest.mark.parametrize("n", [5, 9, 17])
def test_dynamic_sizes(n):
    def fn(x, w, b):
        return -(torch.relu(x * w + b) - b)

    f = trident.jit(fn, dynamic=True)
    for m in (n, n + 3, 2 * n):
        x, w, b = torch.randn(m, 4), torch.randn(m, 4), torch.randn(4)
        _same(f(x, w, b), fn(x, w, b))
    assert trident.stats(f)["versions"] == 1, trident.explain(f)
    assert "aten::add_.Tensor" in _program(f) and "aten::neg_" in _program(f)


def test_shape_branch_reuses_after_sin_and_cos():
    def fn(x):
        return torch.sin(x) * 2 if x.shape[0] > 8 else torch.cos(x) + 1

    f = trident.jit(fn)
    for n in (16, 4, 16, 4):
        x = torch.randn(n, 32)
        _same(f(x), fn(x))
    prog = _program(f)
    assert "aten::mul_.Tensor" in prog and "aten::add_.Tensor" in prog, prog


def test_empty_tensor_keeps_eagers_strides():
    """Found by the fuzzer: an empty intermediate's real strides differ from the trace's
    ((0, 0, 2) transposed: `y * 1` has strides (0, 1, 0), `+ 0` of it (2, 2, 1)), so an
    empty tensor is never reused."""
    def fn(y):
        t = y * 1
        for i in range(2):
            t = t + i
        return t

    f = _check(fn, lambda: (torch.empty(2, 0, 0).transpose(0, 2),))
    assert "add_" not in _program(f)


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(4, 1).t(), torch.randn(1, 4)),
    lambda: (torch.randn(3, 1, 1).permute(1, 2, 0), torch.randn(3)),
    lambda: (torch.randn(3, 2, 1, 1), torch.randn(1, 1, 2, 3).permute(3, 2, 1, 0)),
])
def test_size_one_dims_keep_eagers_strides(make):
    """A size-1 dimension's stride in the trace can differ from the real kernels' (fake
    tensors canonicalize it, TensorIterator keeps an input's): `y * 1.5` on (4, 1).t() has
    strides (1, 1) for real, (4, 1) traced. Such tensors are never reused."""
    def fn(y, z):
        return torch.relu(y * 1.5 + z) - 1

    f = _check(fn, make)
    assert "add_" not in _program(f) and "relu_" not in _program(f)


# ------------------------------------------------ clone of a dead intermediate (_dead_clone)


def _attention_probs(q, k):
    p = torch.softmax(q @ k.transpose(-1, -2), -1)
    return torch.nn.functional.dropout(p, p=0.0, training=False) @ k


@pytest.mark.parametrize("shape", [(2, 5, 8), (1, 1, 8), (3, 1, 4)])
def test_inference_dropout_runs_no_copy(shape):
    """The captured graph of dropout at inference can hold `input.clone()` where eager
    returns its input (here with a size-1 dimension; transformers' eager attention after its
    fp32 softmax): the version's program runs no copy (a copy kernel per attention layer and
    token on a GPU), and the result equals eager's, strides included."""
    f = _check(_attention_probs, lambda: (torch.randn(*shape), torch.randn(*shape)))
    assert "aten::clone" not in _program(f), _program(f)


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(4, 1).t(), torch.randn(1, 4)),
    lambda: (torch.randn(3, 1, 1).permute(1, 2, 0), torch.randn(3)),
    lambda: (torch.randn(6, 5).t(), torch.randn(6, 5).t()),
    lambda: (torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
             torch.randn(5)),
])
def test_returned_clone_of_an_intermediate_keeps_eagers_strides(make):
    def fn(y, z):
        return (y * z).clone()

    f = _check(fn, make)
    assert "aten::clone" not in _program(f), _program(f)


def test_clone_that_must_copy_is_kept():
    """A clone of an intermediate that something else reads (returned, read again, viewed),
    of an input, or into another memory format is a real copy."""
    def returned(x, w):
        t = x * w
        return t, t.clone()

    def read_again(x, w):
        t = x * w
        return t.clone() + t

    def of_input(x, w):
        return x.clone() * w

    def other_format(x, w):
        return (x * w).clone(memory_format=torch.channels_last)

    def viewed(x, w):
        t = x * w
        v = t.view(-1)
        return t.clone(), v

    for fn in (returned, read_again, of_input, other_format, viewed):
        f = _check(fn, lambda: (torch.randn(2, 3, 4, 5), torch.randn(5)))
        assert "aten::clone" in _program(f), (fn.__name__, _program(f))
    f = trident.jit(returned)
    x, w = torch.randn(2, 3), torch.randn(3)
    t, c = f(x, w)
    t.add_(1)  # the clone is its own storage: writing t leaves it as it was
    assert torch.equal(c, x * w) and t.data_ptr() != c.data_ptr()


def test_clone_with_autograd_is_kept_and_grads_match():
    def fn(x, w):
        return torch.sigmoid(x * w).clone() * 2

    f = trident.jit(fn)
    for _ in range(2):
        x = torch.randn(4, 4, requires_grad=True)
        w = torch.randn(4, 4)
        x2 = x.detach().clone().requires_grad_(True)
        out, ref = f(x, w), fn(x2, w)
        assert torch.equal(out, ref)
        out.sum().backward()
        ref.sum().backward()
        assert torch.equal(x.grad, x2.grad)
    assert "aten::clone" in _program(f)


def _probs_clone(q, k):
    # the clone dropout leaves in the graph at inference (torch 2.14's trace of dropout with
    # p=0 has none), written out
    p = torch.softmax(q @ k.transpose(-1, -2), -1)
    return p.clone() @ k


def test_knob_off_keeps_the_clone():
    make = lambda: (torch.randn(2, 5, 8), torch.randn(2, 5, 8))  # noqa: E731
    with config.scope(TRIDENT_REUSE_BUFFERS="0"):
        f = _check(_probs_clone, make)
    assert "aten::clone" in _program(f)
    assert "aten::clone" not in _program(_check(_probs_clone, make))
