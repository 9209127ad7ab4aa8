"""Every TRIDENT_* environment knob, typed, in one place.

Read at use (not at import) so tests can change them with `scope()`.
The table in docs/env_vars.md lists the same knobs.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    doc: str


KNOBS = {
    k.name: k
    for k in (
        Knob("TRIDENT_CACHE_DIR", "", "Where built runtimes and SCMs are kept "
             "(default: ~/.cache/trident)."),
        Knob("TRIDENT_CACHE_MAX_MB", "1024", "Size limit of the build cache in MiB: beyond it "
             "the least recently used builds are evicted (0: no limit; see docs/cache.md)."),
        Knob("TRIDENT_CACHE", "on", "off: no persisted SCMs: a new process neither loads the "
             "versions an earlier process persisted for a function nor persists its own "
             "(compiled objects stay cached; see docs/cache.md)."),
        Knob("TRIDENT_DUMP_DIR", "", "If set, every capture writes its ATen graph, "
             "guards, host IR and C source there."),
        Knob("TRIDENT_CC", "", "C compiler for SCMs (default: $CC, then cc)."),
        Knob("TRIDENT_VERSION_OPT", "-O1", "Optimisation level of a version's C unit: -O0, "
             "-O1 or -O2 (units over 150,000 characters: -O0 always)."),
        Knob("TRIDENT_POW2_BUCKETS", "1", "1: while capturing, `triton.next_power_of_2` of a "
             "dynamic size is traced as comparisons: the version guards the size's "
             "power-of-two range and gets the power as a constant (see docs/internals.md); "
             "0: Dynamo traces Triton's bit arithmetic (fewer versions where the power stays "
             "symbolic, seconds more per capture)."),
        Knob("TRIDENT_BACKGROUND_BUILD", "0", "1: a miss returns once its version is "
             "captured (the capturing call's own result) and the version's C is compiled and "
             "loaded in a background thread; until it is installed, calls that miss run "
             "eagerly (see docs/internals.md); trident.wait(f) waits for it.  Strict mode "
             "always builds at the miss."),
        Knob("TRIDENT_TIER_UP", "1", "1: a miss (and a load from disk) links a new version's "
             "unit compiled at -O0 unless its object at TRIDENT_VERSION_OPT is cached, serves "
             "it at once, and builds the SCM again at TRIDENT_VERSION_OPT in a background "
             "thread, which replaces it when done (trident.wait(f) waits for that); 0: the "
             "miss compiles at TRIDENT_VERSION_OPT."),
        Knob("TRIDENT_CXX", "", "C++ compiler for the runtime (default: $CXX, then c++)."),
        Knob("TRIDENT_STRICT", "0", "1: raise instead of falling back to eager "
             "(the default for jit(strict=None))."),
        Knob("TRIDENT_MAX_VERSIONS", "16", "Default recompile limit per function."),
        Knob("TRIDENT_DYNAMIC_FLOATS", "1", "1: a float argument that takes a second value "
             "is captured once more as a dynamic float (Dynamo's automatic dynamic: one "
             "version for every value but NaN), where the function only computes with it; "
             "a branch on its value gives a version per side; where it does more (it reaches "
             "a tensor or a Triton launch, or Dynamo guards on it with more than comparisons "
             "and arithmetic), and "
             "with 0, floats are specialised (a version per value)."),
        Knob("TRIDENT_FLOAT_VALUES", "4", "Where a float is specialised: once a function's "
             "versions hold this many values of one float (an argument such as a sampling "
             "temperature, or a global), a call that misses on another value of it runs "
             "eagerly, uncaptured, so that a float that changes per call neither pays a "
             "capture per value nor uses up the recompile limit; 0: no such limit."),
        Knob("TRIDENT_DISABLE", "0", "1: trident.jit returns functions that run eagerly."),
        Knob("TRIDENT_BOXED_ONLY", "0", "1: call every ATen operator through the boxed "
             "dispatcher, without the runtime's typed fast paths (read by the runtime at "
             "SCM load; for benchmarks)."),
        Knob("TRIDENT_PROFILE", "0", "1: versions generated from then on time their guards "
             "and their program (clock reads at entry, after the guards and at exit); "
             "trident.explain and trident.stats(f)[\"profile\"] report the mean per call "
             "(for finding where a call's time goes)."),
        Knob("TRIDENT_REUSE_BUFFERS", "1", "1: an elementwise add/sub/mul/relu/neg whose "
             "first argument is a dead intermediate of the same dtype, sizes and strides runs "
             "in place on it (no allocation; not for sizes 0 or 1, only where no autograd "
             "records); 0: never "
             "(read at capture)."),
        Knob("TRIDENT_BELOW_AUTOGRAD", "1", "1: in a version where no autograd records, "
             "functional ATen operators and views that stay inside the program run "
             "below the autograd layer, as ATen's autograd kernels redispatch (no per-operator "
             "autograd and view-tracking work); 0: every operator takes the full path "
             "(read at capture)."),
        Knob("TRIDENT_ASSERT_NO_RECOMPILE", "0", "1: a specialization miss after the "
             "first version raises RecompileError (for tests and serving)."),
    )
}


def _get(name: str) -> str:
    return os.environ.get(name, KNOBS[name].default)


def cache_dir() -> Path:
    d = _get("TRIDENT_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "trident"


def cache_max_mb() -> float:
    return float(_get("TRIDENT_CACHE_MAX_MB") or 0)


def persist() -> bool:
    return _get("TRIDENT_CACHE").lower() not in ("off", "0")


def dump_dir() -> Path | None:
    d = _get("TRIDENT_DUMP_DIR")
    return Path(d) if d else None


def c_compiler() -> str:
    return _get("TRIDENT_CC") or os.environ.get("CC") or "cc"


def version_opt() -> str:
    v = _get("TRIDENT_VERSION_OPT")
    return v if v in ("-O0", "-O1", "-O2") else KNOBS["TRIDENT_VERSION_OPT"].default


def pow2_buckets() -> bool:
    return _get("TRIDENT_POW2_BUCKETS") == "1"


def background_build() -> bool:
    return _get("TRIDENT_BACKGROUND_BUILD") == "1"


def tier_up() -> bool:
    return _get("TRIDENT_TIER_UP") == "1"


def cxx_compiler() -> str:
    return _get("TRIDENT_CXX") or os.environ.get("CXX") or "c++"


def strict() -> bool:
    return _get("TRIDENT_STRICT") == "1"


def max_versions() -> int:
    return int(_get("TRIDENT_MAX_VERSIONS"))


def dynamic_floats() -> bool:
    return _get("TRIDENT_DYNAMIC_FLOATS") != "0"


def float_values() -> int:
    return int(_get("TRIDENT_FLOAT_VALUES"))


def disabled() -> bool:
    return _get("TRIDENT_DISABLE") == "1"


def profile() -> bool:
    return _get("TRIDENT_PROFILE") == "1"


def reuse_buffers() -> bool:
    return _get("TRIDENT_REUSE_BUFFERS") == "1"


def below_autograd() -> bool:
    return _get("TRIDENT_BELOW_AUTOGRAD") == "1"


def assert_no_recompile() -> bool:
    return _get("TRIDENT_ASSERT_NO_RECOMPILE") == "1"


@contextlib.contextmanager
def scope(**values: str):
    """Temporarily set knobs, e.g. `scope(TRIDENT_STRICT="1")`."""
    old = {k: os.environ.get(k) for k in values}
    for k in values:
        if k not in KNOBS:
            raise KeyError(f"unknown Trident knob {k}")
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
