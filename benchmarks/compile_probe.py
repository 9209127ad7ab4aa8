"""Where the C compile of a version's unit spends its time (issue 30: a miss's largest phase).

    python benchmarks/compile_probe.py --units 'GLOB' [--top N] [--reps R] [--out FILE]

GLOB names compiled version units in a Trident cache (e.g.
'/tmp/trident_miss_profile_*/obj/*/version_*.c', what benchmarks/miss_profile.py leaves).  For
the N largest distinct units, each compile is rerun R times in the unit's own build folder (its
headers beside it) from the command the build ran (`cmd.txt`), changed one way at a time:

- `as built`: the command itself (with the precompiled prelude where the build used it);
- `-O0` / `-O1` / `-O2`: that optimisation level, with a precompiled prelude made for it;
- `no pch`: the build's level without the precompiled prelude;
- `-S`: to assembly only (the difference to `as built` is the assembler);
- `syntax`: `-fsyntax-only` (parsing and checking: the front end, prelude loading included);
- `empty`: the same command on an empty unit (the compiler's start and the prelude's load).
- one column per `--flags` set: the build's command with those flags added.

Medians in ms.  The report also lists the largest unit's top gcc passes (`-ftime-report`).
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import report_info  # noqa: E402


def _time(cmd: list, cwd: Path, reps: int) -> float | None:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
        out.append(time.perf_counter() - t)
        if p.returncode != 0:
            print(shlex.join(cmd), p.stderr[-2000:], sep="\n", flush=True)
            return None
    return statistics.median(out) * 1000


def _without_include(cmd: list) -> list:
    out, skip = [], False
    for c in cmd:
        if skip:
            skip = False
            continue
        if c == "-include":
            skip = True
            continue
        out.append(c)
    return out


def _with_opt(cmd: list, opt: str) -> list:
    return [opt if c in ("-O0", "-O1", "-O2", "-O3") else c for c in cmd]


def _pch_args(cache: Path, opt: str) -> list:
    """The `-include` arguments of a precompiled prelude for `opt` in `cache` (built there)."""
    from trident import config
    from trident.native import build

    with config.scope(TRIDENT_CACHE_DIR=str(cache), TRIDENT_VERSION_OPT=opt):
        build._pch_state.clear()
        return build._prelude_pch(opt)


def _command(unit: Path, scratch: Path) -> list:
    """The command that compiled `unit` (in a private folder since renamed), writing to
    `scratch`."""
    cmd = shlex.split((unit.parent / "cmd.txt").read_text().splitlines()[0])
    cmd = [str(unit) if c.endswith("/" + unit.name) else c for c in cmd]
    return cmd[:cmd.index("-o") + 1] + [str(scratch / "out.o")] + cmd[cmd.index("-o") + 2:]


def probe(unit: Path, reps: int, scratch: Path, flags: list) -> dict:
    folder = unit.parent
    cmd = _command(unit, scratch)
    cache = folder.parent.parent  # <cache>/obj/<hash>/version_N.c
    opt = next(c for c in cmd if c.startswith("-O"))
    bare = _without_include(cmd)
    row = {"unit": unit.name, "chars": len(unit.read_text()),
           "pch": len(bare) != len(cmd), "opt": opt}
    row["as built"] = _time(cmd, folder, reps)
    for o in ("-O0", "-O1", "-O2"):
        row[o] = _time(_with_opt(bare, o)[:1] + _pch_args(cache, o) + _with_opt(bare, o)[1:],
                       folder, reps)
    row["no pch"] = _time(bare, folder, reps)
    row["-S"] = _time([("-S" if c == "-c" else c) for c in cmd[:-1]] + [str(scratch / "o.s")],
                      folder, reps)
    syntax = [c for c in cmd if c != "-c"]
    syntax = syntax[:syntax.index("-o")] + syntax[syntax.index("-o") + 2:] + ["-fsyntax-only"]
    row["syntax"] = _time(syntax, folder, reps)
    empty = scratch / unit.name
    empty.write_text('#include "scm_prelude.h"\n')
    row["empty"] = _time([str(empty) if c == str(unit) else c for c in cmd], folder,
                         reps)
    for f in flags:  # the build's command with these flags added
        row[f] = _time(cmd[:1] + f.split() + cmd[1:], folder, reps)
    return row


def passes(unit: Path, scratch: Path, top: int = 10) -> list[str]:
    folder = unit.parent
    cmd = _command(unit, scratch)
    p = subprocess.run(cmd + ["-ftime-report"], cwd=folder, capture_output=True, text=True,
                       check=False)
    lines = [ln for ln in p.stderr.splitlines() if ":" in ln and "(" in ln]

    def wall(ln: str) -> float:
        try:
            return float(ln.split(":", 1)[1].split()[4])
        except (IndexError, ValueError):
            return 0.0

    return sorted(lines, key=wall, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", required=True)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--flags", default="",
                    help="';'-separated flag sets, each a column: the build's command with them "
                         "added (e.g. '-fno-stack-protector;-pipe')")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    units, seen = [], set()
    for u in sorted((Path(p) for p in glob.glob(a.units)), key=lambda p: -p.stat().st_size):
        text = u.read_text()
        if text in seen or not (u.parent / "cmd.txt").exists():
            continue
        seen.add(text)
        units.append(u)
    units = units[:a.top]
    if not units:
        sys.exit(f"no compiled units match {a.units}")
    import torch

    scratch = Path(tempfile.mkdtemp(prefix="compile_probe_"))
    flags = [f.strip() for f in a.flags.split(";") if f.strip()]
    rows = [probe(u, a.reps, scratch, flags) for u in units]
    cols = ["as built", "-O0", "-O1", "-O2", "no pch", "-S", "syntax", "empty", *flags]
    fmt = lambda v: "failed" if v is None else f"{v:.0f}"  # noqa: E731
    lines = [
        "# Compile time of version units", "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- commit: {report_info.commit()}",
        f"- machine: {report_info.machine(torch)}",
        f"- compiler: {subprocess.run([os.environ.get('CC', 'cc'), '--version'], capture_output=True, text=True).stdout.splitlines()[0]}",
        f"- command: `python benchmarks/compile_probe.py {' '.join(sys.argv[1:])}`", "",
        f"Median ms of {a.reps} compiles (see the docstring for the columns).", "",
        "| unit | chars | built | " + " | ".join(cols) + " |",
        "|---|---:|---|" + "---:|" * len(cols),
    ]
    for r in rows:
        lines.append(f"| {r['unit']} | {r['chars']} | {r['opt']}{' pch' if r['pch'] else ''} | "
                     + " | ".join(fmt(r[c]) for c in cols) + " |")
    lines += ["", f"gcc passes of {units[0]} (`-ftime-report`, by wall time):", "", "```",
              *passes(units[0], scratch), "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
        import tarfile

        with tarfile.open(Path(a.out).with_suffix(".units.tgz"), "w:gz") as tar:
            for u in units:  # the units themselves, for reading elsewhere
                tar.add(u, arcname=f"{u.parent.name[:8]}_{u.name}")


if __name__ == "__main__":
    main()
