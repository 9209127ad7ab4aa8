"""Persisted SCMs: the records, and restoring and saving a function's versions.

After each install (`SCM._install`), `save` writes what a new process needs to serve a
function's versions without Dynamo: each version's host IR (guards, program, result, notes,
reason), its constant pool as plain data (`consts.encode`) and its C unit (compressed), in a
record under the build cache: `<cache>/persist/<key>-<time_ns>-<pid>/record.pkl`, written and
verified as a build's product is (`build.store` / `build.read_verified`: a private folder
renamed into place, a manifest with the SHA-256, folders 0700 and ours; see
docs/cache.md).  One record per key: a writer removes the older ones.

`restore` runs at a function's first miss in a process: it reads the newest record of its key
(`key.function_key`), re-resolves each version's constants (`consts.decode`; a version whose
names do not resolve is dropped), takes their C units from the record (generated again only
for a version whose index changed: the text names its index; either way the capturing
process's text, so `build_scm` finds every object and the linked SCM in the cache and
compiles nothing) and installs them.  A record that does not verify or load is removed with one
warning; any other failure is a miss with one warning, never a crash.  A process does not load
the records it wrote itself (its behaviour stays what it was), and loads at most half of the
function's recompile limit (`loadable`).  `TRIDENT_CACHE=off` turns both directions off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import io
import logging
import os
import pickle
import secrets
import sys
import threading
import time
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from ..codegen.unit import Unit
from ..errors import user_stacklevel
from ..ir import nodes as ir
from ..native import build
from .consts import (BY_NAME, Ctx, NoName, Pending, Unresolved, decode, decode_at, encode,
                     encode_at, load_module, memo)
from .key import FORMAT, environment, function_key

log = logging.getLogger("trident")

KIND = "persist"  # the build cache's kind folder of records
RECORD = "record.pkl"
# This process, so that it does not load its own records.
_PROCESS = secrets.token_hex(8)

_GC_LOCK = threading.Lock()
_GC_PAUSES = [0, False]  # restores running, whether the collector was enabled at the first


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic collector off while a restore decodes and installs (it allocates a few
    thousand acyclic IR objects per version).  Right after a large import (transformers, a
    model), a full collection of the import's garbage is due, and those allocations tipped it
    into the restore (145 ms of Qwen3's 200 ms first call on CPU); paused, it stays due, and
    the program pays it at its next collection as an eager process does.  Nested and threaded
    restores count: the collector is re-enabled by the last one out, if it was on."""
    with _GC_LOCK:
        if _GC_PAUSES[0] == 0:
            _GC_PAUSES[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSES[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES[0] -= 1
            if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
                gc.enable()


# -- versions ------------------------------------------------------------------------------------


def _walk(node, out: dict) -> None:
    """Collect the global names, pooled objects used as sources and identity-guarded constants
    of a version's guards, program and result."""
    if isinstance(node, (tuple, list)):
        for x in node:
            _walk(x, out)
        return
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return
    if isinstance(node, ir.Global):
        out["globals"].add(node.name)
    elif isinstance(node, ir.ConstObj):
        out["objects"].add(node.index)
    elif isinstance(node, ir.IdMatch):
        out["identity"].add(node.const)
        out["paths"].setdefault(node.const, node.source)
    elif isinstance(node, ir.TypeMatch):
        out["paths"].setdefault(node.type_const, ir.TypeOf(node.source))
    for f in dataclasses.fields(node):
        if f.name != "consts":
            _walk(getattr(node, f.name), out)


# Dynamo's aliases of modules in the function's globals (`import_source`): made again here.
_IMPORT_ALIAS = "__import_"


def encode_version(v: ir.Version, ctx: Ctx, unit_text: str | None) -> bytes:
    """A version as the bytes of its record entry, or NoName where it cannot be persisted."""
    ctx = dataclasses.replace(ctx, pool=v.consts)
    seen = {"globals": set(), "identity": set(), "objects": set(), "paths": {}}
    _walk((v.guards, v.program, v.output), seen)
    consts = []
    for i, c in enumerate(v.consts):
        try:
            consts.append(encode(c, ctx))
        except NoName as e:
            if i not in seen["paths"]:
                raise NoName(f"K[{i}]: {e}") from None
            consts.append(encode_at(c, seen["paths"][i], ctx))  # by the path its guard reads
    # An object compared by identity, or read as a source (a live object), must be found by
    # name again; a pooled tensor (a graph constant the program loads) may be a copy.
    for i in seen["identity"] | seen["objects"]:
        node = consts[i] if 0 <= i < len(consts) else ("atom", 0)
        if node[0] not in BY_NAME and not (
                node[0] == "atom" and any(node[1] is x for x in (None, True, False, Ellipsis))
        ) and not (node[0] in ("tensor", "tensor_raw") and i not in seen["identity"]):
            raise NoName(f"K[{i}] is compared by identity or read as a source and is a "
                         "value, not a name")
    installed = {}
    for name in sorted(seen["globals"]):
        if name.startswith(_IMPORT_ALIAS) and name in ctx.globals:
            node = encode(ctx.globals[name], ctx)
            if node[0] != "module":
                raise NoName(f"global {name} is not a module")
            installed[name] = node
    entry = {"ir": dataclasses.replace(v, consts=()), "consts": tuple(consts),
             "installed": installed,
             "unit": hashlib.sha256(unit_text.encode()).hexdigest() if unit_text else None,
             # The unit itself (a restore that keeps the index uses it instead of generating
             # it again: 5-10 ms a version), and whether it was generated with TRIDENT_PROFILE.
             "text": (config.profile(), zlib.compress(unit_text.encode(), 1))
             if unit_text else None}
    return pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)


def decode_version(blob: bytes, ctx: Ctx, index: int) -> tuple:
    """(version renumbered to `index`, the globals to install, its unit's text digest,
    whether it kept its index, its unit's text where the record holds it and it still applies:
    the same index and TRIDENT_PROFILE setting, else None)."""
    entry = _loads(blob)
    v = entry["ir"]
    if not isinstance(v, ir.Version):
        raise Unresolved("not a version")
    # Dynamo's module aliases first: a path may start at one.
    installed = {name: decode(n, ctx) for name, n in entry["installed"].items()}
    for name, obj in installed.items():
        if ctx.globals.get(name, obj) is not obj:
            raise Unresolved(f"global {name} is another object here")
    nodes, done, busy = entry["consts"], {}, set()

    def const(k: int):
        if k not in done:
            if k in busy or not 0 <= k < len(nodes):
                raise Unresolved(f"constant {k} refers to itself")
            busy.add(k)
            n = nodes[k]
            done[k] = decode_at(n, ctx, const, installed) if n[0] == "at" else decode(n, ctx)
        return done[k]

    consts = tuple(const(k) for k in range(len(nodes)))
    same = v.index == index
    text = None
    stored = entry.get("text")
    if same and stored is not None and stored[0] == config.profile():
        text = zlib.decompress(stored[1]).decode()
    return (dataclasses.replace(v, consts=consts, index=index), installed, entry["unit"], same,
            text)


_BUILTINS = {"set", "frozenset", "complex", "slice", "range", "Ellipsis", "NotImplemented"}


class _Unpickler(pickle.Unpickler):
    """Trident's IR classes and plain builtins only (the record is verified before this reads
    it; the allow-list keeps a record to what `save` writes)."""

    def find_class(self, module, name):
        if (module == "builtins" and name in _BUILTINS) or module == "trident" \
                or module.startswith("trident."):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a record")


def _loads(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()


# -- records ------------------------------------------------------------------------------------


@dataclass
class _State:
    """Per SCM (`scm._persist`): what persistence knows of its versions."""

    tried: bool = False       # restore ran (it runs once, at the first miss)
    restoring: bool = False
    key: str | None = None
    # id(version) -> (version, record entry or None, why it is not persisted)
    entries: dict = field(default_factory=dict)
    loaded: dict = field(default_factory=dict)  # id(version) -> version, loaded from disk
    record: Path | None = None  # the record loaded or last written
    content: str | None = None  # digest of its versions
    dropped: list = field(default_factory=list)  # why recorded versions were not loaded
    pending: list = field(default_factory=list)  # (index, blob) of versions waiting for a call
    notes: list = field(default_factory=list)
    warned: bool = False


def _state(scm) -> _State:
    st = scm.__dict__.get("_persist")
    if st is None:
        st = scm.__dict__["_persist"] = _State()
    return st


def _key(scm, st: _State) -> str:
    if st.key is None:
        st.key = function_key(scm)
    return st.key


def _ctx(scm) -> Ctx:
    g = scm.globals
    b = g.get("__builtins__", __builtins__)
    return Ctx(scm.fn, g, b if isinstance(b, dict) else b.__dict__)


def _records(key: str) -> list[Path]:
    """The record folders of `key`, newest first."""
    d = build.cache_root() / KIND
    try:
        names = [e.name for e in os.scandir(d) if e.name.startswith(key + "-")]
    except OSError:
        return []

    def when(name: str) -> int:
        try:
            return int(name.split("-")[1])
        except (IndexError, ValueError):
            return -1

    return [d / n for n in sorted(names, key=when, reverse=True)]


def _warn(scm, st: _State, text: str) -> None:
    if not st.warned:
        st.warned = True
        warnings.warn(f"trident.jit({scm.fn.__qualname__}): {text}", RuntimeWarning,
                      stacklevel=user_stacklevel())


def _read(scm, st: _State, key: str):
    """The newest record of `key` that verifies, as (folder, head), or None.  A record that
    does not verify or load is removed, with one warning."""
    for folder in _records(key):
        data, why = build.read_verified(folder, RECORD)
        head = None
        if data is not None:
            try:
                head = _loads(data)
                if head.get("format") != FORMAT or head.get("key") != key:
                    why, head = "it was written for another key or format", None
            except Exception as e:  # noqa: BLE001 - a record that does not load is a miss
                why, head = f"it does not load ({type(e).__name__}: {e})", None
        if head is None:
            _warn(scm, st, f"not loading the persisted versions in {folder}: {why} "
                           "(removed; the function is captured again)")
            build.discard(folder)
            continue
        if head.get("process") == _PROCESS:
            return None  # this process's own record
        return folder, head
    return None


def loadable(max_versions: int) -> int:
    """How many of a record's versions a process loads: the first half of its recompile limit,
    so that a process whose calls differ from the writer's can still capture its own before the
    limit (loaded versions count against it) makes the function run eagerly."""
    return max(1, max_versions // 2)


def restore(scm) -> bool:
    """On the first miss of `scm` in this process, install the versions an earlier process
    persisted for it.  True if versions were installed or wait for one call (`Pending`: the
    caller calls the function again, and its next miss runs eagerly, then `retry`); False for a
    miss as before (no record, TRIDENT_CACHE=off, or a failure, which warns once)."""
    st = _state(scm)
    if st.tried:
        return False
    st.tried = True
    if scm.versions or scm.fallback_reason is not None or not config.persist():
        return False
    t0 = time.perf_counter()
    old_globals = scm.globals
    try:
        with _collector_paused():
            return _restore(scm, st, t0)
    except Exception as e:  # noqa: BLE001 - a load failure is a miss, never a crash
        scm.globals = old_globals
        log.debug("trident: restoring %s failed", scm.fn.__qualname__, exc_info=True)
        _warn(scm, st, f"not using the persisted versions: {type(e).__name__}: {e}")
        return False


def _restore(scm, st: _State, t0: float) -> bool:
    old_globals = scm.globals
    found = _read(scm, st, _key(scm, st))
    if found is None:
        return False
    folder, head = found
    if head.get("globals") is not None:
        scm.globals = load_module(head["globals"]).__dict__
    blobs = head["versions"][:loadable(scm.options.max_versions)]
    n = _load(scm, st, list(enumerate(blobs)), t0)
    if not n and not st.pending:
        scm.globals = old_globals
        return False
    st.record = folder
    st.content = head.get("content") if n == len(head["versions"]) == len(st.entries) \
        else None
    if head.get("static") and scm.static_after is None:
        scm.static_after = 0
    log.info("trident: %s: %d version(s) loaded from %s in %.3f s (%d waiting for a call)",
             scm.fn.__qualname__, n, folder, time.perf_counter() - t0, len(st.pending))
    return True


def retry(scm) -> bool:
    """Once, at the miss after the one that ran eagerly: load the versions whose paths did not
    resolve at `restore` (library state that call may have built).  True if any installed."""
    st = _state(scm)
    if not st.pending:
        return False
    pending, st.pending = st.pending, []
    try:
        with _collector_paused():
            n = _load(scm, st, pending, time.perf_counter(), last_try=True)
    except Exception as e:  # noqa: BLE001 - a load failure is a miss, never a crash
        log.debug("trident: restoring %s failed", scm.fn.__qualname__, exc_info=True)
        _warn(scm, st, f"not using the persisted versions: {type(e).__name__}: {e}")
        return False
    st.content = None  # the record is rewritten with the order versions have here
    return n > 0


def _load(scm, st: _State, blobs: list, t0: float, last_try: bool = False) -> int:
    """Decode and install `blobs` ((index in the record, blob) pairs) after the SCM's versions;
    those whose paths do not resolve yet go to `st.pending` (unless `last_try`).  The number
    installed."""
    ctx = _ctx(scm)
    versions, units, installs, kept, known = [], [], {}, [], {}
    start = len(scm.versions)
    with memo():  # each object's fingerprint computed once for all the versions
        for i, blob in blobs:
            try:
                v, inst, unit, same, text = decode_version(blob, ctx, start + len(versions))
            except Pending as e:
                if last_try:
                    st.dropped.append(f"version {i} of the record: {e} after a call")
                else:
                    st.pending.append((i, blob))
                    st.notes.append(f"version {i} of the record waits for a call: {e}")
                continue
            except Exception as e:  # noqa: BLE001 - that version is captured again
                st.dropped.append(f"version {i} of the record: {type(e).__name__}: {e}")
                continue
            versions.append(v)
            units.append(unit)
            if text is not None:
                known[id(v)] = Unit(f"version_{v.index}.c", text)
            installs.update(inst)
            kept.append((same, blob))
    if not versions:
        return 0
    for name, obj in installs.items():  # Dynamo's module aliases, as its captures make
        ctx.globals.setdefault(name, obj)
    t1 = time.perf_counter()
    st.restoring = True
    try:
        scm._install(scm.versions + versions,
                     scm._prepare(scm.versions + versions, known) if known else None)
    finally:
        st.restoring = False
    t2 = time.perf_counter()
    for v, (same, blob) in zip(versions, kept):
        st.loaded[id(v)] = v
        if same:
            st.entries[id(v)] = (v, blob, None)
    for v, u, want in zip(scm.versions[start:], getattr(scm, "_units", ())[start:], units):
        if want is not None and hashlib.sha256(u.text.encode()).hexdigest() != want:
            st.notes.append(f"version {v.index}'s regenerated C differs from the capturing "
                            "process's (so its object is not the cached one)")
    n = len(versions)
    scm.stats.compile_seconds.extend(
        {"capture": 0.0, "guards_ir": (t1 - t0) / n, "build": (t2 - t1) / n} for _ in range(n))
    return n


def save(scm) -> None:
    """Persist the versions of `scm` (after an install).  Never raises: a failure warns once."""
    st = _state(scm)
    if st.restoring or not scm.versions or not config.persist():
        return
    try:
        ctx = _ctx(scm)
        units = list(getattr(scm, "_units", ()))
        units += [None] * (len(scm.versions) - len(units))
        blobs = []
        for v, u in zip(scm.versions, units):
            e = st.entries.get(id(v))
            if e is None or e[0] is not v:
                try:
                    e = (v, encode_version(v, ctx, u.text if u is not None else None), None)
                except NoName as why:
                    e = (v, None, str(why))
                st.entries[id(v)] = e
            if e[1] is not None:
                blobs.append(e[1])
        live = {id(v) for v in scm.versions}
        for k in [k for k in st.entries if k not in live]:
            del st.entries[k]
        if not blobs:
            return
        globals_name = None
        if scm.globals is not scm.fn.__globals__:
            globals_name = scm.globals.get("__name__")
            if getattr(sys.modules.get(globals_name), "__dict__", None) is not scm.globals:
                return  # the SCM's globals have no name to find them by
        h = hashlib.sha256(repr((globals_name, scm.static_after is not None)).encode())
        for b in blobs:
            h.update(hashlib.sha256(b).digest())
        content = h.hexdigest()
        if content == st.content:
            return
        key = _key(scm, st)
        head = {"format": FORMAT, "key": key, "module": scm.fn.__module__,
                "qualname": scm.fn.__qualname__, "content": content, "versions": blobs,
                "globals": globals_name, "static": scm.static_after is not None,
                "process": _PROCESS, "pid": os.getpid(), "written": time.time(),
                "environment": environment()}
        data = pickle.dumps(head, protocol=pickle.HIGHEST_PROTOCOL)
        folder = build.store(KIND, f"{key}-{time.time_ns()}-{os.getpid()}", RECORD, data)
        for old in _records(key):  # one record per key: the newest
            if old != folder:
                build.discard(old)
        st.record, st.content = folder, content
    except Exception as e:  # noqa: BLE001 - persisting must never cost the call
        log.debug("trident: persisting %s failed", scm.fn.__qualname__, exc_info=True)
        _warn(scm, st, f"could not persist its versions: {type(e).__name__}: {e}")


# -- seeing inside ------------------------------------------------------------------------------


def note(scm, text: str) -> None:
    """A line for explain's persistence section."""
    _state(scm).notes.append(text)


def origins(scm) -> list[str]:
    """Per version: "disk" (loaded from a record an earlier process wrote) or "captured"."""
    st = scm.__dict__.get("_persist")
    loaded = st.loaded if st is not None else {}
    return ["disk" if loaded.get(id(v)) is v else "captured" for v in scm.versions]


def describe(scm) -> str:
    """The lines `trident.explain` adds: each version's origin, and the record."""
    st = scm.__dict__.get("_persist")
    if not config.persist():
        return "\n  persistence: off (TRIDENT_CACHE=off)"
    out = [f"  persistence: record {st.record if st and st.record else '(none)'}"
           + (" (written once the full-level rebuild is installed: TRIDENT_TIER_UP)"
              if getattr(scm, "_tiering", None) is not None else "")]
    for v, origin in zip(scm.versions, origins(scm)):
        e = st.entries.get(id(v)) if st is not None else None
        line = (f"    version {v.index}: "
                + ("loaded from disk" if origin == "disk" else "captured in this process"))
        if e is not None and e[0] is v and e[1] is None:
            line += f"; not persisted: {e[2]}"
        out.append(line)
    if st is not None:
        out.extend(f"    not loaded: {d}" for d in st.dropped)
        out.extend(f"    note: {n}" for n in st.notes)
    return "\n" + "\n".join(out)
