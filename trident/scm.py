"""The Specialization Cache Module: versions, miss handling, rebuilds.

The object users call is a native `trident.Function` (trident_rt_types.cpp).  On
each call it binds the arguments and enters the installed SCM, which tries
its versions in order.  Only a miss comes here (`SCM.miss`): capture a new
version with Dynamo, rebuild the SCM with every version (only the new
version's C unit and the small dispatcher are compiled: the other versions'
objects come from the build cache), and install it under the same callable.
The missing call returns its own result.  An exception raised by a
version's operators propagates as eager's exception and never reaches this
file.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import logging
import os
import re
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import config, eager, introspect, persist
from .capture.dynamo import FLOATS_SPECIALISED, capture
from .codegen import c as cgen
from .errors import BuildError, CaptureError, RecompileError, UnsupportedError, user_stacklevel
from .guards.translate import ConstPool, SourceConverter, dynamo_wrapped, translate
from .ir import nodes as ir
from .ir import passes
from .ir.lower import lower
from .native import build

log = logging.getLogger("trident")


@dataclass
class Options:
    strict: bool = False
    max_versions: int = 16
    dynamic: object = None  # None (automatic, as torch.compile), True, False


@dataclass
class Stats:
    misses: int = 0
    captures: int = 0
    fallbacks: int = 0  # refused captures (paths that run eagerly) and whole-function fallbacks
    build_paths: list = field(default_factory=list)
    compiled_units: list = field(default_factory=list)  # C units compiled, over all builds
    # per installed version, in dispatch order: seconds its miss spent in each stage
    compile_seconds: list = field(default_factory=list)
    # per miss that installed a version (captured or eager), in order: seconds in each
    # finer phase (see SCM._phase): capture (Dynamo's trace and Trident's checks), run (the
    # capturing call's operators and launches, Triton JIT compiles included: what eager
    # runs too), guards, lower, codegen, compile, link, load, persist.  Timed with perf_counter around stages the miss runs anyway: no hit cost.
    miss_phases: list = field(default_factory=list)
    # calls that missed while a version was built in the background, run eagerly
    eager_while_building: int = 0
    # calls that matched no version after the recompile limit was reached, run eagerly
    eager_past_limit: int = 0
    # SCMs rebuilt at full optimisation in the background and installed (TRIDENT_TIER_UP)
    tier_ups: int = 0
    # TRIDENT_FLOAT_VALUES: the float's source -> calls that missed on another value of it
    # once the versions held that many, run eagerly
    eager_float_values: dict = field(default_factory=dict)


# Past the recompile limit, how many calls matching no version are counted before the hits
# are compared with them (SCM._past_limit_check).
PAST_LIMIT_WINDOW = 128


class SCM:
    def __init__(self, fn, options: Options):
        self.fn = fn
        self.options = options
        self.versions: list[ir.Version] = []
        self.lock = threading.RLock()
        # Why the whole function runs eagerly (None while the SCM serves calls).
        self.fallback_reason: str | None = None
        # Set when the recompile limit was reached: the versions keep serving the calls they
        # match, and a call that matches none runs eagerly, uncaptured.
        self.limit_reason: str | None = None
        self._past_window = 0  # past the limit: misses since the last check, and the hits
        self._window_hits = 0  # counted then (SCM._past_limit_check)
        # Refused paths whose guards are not translatable: call key -> eager.NegativeEntry.
        self.negatives = eager.NegativeEntries()
        self._eager_keys: set = set()  # the call keys the eager versions were made from
        # Set when versions were loaded from disk: the next miss runs eagerly, uncaptured.
        self._restored_miss_eager = False
        self._warned: set = set()  # reasons already warned of (numbers left out)
        self._float_eqs: dict = {}  # see _index_float_eqs
        # Index of the first version whose capture found that this function's Triton
        # launches need static shapes; from then on misses capture statically.
        self.static_after: int | None = None
        self._warned_mode = False
        self.stats = Stats()
        self._source = None  # codegen.c.SCMSource of the installed SCM
        self._units: list = []  # codegen.c.Unit per installed version (text never changes)
        self.so_path: Path | None = None
        self._dispatcher_obj: Path | None = None  # the SCM's dispatcher object (discard_scm)
        self.rt = build.runtime_module()
        self._tls = threading.local()
        self._hit_base: list[int] = []  # hits of versions counted by earlier SCMs
        self._phases: dict = {}  # the current miss's phase times (Stats.miss_phases)
        self._pending: _Build | None = None  # the background build (TRIDENT_BACKGROUND_BUILD)
        self._tiering: _TierUp | None = None  # the full-level rebuild in flight (TRIDENT_TIER_UP)
        self.function = self.rt.Function(fn, self._miss_entry)
        # The globals dict the versions' global guards read: the function's own, or, where
        # Dynamo traces it through a wrap_inline frame (a torch decorator's wrapper), that
        # frame's (see guards.translate.dynamo_wrapped).
        self.globals = fn.__globals__
        self._signature = inspect.signature(fn)

    # -- the miss path -------------------------------------------------------
    def _miss_entry(self, *args, **kwargs):
        if self.limit_reason is not None and self.fallback_reason is None:
            # Past the recompile limit: no capture, no lock, eager's call (its errors too).
            self.stats.eager_past_limit += 1
            self._past_window += 1
            if self._past_window >= PAST_LIMIT_WINDOW:
                self._past_limit_check()
            return self.fn(*args, **kwargs)
        if self._float_eqs and self.fallback_reason is None:
            churn = self._float_churn()
            if churn is not None:  # TRIDENT_FLOAT_VALUES: eager's call, no lock, no capture
                if config.assert_no_recompile():
                    raise RecompileError(f"{self.fn.__qualname__}: specialization miss "
                                         f"(float {churn} has a value no version holds)")
                n = self.stats.eager_float_values
                n[churn] = n.get(churn, 0) + 1
                return self.fn(*args, **kwargs)
        # Remember which SCM this thread missed in, before waiting for the lock.
        self._tls.module = self.function._module
        try:
            return self.miss(*args, **kwargs)
        finally:
            self._tls.module = None

    def miss(self, *args, **kwargs):
        if self._pending is None:
            with self.lock:
                # (again: another thread's miss may have started a build while this one
                # waited for the lock)
                if self._pending is None:
                    return self._miss_locked(args, kwargs)
        # A version is being compiled in the background (TRIDENT_BACKGROUND_BUILD): the call
        # runs eagerly, uncaptured, without the lock the build installs under.
        self.stats.eager_while_building += 1
        return self.fn(*args, **kwargs)

    def _miss_locked(self, args, kwargs):
        # The first miss in this process: the versions an earlier process persisted.
        if persist.restore(self):
            self._restored_miss_eager = True
            return self.function(*args, **kwargs)
        # Another thread may have installed a version serving this call
        # while this one waited for the lock: try the SCM once more.
        if self.versions and not getattr(self._tls, "retrying", False) \
                and self.function._module is not self._tls_module():
            self._tls.retrying = True
            try:
                return self.function(*args, **kwargs)
            finally:
                self._tls.retrying = False
        return self._miss(args, kwargs)

    def _tls_module(self):
        return getattr(self._tls, "module", None)

    def _miss(self, args, kwargs):
        if self.fallback_reason is not None:
            return self.fn(*args, **kwargs)
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError:
            return self.fn(*args, **kwargs)  # raises eager's own TypeError
        nlocals = _native_locals(self.fn.__code__)
        if nlocals > self.rt.MAX_LOCALS:
            return self._fall_back(f"the function has {nlocals} parameters and free variables; "
                                   f"the native binder takes at most {self.rt.MAX_LOCALS}",
                                   args, kwargs)
        if torch._C._len_torch_function_stack():
            return self._under_mode(args, kwargs, "a torch function mode is active")
        if torch._C._len_torch_dispatch_stack():
            return self._under_mode(args, kwargs, "a torch dispatch mode is active")
        # Read before the call, which may change its arguments.
        key = eager.call_key(self._signature, args, kwargs, self.rt.global_state())
        neg = self.negatives.get(key)
        if neg is not None and not neg.retries:  # a refused path, guards not translatable
            neg.calls += 1
            return self.fn(*args, **kwargs)
        if neg is not None:  # its capture once more: see _refused
            neg.retries -= 1
        reason = self._miss_reason()
        self.stats.misses += 1
        if self._restored_miss_eager:
            # The first miss after loading versions from disk runs eagerly, uncaptured: a
            # library that builds state on its first call in a process (FlagGems generates
            # and caches its pointwise kernels) then meets the loaded version's guards on the
            # next call, without Dynamo.  A second miss captures.
            self._restored_miss_eager = False
            persist.note(self, f"the first miss after loading ({reason}) ran eagerly, "
                         "without a capture")
            return self.fn(*args, **kwargs)
        if persist.retry(self):  # versions whose paths that eager call may have built
            return self.function(*args, **kwargs)
        if self.versions and config.assert_no_recompile():
            raise RecompileError(f"{self.fn.__qualname__}: specialization miss ({reason})")
        if len(self.versions) + len(self.negatives) >= self.options.max_versions:
            result = self.fn(*args, **kwargs)  # eager's own error, if any, stays an error
            return self._limit_reached(
                f"recompile limit max_versions={self.options.max_versions} reached "
                f"(last miss: {reason})", result)
        if self.versions:
            log.info("trident: recompiling %s: %s", self.fn.__qualname__, reason)
        t0 = time.perf_counter()
        try:
            cap = capture(self.fn, args, kwargs, dynamic=self._capture_dynamic(),
                          global_state_fn=self.rt.global_state,
                          pow2_buckets=not self._pow2_symbolic(),
                          specialize_float=self._floats_specialised())
        except CaptureError as e:
            # Either the user's code raises (eager raises the same) or Dynamo
            # cannot capture it.  Run eagerly: its exception, if any, is the
            # one the user must see (strict mode too), and an error adds no version.  The
            # path runs eagerly from now on.
            t = time.perf_counter() - t0
            result = self.fn(*args, **kwargs)
            self._refused(f"capture failed: {e}", getattr(e, "guards", None), key, reason, t,
                          retry=True)
            return result
        except UnsupportedError as e:
            self._refused(str(e), getattr(e, "guards", None), key, reason,
                          time.perf_counter() - t0)
            if hasattr(e, "result"):  # the capturing call ran
                return e.result
            # refused before anything ran: the call runs eagerly
            return self.fn(*args, **kwargs)
        self.stats.captures += 1
        self.negatives.discard(key)  # a retried capture that worked
        if cap.triton_needs_static and self.static_after is None:
            self.static_after = len(self.versions)
            cap = cap.with_note("later misses capture with static shapes at once")
        t1 = time.perf_counter()
        # capture: Dynamo's trace and Trident's checks; run: the capturing call itself
        self._phases = {"capture": t1 - t0 - cap.run_seconds, "run": cap.run_seconds}
        try:
            version = self._make_version(cap, reason)
            if cap.pow2_bucketed:
                version = self._pow2_twin(version)
            t2 = time.perf_counter()
            if config.background_build() and not self.options.strict:
                # codegen here (its errors are the miss's); compile and load in a thread
                versions = self.versions + [version]
                self._build_later(_Build(versions, self._prepare(versions), cap, key, reason,
                                         t1 - t0, t2 - t1, self._phases))
                self._phases = {}
                return cap.result
            self._install(self.versions + [version])
            t3 = time.perf_counter()
            self.stats.compile_seconds.append(
                {"capture": t1 - t0, "guards_ir": t2 - t1, "build": t3 - t2})
            self.stats.miss_phases.append(self._phases)
            self._phases = {}
        except _FunctionWide as e:
            return self._fall_back(str(e), None, None, result=cap.result)
        except UnsupportedError as e:
            # A guard Trident does not translate, or a path it cannot lower or generate: the
            # path runs eagerly (under its guards where they translate).
            self._refused(str(e), cap, key, reason, t1 - t0)
            return cap.result
        except BuildError as e:
            if self.options.strict:
                raise
            log.error("trident: %s", e)
            # The path runs eagerly; where the compiler fails on the eager version's small
            # unit too, the whole function does.
            self._refused(_compiler_failed(e), cap, key, reason, t1 - t0)
            return cap.result
        except Exception as e:  # noqa: BLE001 - a Trident bug must not cost the user's call
            if self.options.strict:
                raise
            log.exception("trident: internal error while building a version of %s",
                          self.fn.__qualname__)
            self._refused(f"internal error: {type(e).__name__}: {e}", cap, key, reason, t1 - t0)
            return cap.result
        return cap.result

    def _capture_dynamic(self):
        """Dynamic setting of the next capture.  Once a dynamic attempt of this function had
        to be redone with static shapes because a Triton launch's autotune key or heuristics
        read a dynamic size, later misses capture with static shapes at once: the dynamic
        trace would be thrown away again (for a FlagGems pointwise operator it cost 3-4 s
        of a 5 s miss on the H200).  Static capture is always valid; it only specializes
        more (one version per shape, as the retry gives anyway)."""
        return False if self.static_after is not None else self.options.dynamic

    def _floats_specialised(self) -> bool:
        """Whether this function's captures specialise floats from the start: one of its
        versions had to (a dynamic float reached what a version cannot compute with or guard
        on: `capture`), so another capture would trace twice to find the same."""
        return any(n.startswith(FLOATS_SPECIALISED) for v in self.versions for n in v.notes)

    def _pow2_symbolic(self) -> bool:
        """Whether this function's captures keep `triton.next_power_of_2` symbolic: one of its
        versions (captured here or loaded from disk) says so (see _pow2_twin)."""
        return any(n.startswith(_POW2_SYMBOLIC) for v in self.versions for n in v.notes)

    def _pow2_twin(self, v: ir.Version) -> ir.Version:
        """`v`, captured with `triton.next_power_of_2` of a dynamic size taken as its
        power-of-two range (TRIDENT_POW2_BUCKETS), noted as such.  Where an earlier such
        version differs from it only in its size guards, the power only chose between
        guards (FlagGems' pointwise tile size, `min(512, next_power_of_2(numel))`): each
        range would cost a version, so later captures of the function keep the power
        symbolic, which Dynamo traces slower (seconds) into one version for every range.
        Where the power reaches the program (a Triton block size), versions differ and
        buckets stay: a symbolic trace would specialize per range anyway."""
        notes = (*v.notes, _POW2_NOTE)  # the power was taken as a constant in this capture
        twin = next((o for o in self.versions if _POW2_NOTE in o.notes
                     and _same_but_sizes(o, v)), None)
        if twin is not None:
            notes += (f"{_POW2_SYMBOLIC}: version {twin.index} differs from this one only "
                      "in its size guards",)
        return dataclasses.replace(v, notes=notes)

    def _use_scope(self, scope) -> None:
        """The globals dict of the frame Dynamo traced must be the SCM's (see __init__)."""
        if scope is not None and scope is not self.globals:
            if not self.versions and dynamo_wrapped(self.fn):
                self.globals = scope
            else:
                raise _FunctionWide("Dynamo traced the function in a frame whose globals "
                                    "are not the function's")

    def _make_version(self, cap, reason: str) -> ir.Version:
        self._use_scope(getattr(cap, "global_scope", None))
        t0 = time.perf_counter()
        consts = ConstPool()
        guards = translate(cap.guard_entries, cap, self.fn, consts, self.rt)
        t1 = time.perf_counter()
        conv = SourceConverter(self.fn, consts, cap.installed_globals)
        program, output, nslots = lower(cap, conv, consts, self.rt, guards)
        v = ir.Version(index=len(self.versions), guards=guards, program=program,
                       output=output, nslots=nslots, consts=tuple(consts.objs),
                       reason=reason, notes=tuple(cap.notes),
                       run_mode=getattr(cap, "run_mode", 0))
        v = passes.run(v)  # the decisions between lowering and codegen (ir/passes)
        self._phase("guards", t1 - t0)
        self._phase("lower", time.perf_counter() - t1)  # lowering and the passes
        introspect.dump_version(self.fn.__qualname__, v, cap)
        return v

    def _phase(self, name: str, seconds: float) -> None:
        """Add `seconds` to phase `name` of the current miss (Stats.miss_phases)."""
        self._phases[name] = self._phases.get(name, 0.0) + seconds

    def _prepare(self, versions: list, known: dict | None = None) -> tuple:
        """The C of an SCM of `versions` and its constants tuple: (units, source, consts).
        A version's unit depends on that version alone: the text of those already
        installed is reused, and of those in `known` ({id(version): Unit}: a restore's units
        as the capturing process generated them); only the others are generated."""
        t0 = time.perf_counter()
        old_units = {id(v): u for v, u in zip(self.versions, self._units)}
        if known:
            old_units.update(known)
        units = [old_units.get(id(v)) or cgen.generate_version(v, config.profile())
                 for v in versions]
        src = cgen.SCMSource(tuple(units), cgen.generate_dispatcher(
            versions, f"{self.fn.__module__}.{self.fn.__qualname__}"))
        consts = cgen.consts_tuple(self.globals, _builtins_of(self.globals), versions)
        self._phase("codegen", time.perf_counter() - t0)
        return units, src, consts

    def _install(self, versions: list, prepared: tuple | None = None, built=None,
                 quick: bool | None = None) -> None:
        """Build (unless `built`: a `build.SCMBuild` of `prepared`), load and install the SCM
        of `versions`, then persist it.  `quick` (default: TRIDENT_TIER_UP): a unit not cached
        at its level is compiled at -O0, and the SCM is built again at full level in a
        thread (`_tier_up_later`)."""
        units, src, consts = prepared if prepared is not None else self._prepare(versions)
        if quick is None:
            quick = config.tier_up()
        for attempt in (0, 1):
            if built is None or attempt:
                built = build.build_scm(src, quick=quick)
                self._phase("compile", built.compile_s)
                self._phase("link", built.link_s)
            self.stats.compiled_units += built.compiled
            so = built.so
            t0 = time.perf_counter()
            try:
                module = self.rt.load_scm(str(so), consts)
                self._phase("load", time.perf_counter() - t0)
                break
            except ImportError:
                # Another process of this user evicted or replaced the build between its
                # verification and this load: verify (and so rebuild) once more.
                if attempt:
                    raise
        old = self.function._module
        if old is not None:
            for i, (hits, _) in enumerate(old.stats()):
                self._hit_base[i] += hits
        self._hit_base += [0] * (len(versions) - len(self._hit_base))
        # Only now, with the whole new SCM loaded, does the callable switch.
        self.function._install(module)
        self._index_float_eqs(versions)
        self.versions = versions
        self._units = units
        self._source = src
        old_so, self.so_path = self.so_path, so
        old_dispatcher, self._dispatcher_obj = self._dispatcher_obj, built.dispatcher
        if old_so is not None and old_so != so:  # superseded: this process keeps its mapping
            build.discard_scm(old_so, old_dispatcher if old_dispatcher != built.dispatcher
                              else None)
        self.stats.build_paths.append(str(so))
        if config.dump_dir() is not None:
            introspect.dump_text(f"{self.fn.__qualname__}.scm.c", self.c_source)
        if built.provisional:  # the full-level rebuild persists (off the miss's path)
            self._phase("persist", 0.0)
            self._tier_up_later((units, src, consts))
            return
        t0 = time.perf_counter()
        persist.save(self)  # what a new process needs to serve these versions (never raises)
        self._phase("persist", time.perf_counter() - t0)

    # -- full-level rebuilds (TRIDENT_TIER_UP) ----------------------------------
    def _tier_up_later(self, prepared: tuple) -> None:
        """Build the installed SCM (`prepared`, some of its units linked at -O0) again at
        full level in a thread, and install it in its place if it is still the installed
        one then.  Calls keep being served meanwhile; nothing waits for it but `wait`."""
        job = _TierUp(prepared)
        self._tiering = job
        _building.add(self)
        thread = threading.Thread(target=self._tier_up, args=(job,),
                                  name=f"trident-tier-up:{self.fn.__qualname__}")
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (interpreter shutting down): stay at -O0
            self._tier_up_done(job)
            persist.save(self)

    def _tier_up(self, job: "_TierUp") -> None:
        built = None
        src = job.prepared[1]
        try:
            with _BUILD_SLOTS:
                if self._source is src and self.fallback_reason is None:
                    built = build.build_scm(src, cancelled=lambda: self._source is not src)
        except Exception:  # noqa: BLE001 - the -O0 build keeps serving
            log.warning("trident: rebuilding %s at full optimisation failed; its -O0 build "
                        "keeps serving", self.fn.__qualname__, exc_info=True)
        with self.lock:  # (also while `_tiering` is cleared: a miss may start the next one)
            try:
                if self._tiering is job and self.fallback_reason is None \
                        and self._source is src:  # else superseded: the newer SCM tiers up
                    self._tier_up_install(job, built)
            finally:
                self._tier_up_done(job)

    def _tier_up_install(self, job: "_TierUp", built) -> None:
        """Under the lock: install the full-level build, or persist the -O0 one."""
        phases, self._phases = self._phases, {}
        try:
            if built is not None:
                self._install(self.versions, job.prepared, built, quick=False)
                self.stats.tier_ups += 1
                return  # (which persisted it)
        except Exception:  # noqa: BLE001 - as in _tier_up
            log.warning("trident: installing %s's full-optimisation build failed; its -O0 "
                        "build keeps serving", self.fn.__qualname__, exc_info=True)
        finally:
            self._phases = phases
        if self._source is job.prepared[1]:
            persist.save(self)  # not rebuilt: the -O0 build is what persists

    def _tier_up_done(self, job: "_TierUp") -> None:
        if self._tiering is job:
            self._tiering = None
            if self._pending is None:
                _building.discard(self)
        job.done.set()

    # -- background builds (TRIDENT_BACKGROUND_BUILD) ---------------------------
    def _build_later(self, job: "_Build") -> None:
        """Compile, load and install `job`'s SCM in a thread; the miss returns meanwhile.
        Until it is installed, calls that miss run eagerly (`miss`)."""
        self._pending = job
        _building.add(self)
        thread = threading.Thread(target=self._build_in_background, args=(job,),
                                  name=f"trident-build:{self.fn.__qualname__}")
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (interpreter shutting down): build here
            self._build_in_background(job)

    def _build_in_background(self, job: "_Build") -> None:
        error = built = None
        t0 = time.perf_counter()
        try:
            with _BUILD_SLOTS:  # at most one build per core at a time
                built = build.build_scm(job.prepared[1])
        except Exception as e:  # noqa: BLE001 - handled under the lock below, as a miss does
            error = e
        with self.lock:
            if self._pending is not job:  # forgotten: a forked child (_forget_builds)
                job.done.set()
                return
            try:
                self._phases = job.phases
                if built is not None:
                    self._phase("compile", built.compile_s)
                    self._phase("link", built.link_s)
                self._finish_build(job, error, built, t0)
            finally:
                self._phases = {}
                self._pending = None
                if self._tiering is None:
                    _building.discard(self)
                job.done.set()

    def _finish_build(self, job: "_Build", error, built, t0: float) -> None:
        try:
            if error is not None:
                raise error
            if job.versions[:-1] == self.versions:
                self._install(job.versions, job.prepared, built)
            else:  # the installed versions changed meanwhile (not expected): build afresh
                self._install(self.versions + job.versions[-1:])
            self.stats.compile_seconds.append({"capture": job.t_capture,
                                               "guards_ir": job.t_guards_ir,
                                               "build": time.perf_counter() - t0})
            self.stats.miss_phases.append(self._phases)
        except BuildError as e:
            log.error("trident: %s", e)
            self._refused(_compiler_failed(e), job.cap, job.key, job.reason, job.t_capture)
        except Exception as e:  # noqa: BLE001 - as in _miss: the path runs eagerly
            log.exception("trident: internal error while building a version of %s",
                          self.fn.__qualname__)
            self._refused(f"internal error: {type(e).__name__}: {e}", job.cap, job.key,
                          job.reason, job.t_capture)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for this function's background builds (TRIDENT_BACKGROUND_BUILD's, then a
        full-level rebuild's: TRIDENT_TIER_UP); whether none is pending now."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in range(3):  # a background build's install may start a tier-up
            job = self._pending or self._tiering
            if job is None:
                return True
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.done.wait(left):
                return False
        return self._pending is None and self._tiering is None

    @property
    def c_source(self) -> str | None:
        """The installed SCM's C: every unit as one listing (made on demand: N versions'
        text kept per rebuild would grow as N^2)."""
        return self._source.text() if self._source is not None else None

    def _refused(self, why: str, path_guards, key, reason: str, t_capture: float,
                 retry: bool = False) -> None:
        """A capture refused for a reason of its path (`why`): that path runs eagerly from now
        on, the others stay native.  Under the guards Dynamo recorded for it (`path_guards`: a
        `capture.dynamo.PathGuards` or a `Capture`) it becomes an eager version; where those
        guards do not translate, or there are none, or an eager version made from the same
        call key did not serve it again (its own run changed what its guards read, such as a
        list it appends to), a negative entry keyed on the call (`key`).  A negative entry
        for a capture Dynamo stopped in (`retry`) is captured once more at its next call,
        warning only if that fails too: the eager run after the failed capture may have built
        what Dynamo stopped at (a library's lazily generated and cached kernels).  One warning
        per reason; strict mode raises.  The caller runs the call (or returns its result)."""
        if self.options.strict:  # TRIDENT_STRICT was folded in by jit()
            raise UnsupportedError(f"trident.jit({self.fn.__qualname__}): {why}")
        self.stats.fallbacks += 1
        t1 = time.perf_counter()
        try:
            if path_guards is None:
                raise UnsupportedError("Dynamo recorded no guards for it")
            if key is not None and key in self._eager_keys:
                raise UnsupportedError("its eager version did not serve the same call again")
            self._use_scope(getattr(path_guards, "global_scope", None))
            consts = ConstPool()
            guards = translate(path_guards.guard_entries, path_guards, self.fn, consts, self.rt)
            v = passes.run(eager.eager_version(self.fn, len(self.versions), guards, consts,
                                               why=why, reason=reason))
            introspect.dump_version(self.fn.__qualname__, v, None)
            t2 = time.perf_counter()
            self._phases = {"capture": t_capture, "guards": t2 - t1}
            self._install(self.versions + [v])
            self.stats.compile_seconds.append({"capture": t_capture, "guards_ir": t2 - t1,
                                               "build": time.perf_counter() - t2})
            self.stats.miss_phases.append(self._phases)
            self._phases = {}
            self._eager_keys.add(key)
        except _FunctionWide as e:
            self._fall_back(str(e), None, None)
            return
        except UnsupportedError as e:
            # The path's guards cannot serve natively: calls with this key run eagerly.
            entry, new = self.negatives.add(
                key, why if str(e) == why else
                f"{why} (and its guards cannot be checked natively: {e})",
                retries=1 if retry else 0)
            if new and entry is not None and entry.retries:
                return  # warned if its capture fails again
        except BuildError as e:
            log.error("trident: %s", e)
            self._fall_back(_compiler_failed(e), None, None)
            return
        except Exception as e:  # noqa: BLE001 - as in _miss: the call still runs eagerly
            log.exception("trident: internal error while building an eager version of %s",
                          self.fn.__qualname__)
            self._fall_back(f"internal error: {type(e).__name__}: {e}", None, None)
            return
        said = re.sub(r"\d+", "N", why)  # a path's reason again, for another size or length
        if said not in self._warned:
            self._warned.add(said)
            warnings.warn(f"trident.jit({self.fn.__qualname__}): this path runs eagerly "
                          f"(other paths stay native): {why}", RuntimeWarning,
                          stacklevel=user_stacklevel())

    def _fall_back(self, reason: str, args, kwargs, result=None):
        """The whole function runs eagerly from now on (a function-wide reason)."""
        if self.options.strict:  # TRIDENT_STRICT was folded in by jit()
            raise UnsupportedError(f"trident.jit({self.fn.__qualname__}): {reason}")
        self.stats.fallbacks += 1
        if self.fallback_reason is None:
            self.fallback_reason = reason
            warnings.warn(f"trident.jit({self.fn.__qualname__}) runs eagerly from now on: "
                          f"{reason}", RuntimeWarning, stacklevel=user_stacklevel())
            old = self.function._module
            if old is not None:  # keep the hit counts of the versions that served
                for i, (hits, _) in enumerate(old.stats()):
                    self._hit_base[i] += hits
            self.function._install(None)
            # With no SCM the native object calls its miss callable: now `fn` itself, so
            # that a call costs what eager's does (no Python miss path, no lock).
            self.function.__init__(self.fn, self.fn)
        if args is not None:
            return self.fn(*args, **kwargs)
        return result

    def _limit_reached(self, reason: str, result):
        """The recompile limit (met by a call that ran eagerly, with `result`): from now on a
        call that matches none of the versions runs eagerly, uncaptured (`_miss_entry`), and
        the versions keep serving the calls they match (as torch.compile's cache entries do
        past its limit).  One warning."""
        if self.options.strict:  # TRIDENT_STRICT was folded in by jit()
            raise UnsupportedError(f"trident.jit({self.fn.__qualname__}): {reason}")
        self.limit_reason = reason
        self.stats.fallbacks += 1
        self.stats.eager_past_limit += 1
        self._past_window, self._window_hits = 0, sum(self.hits())
        warnings.warn(f"trident.jit({self.fn.__qualname__}): {reason}: from now on a call that "
                      f"matches none of its {len(self.versions)} version(s) runs eagerly, "
                      "uncaptured; the versions keep serving the calls they match",
                      RuntimeWarning, stacklevel=user_stacklevel())
        return result

    def _past_limit_check(self) -> None:
        """Every PAST_LIMIT_WINDOW calls that matched no version past the limit: where fewer
        calls hit a version meanwhile, the whole function runs eagerly from now on (a miss
        evaluates every version's guards before eager's call: a few microseconds more than
        eager, which the hits no longer make up)."""
        hits = sum(self.hits())
        served, self._window_hits, self._past_window = hits - self._window_hits, hits, 0
        if served < PAST_LIMIT_WINDOW:
            with self.lock:
                if self.fallback_reason is None:
                    self._fall_back(f"{self.limit_reason}, and of the last "
                                    f"{served + PAST_LIMIT_WINDOW} calls fewer than half "
                                    "matched a version", None, None)

    def _under_mode(self, args, kwargs, reason: str):
        """A torch function or dispatch mode is active: no version serves the
        call (the global-state guard sees both mode stacks), and none is
        captured: capturing would apply a function mode twice (Dynamo traces
        it into the graph and the capturing run goes through it again), and
        Dynamo cannot trace under a dispatch mode.  This call runs eagerly
        (the mode sees eager's operators); the versions keep serving calls
        made without a mode."""
        if self.options.strict:
            raise UnsupportedError(f"trident.jit({self.fn.__qualname__}): {reason}")
        self.stats.fallbacks += 1
        if not self._warned_mode:
            self._warned_mode = True
            warnings.warn(f"trident.jit({self.fn.__qualname__}): {reason}: calls under it run "
                          "eagerly", RuntimeWarning, stacklevel=user_stacklevel())
        return self.fn(*args, **kwargs)

    def hits(self) -> list[int]:
        mod = self.function._module
        cur = [h for h, _ in mod.stats()] if mod is not None else []
        cur += [0] * (len(self._hit_base) - len(cur))
        return [b + c for b, c in zip(self._hit_base, cur)]

    def _float_churn(self) -> str | None:
        """The source of a float that this miss failed on (some version's first failed guard
        is an equality with a float there) and of which the versions already hold
        TRIDENT_FLOAT_VALUES values, or None.  Versions specialise floats per value: one that
        changes per call (a sampling temperature) would cost a capture per value and use up
        the recompile limit, which the function's other paths (shapes) need."""
        limit = config.float_values()
        mod = self.function._module
        versions = self.versions
        if limit <= 0 or mod is None or len(versions) < limit:
            return None
        eqs = self._float_eqs
        failed_on, passed = set(), set()
        for v, (_, failed) in zip(versions, mod.stats()):
            for i, src, _ in eqs.get(id(v), ()):
                if i > failed:
                    break
                (failed_on if i == failed else passed).add(src)
        # A float some version passed has a held value: the call missed on something else.
        for src in sorted(failed_on - passed):
            values = {val for v in versions for _, s, val in eqs.get(id(v), ()) if s == src}
            if len(values) >= limit:
                return src
        return None

    def _index_float_eqs(self, versions: list) -> None:
        """`_float_eqs` for `versions` (at each install): id(version) -> its equality guards
        on floats, as (guard index, source, value), in guard order; empty where none has
        one (the miss path then skips `_float_churn`)."""
        out = {}
        for v in versions:
            eqs = tuple((i, str(g.source), repr(v.consts[g.const]))
                        for i, g in enumerate(v.guards)
                        if isinstance(g, ir.EqualsMatch) and v.consts[g.type_const] is float)
            if eqs:
                out[id(v)] = eqs
        self._float_eqs = out

    def _miss_reason(self) -> str:
        if not self.versions:
            return "first call"
        mod = self.function._module
        if mod is None:
            return "no SCM installed"
        parts = []
        now = None
        stats = mod.stats()
        for v, (hits, failed) in zip(self.versions, stats):
            if len(parts) == _REASON_VERSIONS:
                # Each version keeps its reason: listing every version would make N versions
                # hold O(N^2) text (explain shows each version's last failed guard).
                parts.append(f"{len(self.versions) - _REASON_VERSIONS} later version(s) failed "
                             "too (trident.explain shows each one's guard)")
                break
            if 0 <= failed < len(v.guards):
                g = v.guards[failed]
                text = f"version {v.index} failed guard [{failed}] {g}"
                if isinstance(g, ir.GlobalState):
                    if now is None:
                        now = introspect.state_words(self.rt.global_state())
                    text += f" [{introspect.global_state_diff(self.rt, g.words, now)}]"
                parts.append(text)
        return "; ".join(parts) or "no version matched"



@dataclass(eq=False)
class _Build:
    """A captured version whose SCM is compiled in the background (SCM._build_later)."""
    versions: list  # the SCM's versions, the new one last
    prepared: tuple  # SCM._prepare(versions)
    cap: object  # the capture (for _refused, if the build fails)
    key: object  # the call key (likewise)
    reason: str
    t_capture: float
    t_guards_ir: float
    phases: dict  # the miss's phases so far (Stats.miss_phases)
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class _TierUp:
    """An installed SCM built again at full level in the background (SCM._tier_up_later)."""
    prepared: tuple  # SCM._prepare of its versions: (units, source, constants)
    done: threading.Event = field(default_factory=threading.Event)


# SCMs with a background build or tier-up in flight, and how many such builds run at once.
_building: "weakref.WeakSet[SCM]" = weakref.WeakSet()
_BUILD_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))


def wait_all(timeout: float | None = None) -> bool:
    """Wait for every function's background build, and the build cache's first-use trim;
    whether none is pending now."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for scm in list(_building):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not scm.wait(left):
            return False
    return build.wait_trims(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _forget_builds() -> None:
    """In a forked child: the threads building SCMs did not come along.  Their versions are
    dropped (the next miss captures again) and the locks they may have held made anew."""
    global _BUILD_SLOTS
    for scm in list(_building):
        scm.lock = threading.RLock()
        scm._pending = None
        scm._tiering = None
    _building.clear()
    _BUILD_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))
    build.after_fork_in_child()


os.register_at_fork(after_in_child=_forget_builds)


def _compiler_failed(e: BuildError) -> str:
    return f"the C compiler failed ({e.cmd[0]}; the log is in logger 'trident')"


class _FunctionWide(UnsupportedError):
    """A refusal that concerns the whole function, not one path: it runs eagerly from then on."""


# How many versions a miss reason names (the rest are counted).
_REASON_VERSIONS = 8



_POW2_NOTE = "next_power_of_2 of a dynamic size taken as its power-of-two range"
_POW2_SYMBOLIC = "later captures keep next_power_of_2 symbolic"


def _same_but_sizes(a: ir.Version, b: ir.Version) -> bool:
    """Whether two versions differ only in their shape guards (the range of a size): the same
    other guards, in any order (Dynamo lists a capture's guards in no fixed order), the same
    instructions and result, and the same CUBIN at each launch.  The environment block is
    made from the guards, so it is not compared: its rows follow their order.  (The answer
    only decides how later captures trace `next_power_of_2`; every version keeps its own
    guards.)"""
    if (a.program, a.output, a.nslots, a.run_mode) != (b.program, b.output, b.nslots, b.run_mode):
        return False
    if collections.Counter(str(g) for g in a.guards if not isinstance(g, ir.ShapeGuard)) != \
            collections.Counter(str(g) for g in b.guards if not isinstance(g, ir.ShapeGuard)):
        return False
    for ins in a.program:
        if isinstance(ins, ir.TritonLaunch):
            i = ins.cubin_const
            if i >= len(a.consts) or i >= len(b.consts) or a.consts[i] != b.consts[i]:
                return False
    return True


def _native_locals(code) -> int:
    """How many locals the native binder fills for `code` (trident_rt_binder.cpp's Binder)."""
    return (code.co_argcount + code.co_kwonlyargcount
            + bool(code.co_flags & inspect.CO_VARARGS)
            + bool(code.co_flags & inspect.CO_VARKEYWORDS) + len(code.co_freevars))


def _builtins_of(globals_dict: dict) -> dict:
    b = globals_dict.get("__builtins__", __builtins__)
    return b if isinstance(b, dict) else b.__dict__

