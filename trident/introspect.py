"""Seeing inside an SCM: the text of `trident.explain`, the counters `trident.stats` reports
(per-version profile, environment guards, eager paths), the files TRIDENT_DUMP_DIR receives,
and what a failed global-state guard changed.

Everything here reads an SCM (`scm.SCM`) and its installed native module; nothing changes
them.  (Not named `explain.py`: `trident.explain` is the public function, and a submodule of
that name would shadow it as an attribute of the package.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import config, eager
from .ir import nodes as ir
from .ir.printer import print_version

if TYPE_CHECKING:
    from .scm import SCM


def explain(scm: SCM) -> str:
    """Each version of the function: its hits and last failed guard, compile times, profile,
    environment guards, notes, host IR and selecting launches; the SCM's path."""
    mod = scm.function._module
    stats = mod.stats() if mod is not None else [(0, -1)] * len(scm.versions)
    stats = [(h, f) for h, (_, f) in zip(scm.hits(), stats)]
    n_eager = sum(1 for v in scm.versions if v.eager)
    out = [f"trident.jit({scm.fn.__qualname__}): {len(scm.versions)} version(s)"
           + (f" ({n_eager} running eagerly)" if n_eager else "")
           + f", {scm.stats.misses} miss(es), {scm.stats.fallbacks} eager fallback(s)"]
    if scm.fallback_reason:
        out.append(f"  runs eagerly: {scm.fallback_reason}")
    elif scm.limit_reason:
        out.append(f"  {scm.limit_reason}: {scm.stats.eager_past_limit} call(s) matched no "
                   "version and ran eagerly, uncaptured (the versions keep serving)")
    if scm._pending is not None or scm.stats.eager_while_building:
        out.append(("  a new version is being compiled in the background"
                    if scm._pending is not None else "  background builds")
                   + f" (TRIDENT_BACKGROUND_BUILD): {scm.stats.eager_while_building} call(s) "
                   "missed while one was compiled and ran eagerly")
    if scm._tiering is not None or scm.stats.tier_ups:
        out.append(f"  TRIDENT_TIER_UP: {scm.stats.tier_ups} build(s) at full optimisation "
                   "installed in the background" + ("; one in flight now (its versions are "
                   "served by units compiled at -O0 meanwhile)" if scm._tiering is not None
                   else ""))
    for src, calls in scm.stats.eager_float_values.items():
        out.append(f"  float {src}: the versions hold TRIDENT_FLOAT_VALUES={config.float_values()} "
                   f"of its values; {calls} call(s) with another value ran eagerly, "
                   "uncaptured")
    for key, entry in scm.negatives.items():
        out.append(f"  calls with {eager.describe_key(key)} run eagerly without a capture "
                   f"({entry.calls} since): {entry.reason}")
    if scm.so_path:
        out.append(f"  SCM: {scm.so_path}  (dispatcher source, command and log beside it; "
                   "the command names each version's object, its source beside it)")
    times = scm.stats.compile_seconds + [None] * len(scm.versions)
    prof = profile(scm)
    envs = env_guards(scm)
    for v, (hits, failed), t, p, e in zip(scm.versions, stats, times, prof, envs):
        line = f"  hits={hits}" + (f" last failed guard=[{failed}]" if failed >= 0 else "")
        if t is not None:
            line += (f"  compiled in {sum(t.values()):.2f} s (capture {t['capture']:.2f}, "
                     f"guards+IR {t['guards_ir']:.2f}, C build+load {t['build']:.2f})")
        out.append(line)
        if p is not None:
            fmt = lambda x: "-" if x is None else f"{x:.2f} us"  # noqa: E731
            out.append(f"  profile (TRIDENT_PROFILE, since the last build): guards "
                       f"{fmt(p['guards_us'])}, program {fmt(p['program_us'])} per hit; "
                       f"{p['misses']} call(s) missed here, {fmt(p['miss_us'])} each")
        if e is not None and e["live"] < 0:
            out.append(f"  environment guards: {e['guards']}; their last evaluation failed "
                       + ("(cached: it fails again while what the failed guard read holds)"
                          if e["cached"] else "(not cached)"))
        elif e is not None:
            out.append(f"  environment guards: {e['guards']}, checked through {e['records']} "
                       f"version-tag records ({'cached' if e['cached'] else 'not cached'}); "
                       f"{e['live']} of them read what no tag covers and run on every call")
        out.extend(f"  note: {n}" for n in v.notes)
        out.append(print_version(v))
        for launch, res in launch_resolvers(v):
            out.append(f"    {launch.kernel}: {res.summary()}")
            for key, cfg in list(res.configs.items())[:8]:
                out.append(f"      key {key}: {cfg}")
            if len(res.configs) > 8:
                out.append(f"      ... {len(res.configs) - 8} more keys")
            for key, why in list(res.python_only.items())[:4]:
                out.append(f"      key {key} launches through Triton: {why}")
    return "\n".join(out)


def eager_paths(scm: SCM) -> list:
    """The paths that run eagerly: per eager version its index, why and its hits; per
    negative entry its key (as text), why, and the calls it has served."""
    hits = scm.hits()
    out = [{"version": v.index, "reason": v.eager, "hits": h}
           for v, h in zip(scm.versions, hits) if v.eager]
    out += [{"version": None, "key": eager.describe_key(k), "reason": e.reason,
             "hits": e.calls} for k, e in scm.negatives.items()]
    return out


def profile(scm: SCM) -> list:
    """Per version, from the counters of versions generated with TRIDENT_PROFILE=1 (since
    the SCM was last built): mean microseconds in its guards and in its program per hit,
    and its misses with the mean microseconds its guards took on one.  None for a version
    that was not generated with profiling or has not run."""
    mod = scm.function._module
    if mod is None:
        return [None] * len(scm.versions)
    out = []
    for (hits, _), (ng, npg, nm, nsm, *_env) in zip(mod.stats(), mod.profile()):
        if not (hits or nm) or not (ng or npg or nsm):
            out.append(None)
            continue
        out.append({"hits": hits, "guards_us": ng / hits / 1e3 if hits else None,
                    "program_us": npg / hits / 1e3 if hits else None,
                    "misses": nm, "miss_us": nsm / nm / 1e3 if nm else None})
    return out


def env_guards(scm: SCM) -> list:
    """Per version, its environment guards (sources that start at a global or a
    constant), evaluated as one block and re-evaluated only when something they read
    changed: how many, the records their last evaluation left (dicts, classes, class
    tags, instance dicts), how many of them read something no record covers and run on
    every call (-1: the last evaluation failed), and whether the block is cached now.
    None before the block first ran."""
    mod = scm.function._module
    if mod is None:
        return [None] * len(scm.versions)
    out = []
    for (*_t, n, recs, live, valid) in mod.profile():
        out.append(None if n == 0 else
                   {"guards": n, "records": recs, "live": live, "cached": bool(valid)})
    return out


def launch_resolvers(v: ir.Version) -> list:
    """(TritonLaunch, Resolver) for each selecting launch of a version."""
    return [(ins, v.consts[ins.select.resolver_const]) for ins in v.program
            if isinstance(ins, ir.TritonLaunch) and ins.select is not None]


# -- TRIDENT_DUMP_DIR --------------------------------------------------------------------------


def dump_version(qualname: str, v: ir.Version, cap) -> None:
    """Write a new version's ATen graph and Dynamo guards (`cap`: its capture, None for an
    eager version) and its host IR to the dump folder, if one is configured."""
    if config.dump_dir() is None:
        return
    name = f"{qualname}.v{v.index}"
    if cap is not None:
        dump_text(f"{name}.aten.txt", cap.aten_graph.print_readable(print_output=False)
                  if cap.aten_graph is not None else "")
        dump_text(f"{name}.guards.txt", "\n".join(
            f"{e.guard_type} {e.name}" for e in cap.guard_entries))
    dump_text(f"{name}.ir.txt", print_version(v))


def dump_text(name: str, text: str) -> None:
    """Write `text` as `name` in the dump folder, if one is configured."""
    d = config.dump_dir()
    if d is None:
        return
    d.mkdir(parents=True, exist_ok=True)
    (d / name.replace("<", "_").replace(">", "_")).write_text(text)


# -- what a failed global-state guard changed --------------------------------------------------


def state_words(snapshot: bytes) -> tuple:
    """The int64 words of a global-state snapshot (the runtime's `global_state()`)."""
    return tuple(int.from_bytes(snapshot[i * 8:(i + 1) * 8], "little", signed=True)
                 for i in range(len(snapshot) // 8))


_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
           torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
           torch.bool)


def global_state_diff(rt, at_capture: tuple, now: tuple) -> str:
    """What differs between a version's global-state snapshot and the current one, word by
    word, by name: '<name>: <at capture> at capture, <now> now'; a thread-local dispatch key
    set by the keys it gained or lost."""
    names = rt.global_state_names()
    dtypes = {rt.enum_code(d): str(d).removeprefix("torch.") for d in _DTYPES}
    out = []
    for i, (a, b) in enumerate(zip(at_capture, now)):
        if a == b:
            continue
        name = names[i] if i < len(names) and names[i] else f"word {i}"
        if "dispatch keys" in name:
            ua, ub = a & (2**64 - 1), b & (2**64 - 1)
            delta = [f"+{rt.keyset_str(ub & ~ua)}" if ub & ~ua else "",
                     f"-{rt.keyset_str(ua & ~ub)}" if ua & ~ub else ""]
            out.append(f"{name}: {' '.join(d for d in delta if d)} since the capture")
        elif "ScalarType" in name:
            out.append(f"{name}: {dtypes.get(a, a)} at capture, {dtypes.get(b, b)} now")
        else:
            out.append(f"{name}: {a} at capture, {b} now")
    return "; ".join(out) or "no word differs now"
