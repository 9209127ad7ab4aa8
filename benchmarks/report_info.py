"""What every benchmark report states about its run: the commit and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The short hash of HEAD, marked when trident/ has uncommitted changes; BENCH_COMMIT
    where set (device_all.sh sets it: the device's copy may run from an exported tree inside
    a checkout whose git history is older than it)."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                "trident"], cwd=ROOT, capture_output=True, text=True,
                               check=False).stdout
        return rev + (" (with uncommitted changes under trident/)" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(torch, threads: bool = False) -> str:
    """The GPU where CUDA is available, platform, CPU model, core count, torch (and its
    intra-op threads) and Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    t = f" (intra-op threads {torch.get_num_threads()})" if threads else ""
    gpu = ""
    try:
        if torch.cuda.is_available():
            gpu = f"{torch.cuda.get_device_name()}; "
    except Exception as e:  # noqa: BLE001 - a report still names the rest
        gpu = f"GPU not named ({type(e).__name__}); "
    return (f"{gpu}{platform.platform()}; {cpu}; nproc={os.cpu_count()}; torch {torch.__version__}"
            f"{t}; Python {platform.python_version()}")
