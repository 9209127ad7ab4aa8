"""Guards: a call is only served by a version whose assumptions still hold.

Shape branches, rebinding globals and closure cells, autograd state, and
Python scalar arguments baked in as constants must never give a stale
version's answer."""

from __future__ import annotations

import pytest
import torch

import trident

# ------------------------------------------------------------ shape branches


def _branchy(x):
    if x.shape[0] > 4:
        return x.sum(0) * 2
    return x.t() @ x


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_branch_on_shape_both_sides(h, dynamic):
    f = trident.jit(_branchy, dynamic=dynamic)
    for n in (2, 3, 6, 7, 4, 5, 2, 9, 3):
        h.check(f, _branchy, h.rand(n, 3))
    st = trident.stats(f)
    assert st["fallbacks"] == 0
    assert st["versions"] >= 2


def test_branch_on_shape_dynamic_versions_split_at_the_branch(h):
    f = trident.jit(_branchy, dynamic=True)
    h.check(f, _branchy, h.rand(2, 3))
    assert trident.stats(f)["versions"] == 1
    h.check(f, _branchy, h.rand(3, 3))
    h.check(f, _branchy, h.rand(4, 3))
    assert trident.stats(f)["versions"] == 1  # the n <= 4 version serves 3 and 4
    h.check(f, _branchy, h.rand(5, 3))
    assert trident.stats(f)["versions"] == 2
    for n in (6, 11, 3, 2, 4, 5):
        h.check(f, _branchy, h.rand(n, 3))
    assert trident.stats(f)["versions"] == 2


def test_branch_on_ndim_and_dtype(h):
    def fn(x):
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dtype == torch.int64:
            return x * 2
        return x / 2

    f = trident.jit(fn)
    for x in (h.rand(3), h.rand(2, 3), h.rand(3, dtype=torch.int64), h.rand(3), h.rand(2, 3),
              h.rand(2, 3, dtype=torch.int64)):
        h.check(f, fn, x)


# ------------------------------------------------------- module globals

SCALE = 2.0


def _helper(x):
    return x + 1


def _uses_global_scale(x):
    return x * SCALE


def _uses_global_helper(x):
    return _helper(x) * 3


def test_rebinding_global_float(h):
    global SCALE
    old = SCALE
    f = trident.jit(_uses_global_scale)
    try:
        for value in (2.0, 2.0, 5.0, 5.0, -1.5, 2.0, 0.25):
            SCALE = value
            h.check(f, _uses_global_scale, h.rand(4, 4), exact=True)
    finally:
        SCALE = old


def test_rebinding_global_function(h):
    global _helper
    old = _helper
    f = trident.jit(_uses_global_helper)
    try:
        h.check(f, _uses_global_helper, h.rand(3))
        h.check(f, _uses_global_helper, h.rand(3))
        _helper = lambda x: x - 10  # noqa: E731
        h.check(f, _uses_global_helper, h.rand(3))
        h.check(f, _uses_global_helper, h.rand(3))

        def _helper(x):  # noqa: F811 - a new function object, new code
            return torch.cos(x)

        h.check(f, _uses_global_helper, h.rand(3))
        _helper = old
        h.check(f, _uses_global_helper, h.rand(3))
    finally:
        _helper = old


def test_rebinding_global_function_with_same_code_new_defaults(h):
    """Two function objects sharing one code object but with different
    defaults compute different things."""
    global _helper
    old = _helper

    def make(k):
        def g(x, k=k):
            return x * k
        return g

    f = trident.jit(_uses_global_helper)
    try:
        for k in (2, 2, 7, 7, 2):
            _helper = make(k)
            h.check(f, _uses_global_helper, h.rand(3))
    finally:
        _helper = old


def test_rebinding_global_tensor(h):
    global SCALE
    old = SCALE
    f = trident.jit(_uses_global_scale)
    try:
        for shape in ((4,), (4,), (1,), (4,)):
            SCALE = torch.randn(*shape)
            h.check(f, _uses_global_scale, h.rand(4, 4))
        SCALE = torch.randn(4)
        h.check(f, _uses_global_scale, h.rand(4, 4))
        SCALE.mul_(3)  # in-place change of the global tensor's data
        h.check(f, _uses_global_scale, h.rand(4, 4))
    finally:
        SCALE = old


def test_deleting_a_global_does_not_use_a_stale_value(h):
    global SCALE
    old = SCALE
    f = trident.jit(_uses_global_scale)
    try:
        h.check(f, _uses_global_scale, h.rand(2))
        del SCALE
        with pytest.raises(NameError) as ej:
            f(h.rand(2))
        with pytest.raises(NameError) as ee:
            _uses_global_scale(h.rand(2))
        assert str(ej.value) == str(ee.value)
    finally:
        SCALE = old
    h.check(f, _uses_global_scale, h.rand(2))


class _Cfg:
    scale = 2
    dtype = torch.float32


CFG = _Cfg()


def _uses_global_object_attrs(x):
    return x.to(CFG.dtype) * CFG.scale


def test_rebinding_attributes_of_a_global_object(h):
    f = trident.jit(_uses_global_object_attrs)
    old = (CFG.scale, CFG.dtype)
    try:
        for scale, dt in ((2, torch.float32), (2, torch.float32), (3, torch.float32),
                          (3, torch.float64), (5, torch.int64), (2, torch.float32)):
            CFG.scale, CFG.dtype = scale, dt
            h.check(f, _uses_global_object_attrs, h.rand(3), exact=True)
    finally:
        CFG.scale, CFG.dtype = old
    assert trident.stats(f)["fallbacks"] == 0


def test_rebinding_the_global_object_itself(h):
    global CFG
    old = CFG
    f = trident.jit(_uses_global_object_attrs)
    try:
        h.check(f, _uses_global_object_attrs, h.rand(3), exact=True)
        CFG = _Cfg()
        CFG.scale = 7
        h.check(f, _uses_global_object_attrs, h.rand(3), exact=True)
        CFG = old
        h.check(f, _uses_global_object_attrs, h.rand(3), exact=True)
    finally:
        CFG = old


# -------------------------------------------------------------- closures


def _make_closure(scale):
    def fn(x):
        return x * scale + offset

    def set_scale(v):
        nonlocal scale
        scale = v

    offset = 1.0
    return fn, set_scale


def test_closure_cell_changed_through_setter(h):
    fn, set_scale = _make_closure(2.0)
    f = trident.jit(fn)
    for value in (2.0, 2.0, 3.0, 3.0, 0.5, 2.0):
        set_scale(value)
        h.check(f, fn, h.rand(5), exact=True)


def _make_int_closure(k):
    def fn(x):
        return x + k, k

    def set_k(v):
        nonlocal k
        k = v

    return fn, set_k


def test_closure_int_cell_changed_through_setter(h):
    fn, set_k = _make_int_closure(2)
    f = trident.jit(fn)
    for value in (2, 2, 3, 3, 5):
        set_k(value)
        x = h.rand(4)
        h.assert_tree_equal(f(x)[0], fn(x)[0], exact=True)
    assert trident.stats(f)["fallbacks"] == 0


def test_closure_int_cell_returned_after_setter(h):
    fn, set_k = _make_int_closure(2)
    f = trident.jit(fn)
    for value in (2, 3, 4, 5):
        set_k(value)
        h.check(f, fn, h.rand(4), exact=True)


def test_closure_cell_holding_a_tensor_and_a_function(h):
    w = torch.randn(3)
    act = torch.relu

    def fn(x):
        return act(x * w)

    def set_(new_w=None, new_act=None):
        nonlocal w, act
        if new_w is not None:
            w = new_w
        if new_act is not None:
            act = new_act

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3))
    set_(new_w=torch.randn(3))
    h.check(f, fn, h.rand(3))
    set_(new_act=torch.tanh)
    h.check(f, fn, h.rand(3))
    set_(new_act=torch.sigmoid, new_w=torch.randn(1))
    h.check(f, fn, h.rand(3))
    set_(new_act=torch.relu)
    h.check(f, fn, h.rand(3))


# ------------------------------------------------- autograd state


def _poly(x, w):
    return (x * w).sin().sum(-1)


def test_requires_grad_mismatch_is_a_miss(h):
    f = trident.jit(_poly)
    h.check(f, _poly, h.rand(3, 4), h.rand(4))
    assert trident.stats(f)["versions"] == 1
    h.check(f, _poly, h.rand(3, 4), h.rand(4, requires_grad=True))
    assert trident.stats(f)["versions"] == 2
    h.check(f, _poly, h.rand(3, 4), h.rand(4))
    h.check(f, _poly, h.rand(3, 4), h.rand(4, requires_grad=True))
    assert trident.stats(f)["versions"] == 2
    assert trident.stats(f)["hits"] == [1, 1]


def test_requires_grad_output_supports_backward_like_eager(h):
    f = trident.jit(_poly)
    for _ in range(3):  # miss, then hits
        x = h.rand(3, 4)
        w1 = h.rand(4, requires_grad=True)
        w2 = h.clone_tensor(w1)
        out = f(x, w1)
        ref = _poly(x, w2)
        assert out.requires_grad and out.grad_fn is not None
        h.assert_tree_equal(out, ref)
        out.sum().backward()
        ref.sum().backward()
        torch.testing.assert_close(w1.grad, w2.grad)


def test_grad_mode_change_is_a_miss(h):
    f = trident.jit(_poly)
    w = h.rand(4, requires_grad=True)
    x = h.rand(3, 4)
    out = f(x, w)
    assert out.requires_grad
    with torch.no_grad():
        out = f(x, w)
        ref = _poly(x, w)
        assert not ref.requires_grad
        h.assert_tree_equal(out, ref)
    assert trident.stats(f)["versions"] == 2
    out = f(x, w)
    assert out.requires_grad
    with torch.no_grad():
        assert not f(x, w).requires_grad
    assert trident.stats(f)["versions"] == 2
    assert trident.stats(f)["hits"] == [1, 1]


def test_no_grad_first_then_grad_mode(h):
    f = trident.jit(_poly)
    w = h.rand(4, requires_grad=True)
    x = h.rand(3, 4)
    with torch.no_grad():
        assert not f(x, w).requires_grad
        assert not f(x, w).requires_grad
    out = f(x, w)
    assert out.requires_grad and out.grad_fn is not None
    h.assert_tree_equal(out, _poly(x, w))


def test_inference_mode_is_a_miss(h):
    f = trident.jit(_poly)
    x, w = h.rand(3, 4), h.rand(4)
    h.check(f, _poly, x, w)
    with torch.inference_mode():
        xi, wi = h.rand(3, 4), h.rand(4)
        out = f(xi, wi)
        ref = _poly(xi, wi)
    assert out.is_inference() == ref.is_inference()
    h.assert_tree_equal(out, ref)
    h.check(f, _poly, h.rand(3, 4), h.rand(4))


def test_deterministic_algorithms_flag_is_guarded(h):
    f = trident.jit(_poly)
    h.check(f, _poly, h.rand(2, 4), h.rand(4))
    old = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        h.check(f, _poly, h.rand(2, 4), h.rand(4))
    finally:
        torch.use_deterministic_algorithms(old)
    assert trident.stats(f)["versions"] == 2


# ------------------------------------------------- python scalar args


def _scalar_args(x, eps: float, n: int):
    return (x + eps) * n, x.sum() / n


def test_python_scalars_changing_values(h):
    f = trident.jit(_scalar_args)
    for eps, n in ((1e-6, 2), (1e-6, 2), (0.5, 2), (0.5, 3), (0.25, 7), (1e-6, 2), (-3.0, -4)):
        h.check(f, _scalar_args, h.rand(4), eps, n, exact=True)


@pytest.mark.parametrize("dynamic", [True, False])
def test_python_scalars_changing_values_dynamic_modes(h, dynamic):
    f = trident.jit(_scalar_args, dynamic=dynamic)
    for eps, n in ((1e-6, 2), (0.5, 3), (0.25, 7), (1e-6, 2), (2.0, 3)):
        h.check(f, _scalar_args, h.rand(4), eps, n, exact=True)


def test_python_int_used_as_shape(h):
    def fn(x, n: int):
        return x.reshape(n, -1).sum(1) + torch.zeros(n)

    f = trident.jit(fn)
    for n in (2, 4, 2, 8, 4, 16, 1):
        h.check(f, fn, h.rand(16), n)


def test_python_int_used_in_python_branch(h):
    def fn(x, n: int):
        for _ in range(n):
            x = x * 2 + 1
        return x

    f = trident.jit(fn)
    for n in (1, 2, 3, 2, 0, 5):
        h.check(f, fn, h.rand(3), n)


def test_bool_and_none_and_str_args(h):
    def fn(x, flag: bool, bias, mode: str):
        if flag:
            x = x * 2
        if bias is not None:
            x = x + bias
        return x.sum() if mode == "sum" else x.mean()

    f = trident.jit(fn)
    combos = [(True, None, "sum"), (False, None, "sum"), (True, torch.randn(3), "mean"),
              (True, None, "sum"), (False, torch.randn(3), "mean"), (True, torch.randn(3), "sum")]
    for flag, bias, mode in combos:
        h.check(f, fn, h.rand(3), flag, bias, mode)


def test_int_vs_float_vs_bool_scalar_type(h):
    def fn(x, s):
        return x * s

    f = trident.jit(fn)
    for s in (2, 2.0, True, 2, 2.5, False, 3):
        h.check(f, fn, h.rand(3, dtype=torch.int64), s, exact=True)


def test_dtype_argument(h):
    def fn(x, dt):
        return x.to(dt) * 3

    f = trident.jit(fn)
    for dt in (torch.float32, torch.float64, torch.int64, torch.float32, torch.bfloat16):
        h.check(f, fn, h.rand(5), dt, exact=True)


# ------------------------------------------------- global torch state


def test_rng_ops_consume_the_global_generator_like_eager(h):
    def fn(x):
        return (x + torch.rand(3), torch.randn_like(x),
                torch.nn.functional.dropout(x, 0.5, training=True))

    f = trident.jit(fn)
    for seed in (0, 1, 2, 1):
        x = h.rand(3)
        torch.manual_seed(seed)
        out = f(x)
        after_j = torch.rand(2)  # the generator advanced by the same amount
        torch.manual_seed(seed)
        ref = fn(x)
        after_e = torch.rand(2)
        h.assert_tree_equal(out, ref, exact=True)
        assert torch.equal(after_j, after_e)


def test_default_dtype_change_is_not_served_by_a_stale_version(h):
    def fn(x):
        return x + torch.ones(3), torch.arange(3) * 1.0

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3))
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        h.check(f, fn, h.rand(3, dtype=torch.float32))
    finally:
        torch.set_default_dtype(old)
    h.check(f, fn, h.rand(3))


def test_autocast_is_not_served_by_a_stale_version(h):
    def fn(x, w):
        return x @ w

    f = trident.jit(fn)
    h.check(f, fn, h.rand(4, 4), h.rand(4, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h.check(f, fn, h.rand(4, 4), h.rand(4, 4))
        h.check(f, fn, h.rand(4, 4), h.rand(4, 4))
    h.check(f, fn, h.rand(4, 4), h.rand(4, 4))


def test_matmul_precision_change_is_a_miss(h):
    """allow_tf32 / float32_matmul_precision are part of Dynamo's global state."""

    def fn(a, b):
        return a @ b

    f = trident.jit(h.fresh(fn))
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    old = torch.get_float32_matmul_precision()
    try:
        torch.testing.assert_close(f(a, b), fn(a, b))
        torch.set_float32_matmul_precision("high" if old != "high" else "highest")
        torch.testing.assert_close(f(a, b), fn(a, b))
        assert trident.stats(f)["versions"] == 2
    finally:
        torch.set_float32_matmul_precision(old)
    torch.testing.assert_close(f(a, b), fn(a, b))
    assert trident.stats(f)["versions"] == 2


def test_monkeypatching_a_module_function_is_a_miss(h):
    """Environment guards are cached on dict version tags: patching an
    attribute of a module (torch.relu) must invalidate them."""

    def fn(x):
        return torch.relu(x) + 1

    f = trident.jit(h.fresh(fn))
    x = h.rand(5)
    torch.testing.assert_close(f(x), fn(x))
    orig = torch.relu
    try:
        torch.relu = torch.sigmoid
        torch.testing.assert_close(f(x), torch.sigmoid(x) + 1)
    finally:
        torch.relu = orig
    torch.testing.assert_close(f(x), fn(x))


def test_shadowing_a_builtin_with_a_global_is_a_miss(h):
    src = "def fn(x):\n    return x * len(x.shape)\n"
    g = {"torch": torch}
    exec(src, g)
    fn = g["fn"]
    f = trident.jit(fn)
    x = h.rand(2, 3)
    torch.testing.assert_close(f(x), x * 2)
    g["len"] = lambda s: 10
    torch.testing.assert_close(f(x), x * 10)
    del g["len"]
    torch.testing.assert_close(f(x), x * 2)


# ------------------------------------------------ global chains (the environment block)

import types as _types  # noqa: E402

_cfg = _types.ModuleType("_trident_test_cfg")
_cfg.inner = _types.ModuleType("_trident_test_cfg.inner")
_cfg.inner.factor = 2.0
_cfg.scale_fn = torch.sin


def _uses_module_chain(x):
    return _cfg.scale_fn(x) * _cfg.inner.factor


def _kw_helper(x, *, k=3.0):
    return x * k


def _uses_kwdefault(x):
    return _kw_helper(x) + 1


def test_module_attribute_chain_changes_are_misses(h):
    """Guards on G['_cfg'].inner.factor and G['_cfg'].scale_fn: each rebinding anywhere on the
    chain, at any depth, gives eager's answer."""
    old_factor, old_fn, old_inner = _cfg.inner.factor, _cfg.scale_fn, _cfg.inner
    f = trident.jit(_uses_module_chain)
    try:
        h.check(f, _uses_module_chain, h.rand(5))
        h.check(f, _uses_module_chain, h.rand(5))
        _cfg.inner.factor = -0.5
        h.check(f, _uses_module_chain, h.rand(5))
        _cfg.scale_fn = torch.cos
        h.check(f, _uses_module_chain, h.rand(5))
        _cfg.inner = _types.ModuleType("_trident_test_cfg.inner2")
        _cfg.inner.factor = 4.0
        h.check(f, _uses_module_chain, h.rand(5))
        _cfg.inner = old_inner  # back to the first module, whose factor is -0.5 now
        h.check(f, _uses_module_chain, h.rand(5))
        assert trident.stats(f)["fallbacks"] == 0
    finally:
        _cfg.inner, _cfg.inner.factor, _cfg.scale_fn = old_inner, old_factor, old_fn


def test_mutating_kwdefaults_in_place_is_a_miss(h):
    """A guard through a function's __kwdefaults__ (the unit's own cold helper)."""
    old = dict(_kw_helper.__kwdefaults__)
    f = trident.jit(_uses_kwdefault)
    try:
        h.check(f, _uses_kwdefault, h.rand(4))
        _kw_helper.__kwdefaults__["k"] = -2.0
        h.check(f, _uses_kwdefault, h.rand(4))
        _kw_helper.__kwdefaults__ = {"k": 5.0}
        h.check(f, _uses_kwdefault, h.rand(4))
        h.check(f, _uses_kwdefault, h.rand(4))
        assert trident.stats(f)["fallbacks"] == 0
    finally:
        _kw_helper.__kwdefaults__ = old


# ------------------------------------- shape guards with repeated subexpressions


def _bits_npo2(n):
    """Triton's next_power_of_2, as Triton writes it (Dynamo traces it symbolically)."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n


def _tile_rows(x):
    n = x.shape[0]
    t = min(64, _bits_npo2(n))  # FlagGems' BLOCK = min(MAX, next_power_of_2(n))
    return x[: n - n % t] * t


def _version_sources(f) -> list:
    so = trident.explain(f).split("SCM: ")[1].split()[0]
    from pathlib import Path
    cmd = (Path(so).parent / "cmd.txt").read_text().split()
    return [Path(o).with_suffix(".c").read_text() for o in cmd
            if o.endswith(".o") and "/version_" in o]


def test_shape_guards_compute_repeated_subexpressions_once(h):
    """Dynamo writes next_power_of_2(n) out again at each use inside a guard; the C computes
    each repeated subexpression once (a temporary).  Sizes on both sides of every guard's
    boundaries give eager's results."""
    f = trident.jit(_tile_rows)
    for n in (5, 6, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 1000, 7, 64, 3000):
        h.check(f, _tile_rows, h.rand(n, 2))
    assert trident.stats(f)["fallbacks"] == 0
    srcs = _version_sources(f)
    dynamic = [s for s in srcs if "int64_t c" in s]
    assert dynamic, "no version computes a shared subexpression"
    for s in srcs:
        longest = max((len(ln) for ln in s.splitlines() if "if (!(" in ln or "int64_t c" in ln),
                      default=0)
        assert longest < 1000, longest
