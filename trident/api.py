"""`trident.jit` and `trident.explain`: the user-facing surface."""

from __future__ import annotations

import functools
import inspect

from . import config, introspect, persist
from .introspect import launch_resolvers
from .scm import SCM, Options, wait_all


def jit(fn=None, *, strict: bool | None = None, max_versions: int | None = None,
        dynamic: bool | None = None):
    """Compile `fn` into a Specialization Cache Module.

    Usable as `@trident.jit`, `@trident.jit(strict=True)` or `trident.jit(fn)`.

    Options:
      strict:       raise `UnsupportedError` (or the `BuildError`) instead of
                    falling back to eager (default: env TRIDENT_STRICT, else False).
      max_versions: the recompile limit; past it the function runs eagerly
                    with one warning (default: env TRIDENT_MAX_VERSIONS, 16).
      dynamic:      as in torch.compile: None lets Dynamo make a dimension
                    dynamic once it changes, True makes sizes dynamic from the
                    first capture, False always specializes.

    The returned object is a native callable: a call whose guards match one
    captured version runs without entering Python.
    """
    if fn is None:
        return functools.partial(jit, strict=strict, max_versions=max_versions,
                                 dynamic=dynamic)
    if not inspect.isfunction(fn):
        raise TypeError(f"trident.jit expects a Python function, got {type(fn).__name__}")
    if config.disabled():
        return fn
    opts = Options(
        strict=config.strict() if strict is None else strict,
        max_versions=config.max_versions() if max_versions is None else max_versions,
        dynamic=dynamic,
    )
    scm = SCM(fn, opts)
    f = scm.function
    functools.update_wrapper(f, fn)
    f.__signature__ = inspect.signature(fn)
    f._trident_scm = scm
    return f


def _scm_of(f) -> SCM:
    scm = getattr(f, "_trident_scm", None)
    if scm is None:
        raise TypeError(f"{f!r} is not a trident.jit function")
    return scm


def explain(f) -> str:
    """Each version of `f`: why it was captured, its guards, host IR, hits,
    and the path of the generated SCM (with its C source beside it); last,
    whether each version was captured here or loaded from disk."""
    scm = _scm_of(f)
    return introspect.explain(scm) + persist.describe(scm)


def wait(f=None, timeout: float | None = None) -> bool:
    """Wait until `f`'s builds in the background are installed: a version compiled there
    (TRIDENT_BACKGROUND_BUILD) and the SCM rebuilt at full optimisation after a miss
    (TRIDENT_TIER_UP); every function's, and the build cache's first-use trim, when `f` is
    None; at most `timeout` seconds.  Returns whether no build is pending any more; with none
    in flight it returns at once."""
    if f is None:
        return wait_all(timeout)
    return _scm_of(f).wait(timeout)


def versions(f) -> list:
    """The host-IR versions of `f`, in dispatch order."""
    return list(_scm_of(f).versions)


def stats(f):
    """Counters: misses, captures, fallbacks, per-version hits, the paths that
    run eagerly and why, and the C units its rebuilds compiled (those found in
    the build cache excluded)."""
    scm = _scm_of(f)
    hits = scm.hits()
    eager_paths = introspect.eager_paths(scm)
    return {"misses": scm.stats.misses, "captures": scm.stats.captures,
            "fallbacks": scm.stats.fallbacks, "versions": len(scm.versions), "hits": hits,
            # why the whole function runs eagerly, or else why calls that match no version
            # do (the recompile limit), or else why its first eager path does
            "fallback_reason": scm.fallback_reason or scm.limit_reason or next(
                (e["reason"] for e in eager_paths), None),
            "runs_eagerly": scm.fallback_reason is not None,  # the whole function
            # past the recompile limit: its reason, and the calls that matched no version
            # since (they ran eagerly, uncaptured; the versions keep serving the others)
            "recompile_limit": scm.limit_reason,
            "eager_past_limit": scm.stats.eager_past_limit,
            # TRIDENT_FLOAT_VALUES: {float's source: calls with another value of it, run
            # eagerly once the versions held that many of its values}
            "eager_float_values": dict(scm.stats.eager_float_values),
            # the paths that run eagerly: {"version" (None for a negative entry), "reason",
            # "hits", and "key" for a negative entry}
            "eager_paths": eager_paths,
            "compiled_units": list(scm.stats.compiled_units),
            # TRIDENT_BACKGROUND_BUILD: whether a version is being compiled now, and how
            # many calls missed meanwhile (they ran eagerly)
            "building": scm._pending is not None,
            "eager_while_building": scm.stats.eager_while_building,
            # TRIDENT_TIER_UP: whether the installed SCM (some units at -O0) is being built
            # again at full optimisation now, and how many such builds were installed
            "tiering_up": scm._tiering is not None,
            "tier_ups": scm.stats.tier_ups,
            # per version: "disk" (loaded from a record an earlier process persisted) or
            # "captured" (in this process)
            "origins": persist.origins(scm),
            # per version: seconds of its miss in capture (Dynamo and the capturing
            # run), guards_ir (guards, host IR, Triton kernel lookup), build (C, load)
            "compile_seconds": [dict(t) for t in scm.stats.compile_seconds],
            # per miss that installed a version: seconds in capture (Dynamo and the capturing
            # run), guards, lower, codegen, compile (C units), link, load, persist
            "miss_phases": [dict(t) for t in scm.stats.miss_phases],
            # per version, with TRIDENT_PROFILE=1: mean us in guards / program per hit,
            # misses and mean us of guards on a miss (None without profiling)
            "profile": introspect.profile(scm),
            # per version: its environment guards, their version-tag records, how many run
            # on every call, whether the block is cached (None before it first ran)
            "env_guards": introspect.env_guards(scm),
            # per selecting (autotuned) launch: keys seen ("variants"), the distinct
            # kernels they map to, native-table misses (resolver calls), runs of the
            # user's autotuner
            "launch_variants": [
                {"version": v.index, "kernel": ins.kernel, "variants": len(res.table),
                 "kernels": len(res.kernels),
                 "table_misses": res.calls, "autotuner_runs": res.tuned,
                 "python_only_keys": len(res.python_only)}
                for v in scm.versions for ins, res in launch_resolvers(v)]}
