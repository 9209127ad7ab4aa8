"""TRIDENT_PROFILE=1: versions time their guards and program; explain and stats report it."""

from __future__ import annotations

import torch

import trident
from trident import config


def test_profile_counts_hits_and_misses_and_keeps_results():
    def f(x, y):
        return torch.relu(x * y + 1.0)

    with config.scope(TRIDENT_PROFILE="1"):
        g = trident.jit(f, dynamic=False)
        x, y = torch.randn(8), torch.randn(8)
        torch.testing.assert_close(g(x, y), f(x, y))  # capture: version 0
        for _ in range(3):
            x, y = torch.randn(8), torch.randn(8)
            torch.testing.assert_close(g(x, y), f(x, y))
        a, b = torch.randn(3, 5), torch.randn(3, 5)
        torch.testing.assert_close(g(a, b), f(a, b))  # miss on version 0 -> version 1
        # Counters start at the last build (the one that added version 1).
        for _ in range(5):
            a, b = torch.randn(3, 5), torch.randn(3, 5)
            torch.testing.assert_close(g(a, b), f(a, b))  # version 0 misses, version 1 hits
        for _ in range(7):
            x, y = torch.randn(8), torch.randn(8)
            torch.testing.assert_close(g(x, y), f(x, y))
    p = trident.stats(g)["profile"]
    assert len(p) == 2
    assert p[0]["hits"] == 7 and p[0]["misses"] == 5
    assert p[1]["hits"] == 5 and p[1]["misses"] == 0
    for q in p:
        assert q["guards_us"] > 0 and q["program_us"] > 0
    assert p[0]["miss_us"] > 0
    text = trident.explain(g)
    assert text.count("profile (TRIDENT_PROFILE") == 2


def test_no_profile_by_default():
    def f(x):
        return x + 1

    g = trident.jit(f)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(g(x), f(x))
    assert trident.stats(g)["profile"] == [None]
    assert "profile (TRIDENT_PROFILE" not in trident.explain(g)
