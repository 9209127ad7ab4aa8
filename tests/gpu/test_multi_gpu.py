"""Several GPUs (skipped where fewer than two exist): versions per device, launches on the
tensors' device and its current stream, mixed devices, and a tensor-parallel block with a
Triton kernel and an NCCL all_reduce in two processes, all against eager."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA devices", allow_module_level=True)
pytest.importorskip("triton")

from trident.examples.triton_kernels import rms_norm, silu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _on(dev, *shape, dtype=torch.float32):
    return torch.randn(*shape, device=dev, dtype=dtype)


def test_versions_per_device_match_eager():
    f = trident.jit(silu, strict=True)
    for _ in range(3):
        for d in (0, 1):
            x = _on(f"cuda:{d}", 4096, dtype=torch.float16)
            with torch.cuda.device(d):  # eager Triton launches on the current device
                ref = silu(x)
                out = f(x)
            assert out.device == x.device
            torch.testing.assert_close(out, ref)
    s = trident.stats(f)
    assert s["fallbacks"] == 0 and s["versions"] >= 2  # the device is guarded


def test_launch_follows_the_tensors_device_not_the_current_one():
    f = trident.jit(rms_norm, strict=True)
    x, w = _on("cuda:1", 64, 128), _on("cuda:1", 128)
    with torch.cuda.device(1):
        ref = rms_norm(x, w)
        f(x, w)  # capture where eager is well defined
    with torch.cuda.device(0):
        out = f(x, w)  # a hit: runs on cuda:1 (its module, its stream)
    torch.cuda.synchronize(1)
    assert out.device == x.device
    torch.testing.assert_close(out, ref)


def test_current_stream_of_the_tensors_device():
    f = trident.jit(silu, strict=True)
    x = _on("cuda:1", 1 << 20, dtype=torch.float16)
    with torch.cuda.device(1):
        f(x)
        s = torch.cuda.Stream(device=1)
        s.wait_stream(torch.cuda.current_stream(1))
        with torch.cuda.stream(s):
            ref = silu(x)
            out = f(x)
        s.synchronize()
    torch.testing.assert_close(out, ref)


def test_aten_ops_on_mixed_devices_raise_eagers_error():
    def fn(a, b):
        return a + b

    f = trident.jit(fn)
    a, b = _on("cuda:0", 8), _on("cuda:1", 8)
    with pytest.raises(RuntimeError) as eager_err:
        fn(a, b)
    with pytest.raises(RuntimeError) as err:
        f(a, b)
    assert str(err.value) == str(eager_err.value)
    b0 = _on("cuda:0", 8)
    torch.testing.assert_close(f(a, b0), a + b0)  # still compiles valid calls


def _tp_block(x, w1, w2):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    h = silu(x @ w1)  # column-parallel linear, then a Triton kernel on the shard
    return funcol.all_reduce(h @ w2, "sum", dist.group.WORLD)  # row-parallel linear


def _tp_worker(rank, world, port, cache, q):
    try:
        import torch.distributed as dist

        sys.path.insert(0, ROOT)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                          TRIDENT_CACHE_DIR=cache)
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world)
        f = trident.jit(_tp_block, strict=True)
        for step in range(4):
            torch.manual_seed(step)  # the same full weights on every rank
            dev = f"cuda:{rank}"
            x = torch.randn(2, 256, device=dev, dtype=torch.float16)
            w1 = torch.randn(256, 512, device=dev, dtype=torch.float16) * 0.05
            w2 = torch.randn(512, 256, device=dev, dtype=torch.float16) * 0.05
            w1s, w2s = w1.chunk(world, dim=1)[rank], w2.chunk(world, dim=0)[rank]
            got = f(x, w1s, w2s)
            ref = _tp_block(x, w1s, w2s)
            torch.testing.assert_close(got, ref, rtol=2e-3, atol=2e-3)
            full = silu(x @ w1) @ w2
            torch.testing.assert_close(got, full, rtol=2e-2, atol=2e-2)
        st = trident.stats(f)
        assert st["fallbacks"] == 0 and sum(st["hits"]) >= 2, st
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((rank, f"{type(e).__name__}: {e}"))


def test_tensor_parallel_block_nccl_two_processes(spawn_ranks):
    results = spawn_ranks(_tp_worker, 2, timeout=300)
    assert results == {0: "ok", 1: "ok"}, results
