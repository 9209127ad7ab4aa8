"""benchmarks/flaggems_ops.py end to end on CPU with its stub provider (plain Python wrappers
around ATen): every mode's outputs are checked against eager by the harness itself, and the
skip-guards mode runs on torch.compile's compiled function (its cold call is torch.compile's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_flaggems_ops_stub_pipeline(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "flaggems_ops.py"), "--provider", "stub",
           "--device", "cpu", "--quick", "--iters", "6", "--ops", "add,rms_norm",
           "--modes", "eager,torch,trident,compile,compile_noguard", "--budget-s", "0",
           "--out-dir", str(tmp_path), "--tag", "t", "--date", "d"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # <bench>_<tag>.<ext>, no date in the names (the date is in the report; no matplotlib,
    # no .png)
    names = {p.name for p in tmp_path.iterdir()}
    stem = "flaggems_ops_t"
    allowed = {f"{stem}.{x}" for x in ("json", "md", "png")}
    assert {f"{stem}.json", f"{stem}.md"} <= names <= allowed, names
    raw = json.loads((tmp_path / "flaggems_ops_t.json").read_text())
    assert raw["meta"]["date"] == "d"
    for op in ("add", "rms_norm"):
        modes = raw["ops"][op]["modes"]
        for m in ("eager", "torch", "trident", "compile", "compile_noguard"):
            rec = modes[m]
            assert rec["status"] == "ok", (op, m, rec.get("detail"))
            assert len(rec["shapes"]) == 2, (op, m)
            for s in rec["shapes"]:
                assert s["check"] in ("ok", "no eager reference"), (op, m, s["check"])
                assert len(s["host_us"]) == 6
        assert modes["trident"]["trident"]["status"] == "compiled"
        assert modes["compile_noguard"].get("paired") is True
        for c, n in zip(modes["compile"]["shapes"], modes["compile_noguard"]["shapes"]):
            assert n["cold_host_us"] == c["cold_host_us"]  # one compilation serves both
            assert n["host_us"][1:] != c["host_us"][1:]   # but its own timed calls
    md = (tmp_path / "flaggems_ops_t.md").read_text()
    assert "- date: d" in md
    assert "seconds per mode" in md and "torch.compile's includes compile skip-guards" in md
