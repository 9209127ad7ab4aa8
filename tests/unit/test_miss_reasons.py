"""A miss on the global-state guard says what differs from the capture: the words of the
runtime's snapshot by name (grad mode, default dtype, a thread-local dispatch key set by the
keys it gained or lost), so `trident.explain` answers why a version was recaptured."""

from __future__ import annotations

import sys

import torch

import trident


def _f(x):
    return x * 2 + 1


def _reasons(f) -> list:
    return [ln for ln in trident.explain(f).splitlines() if "captured because" in ln]


def test_grad_mode_change_is_named():
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    with torch.no_grad():
        y = torch.randn(8)
        assert torch.equal(f(y), _f(y))
    reasons = _reasons(f)
    assert len(reasons) == 2, trident.explain(f)
    assert "global_state" in reasons[1] and "grad mode: 1 at capture, 0 now" in reasons[1], reasons


def test_default_dtype_change_is_named():
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        y = torch.randn(8)
        assert torch.equal(f(y), _f(y))
    finally:
        torch.set_default_dtype(old)
    reasons = _reasons(f)
    assert "default dtype (ScalarType): float32 at capture, float64 now" in reasons[1], reasons


def test_excluded_dispatch_key_is_named():
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        y = torch.randn(8)
        out = f(y)
        ref = _f(y)
    assert torch.equal(out, ref)
    reasons = _reasons(f)
    assert len(reasons) == 2, trident.explain(f)
    r = reasons[1]
    assert "excluded dispatch keys (thread-local): +" in r and "AutogradCPU" in r, r


def test_llm_decode_summarises_global_state_misses(monkeypatch):
    """benchmarks/llm_decode.py's per-operator status counts the global-state differences in
    a wrapper's capture reasons (a wrapper that multiplies versions by global state)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "llm_decode.py"
    spec = importlib.util.spec_from_file_location("llm_decode_for_test", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look themselves up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts benchmarks/ on sys.path
    spec.loader.exec_module(mod)
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    assert mod.global_state_misses(f) == {}
    with torch.no_grad():
        y = torch.randn(8)
        assert torch.equal(f(y), _f(y))
    assert mod.global_state_misses(f) == {"grad mode: 1 at capture, 0 now": 1}
    assert "global-state differences in capture reasons: grad mode: 1 at capture, 0 now (x1)" \
        in mod.trident_status(f)
