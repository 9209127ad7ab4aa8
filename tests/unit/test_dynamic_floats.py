"""Dynamic floats (TRIDENT_DYNAMIC_FLOATS, on by default): a float argument's second value
makes Dynamo pass it as a 0-d float64 tensor read by `.item()`; Trident reads the Python float
itself (`LoadScalar` with a float variable) under Dynamo's guards (its type, `not
math.isnan`), so one version serves every other value.  Where the float does more than a
version computes with (reaches a tensor, a guard on its value, a returned float), the
capture is tried once more with floats specialised, as before.  Results equal eager on fresh
inputs."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import trident
from trident.capture.dynamo import FLOATS_SPECIALISED


def _scaled(x, t):
    return x * t


def _tempered(logits, t, eps):
    z = logits / (t * 2.0 + eps)
    return torch.softmax(z, -1), math.floor(t * 4) + x_rows(logits)


def x_rows(x):
    return x.shape[0]


def _int_times_float(x, t):
    return x.to(torch.int32) * t  # int32 * float: eager's float32, not float64


def _branch_on_float(x, t):
    return x * t if t > 1.0 else x - t


def _floor_branch(x, t):
    if math.floor(t * 2) == 3:
        return x + 1
    return x * t


def _greedy_or_sampled(logits, t):
    if t == 0.0:
        return logits.argmax(-1)
    return torch.softmax(logits / t, -1).argmax(-1)


def _returns_float(x, t):
    return x * t, t * 3.0


def _tensor_of_float(x, t):
    return x + torch.tensor(t)


def _values(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [float(v) for v in torch.rand(n, generator=g) * 4 + 0.05]


@pytest.mark.parametrize("fn, extra", [(_scaled, ()), (_tempered, (1e-3,)),
                                       (_int_times_float, ()), (_tensor_of_float, ())],
                         ids=["scaled", "tempered", "int_times_float", "tensor_of_float"])
def test_one_version_serves_every_value_of_a_float(h, fn, extra, record_warnings):
    fn = h.fresh(fn)
    f = trident.jit(fn)
    values = _values(8, 1)
    with record_warnings() as rec:
        for t in values:
            h.check(f, fn, h.rand(6, 16), t, *extra)
    st = trident.stats(f)
    # the first value specialised (as Dynamo does), the second made it dynamic
    assert st["captures"] == 2 and sum(st["hits"]) == len(values) - 2, st
    assert st["eager_float_values"] == {}
    ex = trident.explain(f)
    assert "= f0 = float L['t']" in ex and "isnan(L['t'])" in ex, ex
    assert not [w for w in rec if "trident" in str(w.message)], [str(w.message) for w in rec]


def test_nan_and_infinities_keep_eager_results(h):
    fn = h.fresh(_scaled)
    f = trident.jit(fn)
    for t in (0.5, 1.5, float("nan"), float("inf"), -float("inf"), 2.5, float("nan")):
        x = h.rand(4, 8)
        torch.testing.assert_close(f(x.clone(), t), fn(x.clone(), t), equal_nan=True,
                                   rtol=0, atol=0)
    # NaN fails the dynamic version's `not math.isnan` guard: its own, specialised version
    assert trident.stats(f)["captures"] == 3


@pytest.mark.parametrize("fn, values, captures", [
    # 0.5 specialised; then one version for t > 1.0 and one for t <= 1.0 (and not NaN)
    (_branch_on_float, (0.5, 1.5, 2.5, 0.25, 3.5, 1.0, 0.75, 1.0000001), 3),
    # 0.7 specialised; then t != 0.0 and t == 0.0 (a path that does not read t otherwise)
    (_greedy_or_sampled, (0.7, 1.3, 0.0, 2.0, 0.0, 0.5, 0.0, 1e-300), 3),
    # 0.3 specialised; then floor(2t) == 3 and floor(2t) != 3
    (_floor_branch, (0.3, 1.6, 1.7, 0.2, 2.9, 1.55, -0.4), 3)],
    ids=["branch_on_float", "greedy_or_sampled", "floor_branch"])
def test_a_guard_on_a_dynamic_floats_value_is_evaluated_natively(h, fn, values, captures):
    fn = h.fresh(fn)
    f = trident.jit(fn)
    for t in values:
        h.check(f, fn, h.rand(4, 8), t)
    st = trident.stats(f)
    assert st["captures"] == captures and sum(st["hits"]) == len(values) - captures, st
    # the branch's guard reads the float natively (ir.PyFloat)
    assert re.search(r"\] shape .*float L\['t'\]", trident.explain(f)), trident.explain(f)


@pytest.mark.parametrize("fn", [_returns_float], ids=["returns_float"])
def test_a_float_a_version_cannot_keep_dynamic_is_specialised_as_before(h, fn, monkeypatch):
    monkeypatch.setenv("TRIDENT_FLOAT_VALUES", "3")
    fn = h.fresh(fn)
    f = trident.jit(fn)
    for t in (0.5, 1.5, 2.5, 0.25, 3.5, 1.5):
        h.check(f, fn, h.rand(4, 8), t)
    st = trident.stats(f)
    assert st["captures"] == 3 and st["eager_float_values"] == {"L['t']": 2}, st
    assert sum(st["hits"]) == 1  # 1.5 again
    notes = [n for v in trident.versions(f) for n in v.notes]
    assert any(n.startswith(FLOATS_SPECIALISED) for n in notes), notes


def test_dynamic_floats_off_specialises_every_value(h, monkeypatch):
    monkeypatch.setenv("TRIDENT_DYNAMIC_FLOATS", "0")
    monkeypatch.setenv("TRIDENT_FLOAT_VALUES", "0")
    fn = h.fresh(_scaled)
    f = trident.jit(fn)
    for t in (0.5, 1.5, 2.5, 3.5):
        h.check(f, fn, h.rand(4, 8), t)
    assert trident.stats(f)["captures"] == 4


_MODULE = """
import torch
import trident


@trident.jit
def scaled(x, t):
    return torch.relu(x) * (t + 1.0)
"""

_DRIVER = """
import json, os, sys
import torch
import trident
import dfmod

torch.manual_seed(int(os.environ["SEED"]))
out = []
for t in json.loads(os.environ["VALUES"]):
    x = torch.randn(5, 7)
    torch.testing.assert_close(dfmod.scaled(x, t), dfmod.scaled.__wrapped__(x, t))
st = trident.stats(dfmod.scaled)
print(json.dumps({"captures": st["captures"], "hits": sum(st["hits"])}))
"""


def test_a_new_process_serves_new_values_from_the_persisted_dynamic_version(tmp_path):
    (tmp_path / "dfmod.py").write_text(textwrap.dedent(_MODULE))
    (tmp_path / "driver.py").write_text(textwrap.dedent(_DRIVER))
    root = tmp_path / "cache"
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(root), "TRIDENT_TIER_UP": "0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(trident.__file__).parents[1])])}
    env.pop("TRIDENT_CACHE", None)
    from trident.native import build

    root.mkdir(mode=0o700)
    (root / "runtime").mkdir(mode=0o700)
    rt = Path(build.runtime_module().__file__).parent  # not rebuilt in the children
    import shutil

    shutil.copytree(rt, root / "runtime" / rt.name)

    def run(seed, values):
        proc = subprocess.run([sys.executable, str(tmp_path / "driver.py")], cwd=tmp_path,
                              env={**env, "SEED": str(seed), "VALUES": json.dumps(values)},
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert run(1, [0.5, 1.5, 2.5]) == {"captures": 2, "hits": 1}
    assert run(2, _values(4, 3)) == {"captures": 0, "hits": 4}


def _keyword(x, *, t=1.0):
    return x * t


def _tuple_item(x, cfg):
    return x * cfg[0] + cfg[1]


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5

    def forward(self, x):
        return x * self.scale


def _module_call(mod, x):
    return mod(x)


def test_a_float_from_a_keyword_an_item_or_a_module_attribute_is_dynamic(h):
    kw, item, call = h.fresh(_keyword), h.fresh(_tuple_item), h.fresh(_module_call)
    fk, fi, fc = trident.jit(kw), trident.jit(item), trident.jit(call)
    mod = _Scaled()
    values = _values(5, 2)
    for t in values:
        h.check(fk, kw, h.rand(3, 4), t=t)
        h.check(fi, item, h.rand(3, 4), (t, 2.0 * t))
        mod.scale = t
        x = h.rand(3, 4)
        torch.testing.assert_close(fc(mod, x), call(mod, x), rtol=0, atol=0)
    h.check(fk, kw, h.rand(3, 4))  # the default: a value of its own
    for f, hits in ((fk, len(values) - 1), (fi, len(values) - 2), (fc, len(values) - 2)):
        st = trident.stats(f)
        assert st["captures"] == 2 and sum(st["hits"]) == hits, st
