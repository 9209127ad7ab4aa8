"""benchmarks/llm_decode.py end to end on CPU with its stub provider and tiny Qwen3 dimensions:
Trident compiles the operator wrappers and, with --regions, the model's own RMSNorm and MLP
forwards; its generated tokens must equal eager's (the harness compares them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, tag, *extra):
    """llm_decode.py on the stub provider, tiny Qwen3, eager and trident: (output, report)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "llm_decode.py"), "--provider", "stub",
           "--tiny", "--models", "qwen3", "--modes", "eager,trident", "--warmup", "2",
           "--requests", "1", "--max-versions", "64", "--tag", tag, "--out-dir", str(tmp_path),
           *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # one report per tag, no date in the names (the date is inside the report)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(n.startswith(f"llm_decode_{tag}") for n in names), names
    md = (tmp_path / f"llm_decode_{tag}.md").read_text()
    assert "- date: " in md and "commit: " in md
    return out, md


def test_llm_decode_stub_with_regions(tmp_path):
    out, md = _run(tmp_path, "t", "--regions", "norm,mlp", "--new-tokens", "6")
    lat = [ln for ln in md.splitlines() if ln.startswith("| qwen3 | ") and " | trident | " in ln
           and ("same" in ln or "MISMATCH" in ln)]
    assert len(lat) == 3, md  # one row per prompt set
    assert all("same" in ln for ln in lat), lat
    assert "trident qwen3 Qwen3RMSNorm.forward: compiled" in out, out[-4000:]
    assert "trident qwen3 Qwen3MLP.forward: compiled" in out, out[-4000:]
    assert "FELL BACK" not in out
    assert "- order: interleaved" in md


def test_llm_decode_stub_decoder_layer_region(tmp_path):
    """--regions layer: the decoder layer's forward (KV-cache update included) under Trident;
    tokens equal eager's, the layer compiled (its cache stores replayed, not a fallback)."""
    out, md = _run(tmp_path, "l", "--regions", "layer", "--prompts", "mmlu,gsm8k",
                   "--new-tokens", "5")
    lat = [ln for ln in md.splitlines() if ln.startswith("| qwen3 | ") and " | trident | " in ln
           and ("same" in ln or "MISMATCH" in ln)]
    assert len(lat) == 2 and all("same" in ln for ln in lat), md
    assert "trident qwen3 Qwen3DecoderLayer.forward: compiled" in out, out[-4000:]
    assert "FELL BACK" not in out


def test_llm_decode_stub_whole_model_region(tmp_path):
    """--regions model,layer: Qwen3ForCausalLM.forward (every layer, the KV-cache update, the
    CausalLMOutputWithPast it returns) under Trident; tokens equal eager's, the model compiled
    and served the measured requests without a miss (the layer region it encloses is reached
    by no warm-up call: dropped as unverified, installed through the same wrapper)."""
    out, md = _run(tmp_path, "m", "--regions", "model,layer", "--prompts", "mmlu,gsm8k",
                   "--new-tokens", "5", "--torch-profile")
    lat = [ln for ln in md.splitlines() if ln.startswith("| qwen3 | ") and " | trident | " in ln
           and ("same" in ln or "MISMATCH" in ln)]
    assert len(lat) == 2 and all("same" in ln for ln in lat), md
    model = [ln for ln in md.splitlines() if ln.startswith("| qwen3 | Qwen3ForCausalLM.forward")]
    assert len(model) == 1 and "| compiled:" in model[0], md
    assert "during the measured requests" not in model[0], model
    assert "dropped (not called during warm-up: unverified)" in md
    assert "FELL BACK" not in out
    # --torch-profile: one profiled request per mode; the native program's ATen calls go
    # through the dispatcher, so Trident's table lists them as eager's does
    prof = (tmp_path / "llm_decode_m_profile.md").read_text()
    for mode in ("eager", "trident"):
        part = prof.split(f"## qwen3/{mode}:")[1].split("## ")[0]
        assert "| aten::mm |" in part and "| aten::mul |" in part, part


def test_stalled_tokens_are_reported():
    """A measured token far over its request's median ITL (an autotune or a compile inside a
    measured request) is listed in the report; ordinary jitter is not."""
    import random
    import statistics

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llm_decode as ld

    rng = random.Random()
    itl = [0.01 * (1 + 0.5 * rng.random()) for _ in range(30)]
    k = rng.randrange(len(itl))
    itl[k] = 0.8
    stalled = ld.ModeRun("eager", "qwen3", requests=[
        ld.Request("mmlu", 0, 5, list(range(31)), 0.02, itl, 0.02 + sum(itl))])
    calm = ld.ModeRun("trident", "qwen3", requests=[
        ld.Request("mmlu", 0, 5, list(range(31)), 0.02, itl[:k] + itl[k + 1:] + [0.012],
                   0.5)])
    lines = ld.stalls([stalled, calm])
    hits = [ln for ln in lines if ln.startswith("- ")]
    assert hits == [f"- qwen3/eager mmlu[0]: token {k + 2} took 800.0 ms "
                    f"(median {statistics.median(itl) * 1e3:.2f} ms)"], lines
    assert ld.stalls([calm])[-1].startswith("none")


def test_captures_after_the_warm_up_are_listed_with_their_reason():
    """A capture after the warm-up (in a measured request) is listed with the guard that
    failed, from the wrapper's explain text; the warm-up's own captures are not."""
    import torch

    import trident

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llm_decode as ld

    w = trident.jit(lambda x: x * 2 + 1)
    for n in (3, 4, 5):  # the warm-up: a static version, then a dynamic one
        w(torch.randn(n))
    run = ld.ModeRun("trident", "qwen3", explain={"mm": trident.explain(w)},
                     warm_versions={"mm": trident.stats(w)["versions"]})
    assert ld.late_captures([run])[-1].startswith("none: "), ld.late_captures([run])
    x = torch.randn(2, 3)  # a measured request with a new rank
    assert torch.equal(w(x), x * 2 + 1)
    run.explain["mm"] = trident.explain(w)
    lines = ld.late_captures([run])
    late = [ln for ln in lines if ln.startswith("- ")]
    v = trident.stats(w)["versions"] - 1
    assert len(late) == 1 and late[0].startswith(f"- qwen3/mm version {v}: "), lines
    assert "failed guard" in late[0] and "tensor_match" in late[0], late


def test_llm_decode_stub_settle_requests(tmp_path):
    """The warm-up ends by replaying the first measured prompt of each set in the measured
    configuration, so that no Trident capture happens inside a measured request: the first
    warm-up prompt's version (static in its length) is captured by that request and first runs
    natively on the replay, where one of its bmm calls (an attention bmm whose argument is a view
    of a 4-d base) matches none of the bmm wrapper's versions captured from eager calls. Without
    the replay that capture falls in the first measured request (CPU, 2026-12-03)."""
    _, md = _run(tmp_path, "s", "--regions", "model", "--warmup", "6", "--new-tokens", "6")
    assert "the last 3, one per set, in the measured configuration" in md, md
    section = md.split("## Measured requests", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| qwen3 | trident | ")]
    assert len(rows) == 3, md
    for ln in rows:
        measured, settle = ln.split(" | ")[3:5]
        assert measured != "-" and settle.rstrip(" |") != "-", ln
        assert "miss" not in measured, ln
    assert "same (1/1)" in md and "MISMATCH" not in md.split("## torch reference")[0], md


def test_warmup_drops_a_candidate_that_fails_where_eager_does_not():
    """The warm-up filter drops a mode's wrapper that raises where the eager wrapper runs (as
    torch 2.11's C++ wrapper does on `aten::_grouped_mm`): that call and the later ones return
    the eager wrapper's outputs; an error the eager wrapper raises too propagates."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llm_decode as ld
    import torch

    calls = {"cand": 0}

    def base(x):
        if x.numel() == 0:
            raise ValueError("empty input")
        return x * 2 + 1

    def cand(x):
        calls["cand"] += 1
        raise RuntimeError("C++ compile error | aoti shim missing")

    rec = ld.OpTiming(record=True)
    shim = ld.timing_shim(cand, base, rec)
    for _ in range(3):
        x = torch.randn(5)
        assert torch.equal(shim(x), base(x))
    assert calls["cand"] == 1  # never called again once it failed
    v = rec.verdict()
    assert v.startswith("dropped (failed: RuntimeError: C++ compile error / aoti"), v
    with pytest.raises(ValueError, match="empty input"):
        ld.timing_shim(lambda x: x, base, ld.OpTiming())(torch.empty(0))
    rec2 = ld.OpTiming()
    with pytest.raises(ValueError, match="empty input"):
        ld.timing_shim(cand, base, rec2)(torch.empty(0))
    assert not rec2.failed  # eager's own error: not the candidate's failure


def test_warmup_failed_stateful_candidate_leaves_eagers_cache_state():
    """A region that updates the KV cache: when the mode's wrapper fails halfway (after it
    changed the cache), the cache is restored and the eager wrapper's update is the one kept."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llm_decode as ld
    import torch

    class Layer:
        def __init__(self):
            self.keys = torch.zeros(2)

    class DynamicCache:
        def __init__(self):
            self.layers = [Layer()]

    def base(x, past_key_values):
        past_key_values.layers[0].keys = torch.cat([past_key_values.layers[0].keys, x])
        return x + 1

    def cand(x, past_key_values):
        past_key_values.layers[0].keys = torch.full((7,), 9.0)  # a half-done update
        raise RuntimeError("compile failed")

    for first in (1, 2):  # the candidate runs first on odd calls, second on even ones
        rec = ld.OpTiming(calls=first - 1)
        shim = ld.timing_shim(cand, base, rec, stateful=True)
        cache = DynamicCache()
        x = torch.randn(3)
        out = shim(x, past_key_values=cache)
        assert torch.equal(out, x + 1)
        assert torch.equal(cache.layers[0].keys, torch.cat([torch.zeros(2), x]))
        assert rec.verdict().startswith("dropped (failed: RuntimeError: compile failed")


def test_trident_full_mode_is_trident_without_below_autograd(tmp_path):
    """--modes ...,trident_full: the same Trident wrappers with TRIDENT_BELOW_AUTOGRAD=0 while
    the mode runs (the below-autograd A/B in one interleaved run); its versions put no operator
    below the autograd layer, trident's do, and both keep eager's tokens."""
    _, md = _run(tmp_path, "ab", "--modes", "eager,trident,trident_full", "--prompts", "mmlu",
                 "--new-tokens", "3")
    rows = [ln for ln in md.splitlines() if ln.startswith("| qwen3 | mmlu | trident")]
    assert len(rows) == 2 and all("same (1/1)" in ln for ln in rows), md
    assert "| vs trident_full |" in md
    text = (tmp_path / "llm_decode_ab_trident.txt").read_text()
    sections = {s.splitlines()[0]: s for s in text.split("### ")[1:]}
    full = [s for h, s in sections.items() if h.endswith("(trident_full)")]
    plain = [s for h, s in sections.items() if not h.endswith("(trident_full)")]
    assert full and plain
    assert not any("run below the autograd" in s for s in full)
    assert any("run below the autograd" in s for s in plain)


def test_default_report_names_follow_the_models():
    """Without --tag the report is named after its models (results/latest/llm_decode_qwen3.md
    for a FlagGems run of Qwen3), with the provider and --tiny when they differ from the full
    run's, and without a date."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llm_decode as ld

    assert ld.default_tag(["qwen3"], "flaggems", False) == "qwen3"
    assert ld.default_tag(["deepseek_v2"], "flaggems", False) == "deepseek_v2"
    assert ld.default_tag(["qwen3", "deepseek_v2"], "stub", True) == "qwen3_deepseek_v2_stub_tiny"
    a = ld.parse_args([])
    assert Path(a.out_dir) == ROOT / "benchmarks" / "results" / "latest"
