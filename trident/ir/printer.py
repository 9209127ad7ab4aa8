"""Text form of a version: what `trident.explain` shows and golden tests pin."""

from __future__ import annotations

from . import nodes as ir


def print_version(v: ir.Version) -> str:
    lines = [f"version {v.index}" + (f"  (captured because: {v.reason})" if v.reason else "")]
    lines.append("  guards:")
    for i, g in enumerate(v.guards):
        lines.append(f"    [{i}] {g}")
        if isinstance(g, ir.ShapeGuard) and g.shared is not None:
            lines.append(f"          computed as {g.shared}")
    if v.env is not None:
        lines.append(f"  {v.env}")
    if v.int_checks:
        lines.append("  ints checked to fit int64 after the guards (else a miss): "
                     + ", ".join(map(str, v.int_checks)))
    if v.eager:
        lines.append(f"  runs eagerly: {v.eager} (the program calls the function in Python)")
    if v.run_mode:
        lines.append(f"  runs under {ir.RUN_MODES[v.run_mode][1]} (the function's own, "
                     "entered natively after the guards)")
    calls = [ins for ins in v.program if isinstance(ins, ir.Call)]
    below = sum(1 for c in calls if c.below)
    if below:
        lines.append(f"  {below} of {len(calls)} operator calls run below the autograd layer "
                     "(no tensor requires grad; functional operators and views that stay "
                     "inside the program)")
    lines.append(f"  program ({v.nslots} slots):")
    for ins in v.program:
        lines.append(f"    {ins}")
    lines.append(f"  return {v.output}")
    return "\n".join(lines)
