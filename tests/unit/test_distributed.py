"""The collective path on CPU: a column-parallel then row-parallel linear with an
all_reduce (functional collectives, captured by Dynamo into the graph and called
through the dispatcher like any ATen op), under trident.jit in two gloo
processes, equal to eager and to the unsharded computation on both ranks."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tp_linear(x, w1, w2):
    import torch.distributed._functional_collectives as funcol

    h = torch.relu(x @ w1)
    return funcol.all_reduce(h @ w2, "sum", dist.group.WORLD)


def _worker(rank, world, port, cache, q):
    try:
        sys.path.insert(0, ROOT)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                          TRIDENT_CACHE_DIR=cache)
        import trident

        dist.init_process_group("gloo", rank=rank, world_size=world)
        f = trident.jit(tp_linear, strict=True)
        for step in range(3):
            torch.manual_seed(step)  # same full weights on every rank
            x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 8)
            w1s, w2s = w1.chunk(world, dim=1)[rank], w2.chunk(world, dim=0)[rank]
            got = f(x, w1s, w2s)
            torch.testing.assert_close(got, tp_linear(x, w1s, w2s))
            torch.testing.assert_close(got, torch.relu(x @ w1) @ w2, rtol=1e-4, atol=1e-4)
        st = trident.stats(f)
        assert st["fallbacks"] == 0 and sum(st["hits"]) >= 2, st
        dist.destroy_process_group()
        q.put((rank, "ok"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((rank, f"{type(e).__name__}: {e}"))


def test_tensor_parallel_linear_with_all_reduce_gloo(spawn_ranks):
    results = spawn_ranks(_worker, 2, timeout=240)
    assert results == {0: "ok", 1: "ok"}, results
