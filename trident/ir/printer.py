"""Text form of a version: what `trident.explain` shows and golden tests pin."""

from __future__ import annotations

from . import nodes as ir


def print_version(v: ir.Version) -> str:
    lines = [f"version {v.index}" + (f"  (captured because: {v.reason})" if v.reason else "")]
    lines.append("  guards:")
    for i, g in enumerate(v.guards):
        lines.append(f"    [{i}] {g}")
    lines.append(f"  program ({v.nslots} slots):")
    for ins in v.program:
        lines.append(f"    {ins}")
    lines.append(f"  return {v.output}")
    return "\n".join(lines)
