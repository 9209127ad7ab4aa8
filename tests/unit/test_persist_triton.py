"""Persisting versions that launch Triton kernels (no GPU needed; skipped without Triton):
an autotuned launch's Resolver round-trips as data (its user's autotuner and kernel by name,
Dynamo's configs, the variants chosen so far), and a fingerprint covers what a new process must
not silently reuse (the kernel's source, the autotuner's configs and keys).  The end-to-end
check (a new process launching from disk) is tests/gpu/test_persist_gpu.py."""

from __future__ import annotations

import importlib
import pickle
import sys

import pytest

triton = pytest.importorskip("triton")

from trident.ir import nodes as ir  # noqa: E402
from trident.ir.launch import Resolver  # noqa: E402
from trident.persist import consts  # noqa: E402

KERNELS = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 256}, num_warps=NUM_WARPS)], key=["n"])
@triton.jit
def scale_kernel(X, Y, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs) * s BODY)
'''


def _module(tmp_path, monkeypatch, name, warps=8, body=""):
    (tmp_path / f"{name}.py").write_text(
        KERNELS.replace("NUM_WARPS", str(warps)).replace("BODY", body))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _ctx():
    return consts.Ctx(fn=_ctx, globals={}, builtins={})


def test_an_autotuned_launch_resolver_round_trips_as_data(tmp_path, monkeypatch):
    m = _module(tmp_path, monkeypatch, "pt_kernels_a")
    tuner = m.scale_kernel
    seen = consts._Configs([triton.Config({"BLOCK": b, "EVEN": True}, num_warps=w)
                            for b, w in ((128, 4), (256, 8))])
    r = Resolver(seen, tuner, tuner.fn, ["X", "n"], ["ptr", "int"], {"s": 2.0},
                 {"X": ir.Slot(0), "n": ir.Slot(1)}, None, 2, ("raw", "log2"))
    variant = ("scale_kernel", b"\x7fELF...", 4, 1, 0, 0, 0, 1, ((1, 0, 0, 0.0, 1, 5),))
    r.table[(1, 64)] = r.table[(1, 32)] = variant
    r.configs[(1, 64)] = "BLOCK: 256"
    node = consts.encode(r, _ctx())
    monkeypatch.setattr("trident.native.build.runtime_module", lambda: "runtime")
    back = consts.decode(pickle.loads(pickle.dumps(node)), _ctx())
    assert back.user_tuner is tuner and back.jit is tuner.fn and back.rt == "runtime"
    assert [str(c) for c in back.dynamo_tuner.configs] == [str(c) for c in seen.configs]
    assert back.table == r.table and back.table[(1, 64)] is back.table[(1, 32)]
    assert back.args == r.args and back.const_kwargs == {"s": 2.0}
    assert (back.names, back.kinds, back.transforms, back.nrows) == (
        r.names, r.kinds, r.transforms, r.nrows)
    assert back.configs == r.configs and back.calls == 0


def test_a_config_with_a_pre_hook_is_not_persisted():
    cfg = triton.Config({"BLOCK": 64}, pre_hook=lambda args: None)
    with pytest.raises(consts.NoName, match="pre_hook"):
        consts.encode(cfg, _ctx())


@pytest.mark.parametrize("change", [{"warps": 4}, {"body": "+ 1"}])
def test_the_fingerprint_covers_the_kernel_source_and_the_configs(tmp_path, monkeypatch,
                                                                   change):
    (tmp_path / "a").mkdir()
    a = _module(tmp_path / "a", monkeypatch, "pt_kernels_b")
    before = consts.fingerprint(a.scale_kernel), consts.fingerprint(a.scale_kernel.fn)
    assert before == (consts.fingerprint(a.scale_kernel), consts.fingerprint(a.scale_kernel.fn))
    (tmp_path / "b").mkdir()
    b = _module(tmp_path / "b", monkeypatch, "pt_kernels_b", **change)
    after = consts.fingerprint(b.scale_kernel), consts.fingerprint(b.scale_kernel.fn)
    assert after[0] != before[0]  # the autotuner: its configs and its kernel
    assert (after[1] != before[1]) == ("body" in change)  # the kernel: its source only


def test_a_function_wrapped_by_a_decorator_object_resolves_through_it():
    # Triton's @constexpr_function (triton.cdiv): Dynamo inlines, and guards, the function
    # inside; the name `triton.cdiv` is the wrapper.
    inner = triton.cdiv.fn
    node = consts.encode(inner, _ctx())
    assert node[0] == "attr" and node[2] == "fn", node
    assert consts.decode(pickle.loads(pickle.dumps(node)), _ctx()) is inner
