"""Adapters (capture/adapters.py): disabled log calls are dropped under a
guard that the logger is still quiet; an enabled logger falls back to eager,
which logs."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import trident

log = logging.getLogger("trident_test_adapters")
log.setLevel(logging.WARNING)


def _logs_then_computes(x, w):
    log.debug("FORWARD %s", "x")
    y = x * w + 1
    log.info("done")
    return y.relu()


def _logs_with_log_method(x):
    log.log(logging.DEBUG, "via log()")
    return x.sin()


def test_disabled_log_calls_are_dropped_and_guarded(h, caplog):
    f = trident.jit(_logs_then_computes)
    for _ in range(3):
        x, w = h.rand(5, 4), h.rand(4)
        h.check(f, _logs_then_computes, x, w)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] == 1
    assert "logger_quiet" in trident.explain(f)
    hits = sum(st["hits"])
    assert hits >= 2

    # Enabling DEBUG on that logger: the version no longer matches, Dynamo
    # cannot drop an enabled log call, so the function runs eagerly (from now
    # on: a path Trident cannot capture falls back) and logs.
    log.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger=log.name):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                x, w_ = h.rand(5, 4), h.rand(4)
                h.check(f, _logs_then_computes, x, w_)
        assert any("FORWARD" in r.getMessage() for r in caplog.records)
        assert any("runs eagerly" in str(m.message) for m in w)
        st = trident.stats(f)
        assert sum(st["hits"]) == hits  # not served by the version
        assert "logging.Logger method" in st["fallback_reason"]
    finally:
        log.setLevel(logging.WARNING)
    h.check(f, _logs_then_computes, h.rand(5, 4), h.rand(4))


def test_log_method_with_constant_level(h):
    f = trident.jit(_logs_with_log_method)
    for _ in range(2):
        h.check(f, _logs_with_log_method, h.rand(7))
    assert trident.stats(f)["fallbacks"] == 0
    assert "logger_quiet" in trident.explain(f)


def test_rebinding_the_logger_global_is_checked(h):
    global log
    f = trident.jit(_logs_then_computes)
    h.check(f, _logs_then_computes, h.rand(3, 4), h.rand(4))
    old = log
    loud = logging.getLogger("trident_test_adapters.loud")
    loud.setLevel(logging.DEBUG)
    log = loud
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            h.check(f, _logs_then_computes, h.rand(3, 4), h.rand(4))
        # the version's quiet-logger guard read the new, loud logger
        st = trident.stats(f)
        assert st["hits"] == [0] and st["fallbacks"] == 1
    finally:
        log = old


def _promoting(x, y):
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, dtype = elementwise_dtypes(x, y, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return torch.empty_like(x, dtype=dtype).copy_(x + y)


def test_elementwise_dtypes_is_a_constant_of_the_version(h):
    # FlagGems' type promotion; each (dtype, scalar type) pair is its own version
    f = trident.jit(_promoting, strict=True)
    cases = [(h.rand(4), 2), (h.rand(4, dtype=torch.int64), 2.5),
             (h.rand(3, dtype=torch.float16), h.rand(3)), (h.rand(4), 3),
             (h.rand(4, dtype=torch.int64), 1.5), (h.rand(2, dtype=torch.int32), 7)]
    for x, y in cases + cases:
        got = h.check(f, _promoting, x, y)
        assert got.dtype == _promoting(x, y).dtype
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and sum(st["hits"]) >= 2


def _prod_of_generator(x):
    import math

    n = math.prod(s * 1 for s in x.shape)
    m = math.prod(x.shape, start=2)
    return x.reshape(n) * m


def test_math_prod_over_a_generator(h):
    f = trident.jit(_prod_of_generator, strict=True)
    for shape in ((2, 3), (4, 5), (2, 3)):
        h.check(f, _prod_of_generator, h.rand(*shape))
    assert trident.stats(f)["fallbacks"] == 0


# --- globals copied from another module (FlagGems' generated wrappers) ------

_GEN_SRC = '''
import torch

SCALE = 3.0
OFFSET = torch.ones(())


def wrapper(x):
    return x * SCALE + OFFSET
'''


def _generated_module(tmp_path, name_of_other):
    """A module loaded from a file, its globals then updated with another
    module's (FlagGems' pointwise_dynamic does this), so `__name__` names a
    module that does not hold `SCALE`."""
    import importlib.util
    import sys

    path = tmp_path / "gen_wrapper.py"
    path.write_text(_GEN_SRC)
    spec = importlib.util.spec_from_file_location("_trident_gen_wrapper", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    other = sys.modules[name_of_other]
    m.__dict__.update({k: v for k, v in vars(other).items()
                       if k in ("__name__", "__file__", "__spec__")})
    assert not hasattr(other, "SCALE")
    return m


def test_globals_copied_from_another_module_are_guarded_as_a_dict(h, tmp_path):
    m = _generated_module(tmp_path, "logging")
    wrapper = m.wrapper

    def entry(x):
        return wrapper(x).relu()

    f = trident.jit(entry, strict=True)
    for _ in range(3):
        h.check(f, entry, h.rand(8))
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0 and sum(st["hits"]) >= 2
    # a change to the generated module's global is seen (guarded), never stale
    m.SCALE = -2.0
    x = h.rand(8)
    h.check(f, entry, x)
    torch.testing.assert_close(f(x), (x * -2.0 + 1).relu())
    m.OFFSET = torch.full((), 5.0)
    h.check(f, entry, h.rand(8))


def test_strided_buffer_standin_points_at_the_offset_element():
    from trident.capture.adapters import _strided_buffer

    class StridedBuffer:  # the attributes FlagGems' class has
        def __init__(self, base, shape=None, strides=None, dtype=None, offset=0):
            raise AssertionError("replaced while tracing")

    traced = _strided_buffer(StridedBuffer)

    def arg(x, off):
        return traced(x, (x.numel() - off,), (1,), offset=off)._trident_arg

    x = torch.randn(4, 10)[1:]  # a storage offset of its own
    for off in (0, 3, 29):
        t = arg(x, off)
        assert t.data_ptr() == x.data_ptr() + off * x.element_size()
        assert t.dtype == x.dtype and t.reshape(-1)[0] == x.reshape(-1)[off]
        g = torch.compile(arg, backend="eager", fullgraph=True, dynamic=True)(x, off)
        assert g.data_ptr() == t.data_ptr()


# ------------------------------------------- next_power_of_2 of a dynamic size


def _bits_npo2(n):
    """Triton's next_power_of_2, as Triton writes it."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n


def _pad_to_pow2(x):
    n = x.shape[0]
    p = _bits_npo2(n)
    tiles = _bits_npo2((n + 3) // 4)  # nested, as FlagGems' cumsum does
    return torch.nn.functional.pad(x, (0, 0, 0, p - n)) * tiles


def test_next_power_of_2_polyfill_equals_triton_arithmetic():
    from trident.capture.adapters import _next_power_of_2

    for n in list(range(-70, 300)) + [2**31 - 1, 2**31, 2**31 + 1, 2**40 + 3, True]:
        assert _next_power_of_2(n) == _bits_npo2(n), n
    for bad in (3.0, 0.5):
        with pytest.raises(TypeError) as want:
            _bits_npo2(bad)
        with pytest.raises(TypeError) as got:
            _next_power_of_2(bad)
        assert str(got.value) == str(want.value)


def test_next_power_of_2_of_a_dynamic_size_is_a_range_guard(h, monkeypatch):
    """Registered as Triton's is: each power-of-two bucket of sizes gets a version whose
    guards are comparisons, not the shifts and ors; results are eager's."""
    from trident.capture import adapters

    monkeypatch.setattr(adapters, "_FUNC_POLYFILLS", {})
    adapters.register_function_polyfill(_bits_npo2, adapters._next_power_of_2)
    f = trident.jit(_pad_to_pow2)
    for n in (5, 6, 7, 8, 9, 12, 16, 17, 3, 33, 7, 12):
        h.check(f, _pad_to_pow2, h.rand(n, 3))
    st = trident.stats(f)
    assert st["fallbacks"] == 0
    ex = trident.explain(f)
    assert "|" not in "".join(ln for ln in ex.splitlines() if " shape " in ln), ex
    # (4, 8], (8, 16], (16, 32], (32, 64] and the first sizes: not one version for all
    assert 4 <= st["versions"] <= 7, ex
    assert sum(st["hits"]) >= 4  # 7, 8, 12, 16, the second 7 and 12 hit


def test_next_power_of_2_polyfill_keeps_its_name_guarded(h, monkeypatch):
    """Rebinding the global the function called through is a miss, not the stand-in."""
    from trident.capture import adapters

    global _bits_npo2
    monkeypatch.setattr(adapters, "_FUNC_POLYFILLS", {})
    real = _bits_npo2
    adapters.register_function_polyfill(real, adapters._next_power_of_2)
    f = trident.jit(_pad_to_pow2)
    try:
        h.check(f, _pad_to_pow2, h.rand(6, 2))
        _bits_npo2 = lambda n: real(n) * 2  # noqa: E731
        h.check(f, _pad_to_pow2, h.rand(6, 2))
    finally:
        _bits_npo2 = real
    h.check(f, _pad_to_pow2, h.rand(6, 2))
