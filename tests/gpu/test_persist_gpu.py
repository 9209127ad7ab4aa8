"""GPU: versions that launch Triton kernels persist, and a new process serves them from disk
(no Dynamo capture, no C compiler), equal to eager on fresh inputs.

Process A captures user-written Triton functions (a plain @triton.jit launch, a host-chosen
variant, an @triton.autotune launch whose key changes within the version) and, where FlagGems
is importable, three FlagGems operators; process B, on A's cache, must load every version from
disk.  A failure prints explain's persistence lines (why a version was not persisted or not
loaded)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trident
from trident.native import build

MODULE = '''
import torch
import triton
import triton.language as tl

import trident
from trident.examples import triton_kernels as tk


@trident.jit
def tt_silu(x):
    return tk.silu(x)


@trident.jit
def tt_rms_norm(x, w):
    return tk.rms_norm(x, w)


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"])
@triton.jit
def _scale_kernel(X, Y, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask) * s, mask=mask)


@trident.jit
def tuned_scale(x):
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n, 3.0)
    return y


NAMES = ["tt_silu", "tt_rms_norm", "tuned_scale"]
try:
    import flag_gems
except ImportError:
    flag_gems = None
else:
    @trident.jit
    def fg_silu(x):
        return flag_gems.ops.silu(x)

    @trident.jit
    def fg_rms_norm(x, w):
        return flag_gems.ops.rms_norm(x, [x.shape[-1]], w, 1e-6)

    @trident.jit
    def fg_mm(x, w):
        return flag_gems.ops.mm(x, w)

    NAMES += ["fg_silu", "fg_rms_norm", "fg_mm"]


def inputs(name):
    x = torch.randn(32, 512, device="cuda", dtype=torch.float16)
    if name in ("tt_silu", "fg_silu", "tuned_scale"):
        return (x,)
    if name == "fg_mm":
        return x, torch.randn(512, 256, device="cuda", dtype=torch.float16) / 16
    return x, torch.randn(512, device="cuda", dtype=torch.float16)
'''

DRIVER = '''
import json, os, warnings

import torch

import trident
import gmod

torch.manual_seed(int(os.environ["SEED"]))
out = {"names": gmod.NAMES}
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    for name in gmod.NAMES:
        fn = getattr(gmod, name)
        for _ in range(2):
            args = gmod.inputs(name)
            torch.testing.assert_close(fn(*args), fn.__wrapped__(*args), atol=2e-2, rtol=2e-2)
        st = trident.stats(fn)
        out[name] = {"captures": st["captures"], "hits": sum(st["hits"]),
                     "compiled": st["compiled_units"], "origins": st["origins"],
                     "fallback": st["fallback_reason"], "explain": trident.explain(fn)}
out["warnings"] = [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)]
print(json.dumps(out))
'''


def _run(d: Path, root: Path, seed: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRIDENT_CACHE"}
    path = [str(d), str(Path(trident.__file__).parent.parent)]
    env.update(SEED=str(seed), TRIDENT_CACHE_DIR=str(root), PYTHONPATH=os.pathsep.join(
        path + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(d / "driver.py")], env=env, cwd=d,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _why(r: dict, name: str) -> str:
    return f"{name}: {json.dumps({k: v for k, v in r[name].items() if k != 'explain'})}\n" \
        + "\n".join(ln for ln in r[name]["explain"].splitlines()
                    if "persist" in ln or "loaded" in ln or "runs eagerly" in ln
                    or "note:" in ln or not ln.startswith("    "))


def test_triton_versions_load_from_disk_in_a_new_process(tmp_path):
    (tmp_path / "gmod.py").write_text(MODULE)
    (tmp_path / "driver.py").write_text(DRIVER)
    root = tmp_path / "cache"
    (root / "runtime").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    rt = Path(build.runtime_module().__file__).parent  # not rebuilt in the children
    shutil.copytree(rt, root / "runtime" / rt.name)
    a = _run(tmp_path, root, 1)
    problems = []
    for name in a["names"]:
        ex = a[name]["explain"]
        if a[name]["captures"] != 1 or "not persisted" in ex or a[name]["fallback"] \
                or "runs eagerly" in ex:
            problems.append("A " + _why(a, name))
    b = _run(tmp_path, root, 2)
    for name in b["names"]:
        c = b[name]
        # FlagGems generates a pointwise operator's module on its first call in a process, and
        # the loaded version's guards read it: the load generates it (persist.consts.FILLERS),
        # so both calls are native hits.
        if c["captures"] or c["hits"] != 2 or c["compiled"] or c["origins"] != ["disk"]:
            problems.append("B " + _why(b, name))
    assert not problems, "\n\n".join(problems)
    assert not b["warnings"], b["warnings"]


def test_a_cuda_tensor_constant_comes_back_on_its_device_with_its_view():
    import pickle

    import torch

    from trident.persist import consts, record

    ctx = consts.Ctx(_why, globals(), __builtins__ if isinstance(__builtins__, dict)
                     else __builtins__.__dict__)
    g = torch.Generator(device="cuda").manual_seed(3)
    for obj in [torch.randn(4, 6, device="cuda", generator=g)[:, 1:3],
                torch.empty(0, 4, device="cuda", dtype=torch.bfloat16),
                torch.nn.Parameter(torch.randn(5, device="cuda", generator=g)),
                torch.randn(3, device="cuda", generator=g).expand(2, 3)]:
        node = consts.encode(obj, ctx)
        assert node[0] == "tensor_raw"
        back = consts.decode(record._loads(pickle.dumps(node)), ctx)
        assert type(back) is type(obj) and back.device == obj.device
        assert (back.shape, back.stride(), back.storage_offset(), back.dtype) == \
            (obj.shape, obj.stride(), obj.storage_offset(), obj.dtype)
        assert torch.equal(back, obj)
