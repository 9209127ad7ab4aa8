"""One mode on one model, in phases (warm-up with the filter and the settle requests, measured
requests, finish), and the two orders of a run: interleaved (every mode's warm-up, then the
measured requests in rounds) and sequential (`--no-interleave`)."""

from __future__ import annotations

import os
import signal
import statistics
import time
import traceback
from dataclasses import dataclass, field

import torch
from llm_prompts import PROMPT_SETS, token_ids

import trident

from .common import (
    _ALARM,
    FILTERED,
    MODE_ENV,
    OPS,
    STOP,
    TRIDENTS,
    OutOfTime,
    Terminated,
    say,
)
from .filter import OpTiming, timing_shim
from .models import Provider
from .modes import (
    STATEFUL,
    Registry,
    make_wrapper,
    region_classes,
    trident_status,
    warm_compiler,
)
from .run import Request, breakdown, decode, measured_order, settle_count, torch_profile


@dataclass
class ModeRun:
    mode: str
    model: str
    requests: list = field(default_factory=list)
    settle: list = field(default_factory=list)  # the warm-up's replay of the measured prompts
    timings: dict = field(default_factory=dict)  # op -> OpTiming
    kept: dict = field(default_factory=dict)  # op -> "mode" | "eager"
    trident: dict = field(default_factory=dict)  # op -> status line
    explain: dict = field(default_factory=dict)  # op -> trident.explain text
    warm_versions: dict = field(default_factory=dict)  # op -> Trident versions after warm-up
    # op -> (calls per token, median host us per call, host ms per token) in one extra request
    breakdown: dict = field(default_factory=dict)
    breakdown_tpot: float = float("nan")  # that request's TPOT, ms
    profile: str = ""  # --torch-profile: the profiled request's operator table
    dynamo: str = ""  # torch.compile modes: graphs and graph breaks during warm-up
    note: str = ""
    error: str = ""  # "ExcType: message" when the mode failed
    error_tb: str = ""  # the last lines of its traceback
    seconds: float = 0.0


class ModeSession:
    """One mode on one model, in phases: `warm()` (wrappers, regions, warm-up requests, the
    filter's decisions), `measure(set, i)` (one measured request with the mode installed),
    `finish()` (breakdown request, Trident's final status).  Between phases nothing of the
    mode stays installed, so that the measured requests of several modes can interleave
    (`--interleave`): the machine's drift then falls on every mode alike.  A phase that raises
    records the failure (`run.error`) and later phases do nothing."""

    def __init__(self, mode, name, model, prov: Provider, a, deadline):
        self.mode, self.name, self.model, self.prov, self.a = mode, name, model, prov, a
        self.deadline = deadline
        self.run = ModeRun(mode, name)
        self.reg = Registry(prov.dispatch_key)
        self.sync = torch.cuda.synchronize if prov.device == "cuda" else (lambda: None)
        self.wrappers: dict = {}
        self.regions: dict = {}  # key -> Region
        self.warm_misses: dict = {}
        self.done = False  # failed or stopped: no more phases

    def request(self, set_name, i, n_new=None):
        if STOP:  # a signal whose exception something swallowed (e.g. a weakref callback)
            raise Terminated(STOP[0])
        if time.time() > self.deadline:
            raise OutOfTime
        ids = token_ids(PROMPT_SETS[set_name][i], self.model.config.vocab_size)
        m0 = self.misses()
        toks, ttft, itl, total = decode(self.model, ids, n_new or self.a.new_tokens,
                                        self.prov.device,
                                        self.sync)
        return Request(set_name, i, len(ids), toks, ttft, itl, total, self.misses() - m0)

    def misses(self) -> int:
        """Trident: the misses of every wrapper of this mode so far (0 for other modes)."""
        if self.mode not in TRIDENTS:
            return 0
        return sum(trident.stats(w)["misses"] for w in self.wrappers.values())

    def install(self) -> None:
        """The measured configuration: kept wrappers registered, kept regions installed."""
        for op, fn in self.prov.ops.items():
            if self.mode != "torch":
                self.reg.set(op, self.wrappers[op] if self.run.kept[op] == self.mode else fn)
        for key, reg_ in self.regions.items():
            reg_.install(self.wrappers[key] if self.run.kept[key] == self.mode else reg_.orig)

    def uninstall(self) -> None:
        self.reg.clear()
        for reg_ in self.regions.values():
            reg_.restore()

    def _phase(self, fn) -> None:
        if self.done:
            return
        t = time.perf_counter()
        env = MODE_ENV.get(self.mode, {})
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            fn()
        except OutOfTime as e:
            self.run.note = f"stopped: time budget{' (' + str(e) + ')' if str(e) else ''}"
            self.done = True
            say(f"!! {self.name}/{self.mode}: time budget exhausted, stopping")
        except (Exception, Terminated, KeyboardInterrupt) as e:  # noqa: BLE001  (one failing
            # mode must not lose the others; a signal ends this mode with a report, then the
            # run stops)
            self.done = True
            mode_failed(self.run, e)
            if self.mode in TRIDENTS:  # what each Trident wrapper had done by then
                for op, w in self.wrappers.items():
                    try:
                        self.run.trident[op] = trident_status(w)
                        # the capture reasons of misses after the warm-up (a measured
                        # request's) are only in a fresh explain text
                        self.run.explain[op] = trident.explain(w)
                        say(f"   trident {self.name} {op}: {self.run.trident[op]}")
                    except Exception as e2:  # noqa: BLE001
                        self.run.trident[op] = f"stats failed: {type(e2).__name__}: {e2}"
        finally:
            self.uninstall()
            self.run.seconds += time.perf_counter() - t
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def warm(self, until: float | None = None) -> None:
        """Warm-up, stopped at `until` (default: the run's deadline) even inside one request:
        an alarm then raises OutOfTime wherever the mode is (say, Inductor compiling its 24th
        decoder layer), so that the measured requests keep the time reserved for them."""
        until = self.deadline if until is None else until
        saved, self.deadline = self.deadline, until
        left = until - time.time()
        if left > 0 and hasattr(signal, "setitimer"):
            _ALARM.append(True)
            signal.setitimer(signal.ITIMER_REAL, left)
        try:
            self._phase(self._warm)
        finally:
            if hasattr(signal, "setitimer"):
                signal.setitimer(signal.ITIMER_REAL, 0)
            _ALARM.clear()
            self.deadline = saved

    def _warm(self) -> None:
        mode, a, run = self.mode, self.a, self.run
        if mode != "torch":
            if mode.startswith("compile"):
                warm_compiler(self.prov.device)
                torch._dynamo.utils.counters.clear()
            for op, fn in self.prov.ops.items():
                self.wrappers[op] = make_wrapper(mode, fn, a.dynamic, a.max_versions)
                run.timings[op] = OpTiming()
                self.reg.set(op, timing_shim(self.wrappers[op], fn, run.timings[op]))
        if mode in FILTERED:
            for key, reg_ in region_classes(self.model, a.regions).items():
                self.regions[key] = reg_
                self.wrappers[key] = make_wrapper(mode, reg_.orig, a.dynamic, a.max_versions)
                run.timings[key] = OpTiming()
                reg_.install(timing_shim(self.wrappers[key], reg_.orig, run.timings[key],
                                         stateful=key.endswith(STATEFUL)))
        # Warm-up: prompts of every set in turn. The filter's samples come from the second half
        # (captures and compiles happen in the first), or from all when there is one request.
        order = [
            (s, i)
            for i in range(max(map(len, PROMPT_SETS.values())))
            for s in a.prompts
            if i < len(PROMPT_SETS[s])
        ]
        # The last requests of the warm-up, one per prompt set, replay the first measured
        # prompts in the measured configuration (settle_count): a capturing request does not
        # run its version's native program, so the program of a shape only it had (the first
        # prompt's static version) and the nested wrappers' calls it makes (which versions
        # captured from eager calls need not match) would otherwise first run inside a
        # measured request.
        settle = measured_order(a)[:settle_count(a)]
        shimmed = a.warmup - len(settle)
        for r in range(shimmed):
            for rec in run.timings.values():
                rec.record = r >= shimmed // 2
            self.request(*order[r % len(order)], self.a.warmup_tokens)
        trident.wait()  # the misses' full-level rebuilds (TRIDENT_TIER_UP)
        for op in self.prov.ops:
            if mode == "torch":
                continue
            keep = mode not in FILTERED or not run.timings[op].verdict().startswith("dropped")
            run.kept[op] = mode if keep else "eager"
        for key in self.regions:
            keep = not run.timings[key].verdict(region=True).startswith("dropped")
            run.kept[key] = mode if keep else "eager"
        if settle:
            self.install()  # _phase uninstalls
            for s_, i in settle:
                run.settle.append(self.request(s_, i, self.a.warmup_tokens))
        if mode in TRIDENTS:
            for op, w in self.wrappers.items():
                run.trident[op] = trident_status(w)
        if mode.startswith("compile"):
            run.dynamo = dynamo_summary()
        report_warmup(run)
        if mode in TRIDENTS:
            for op, w in self.wrappers.items():
                self.warm_misses[op] = trident.stats(w)["misses"]
                run.warm_versions[op] = trident.stats(w)["versions"]
                run.explain[op] = trident.explain(w)
                say("   " + run.explain[op].split("\n")[0])

    def measure(self, set_name, i) -> None:
        def one():
            self.install()
            self.run.requests.append(self.request(set_name, i))

        self._phase(one)

    def finish(self) -> None:
        def fin():
            a, run = self.a, self.run
            if a.breakdown and self.mode != "torch":
                self.install()
                run.breakdown_tpot, run.breakdown = breakdown(
                    self.reg, {op: self.wrappers[op] if run.kept[op] == self.mode else fn
                               for op, fn in self.prov.ops.items()},
                    lambda: self.request(a.prompts[0], 0), a.new_tokens)
            if a.torch_profile:
                self.install()
                run.profile = torch_profile(lambda: self.request(a.prompts[0], 0),
                                            a.new_tokens, f"{run.model}/{self.mode}")
            if self.mode in TRIDENTS:  # again: a miss after the warm-up counts too (the
                # measured requests' own misses are in their rows of the report)
                run.trident = {op: trident_status(w, self.warm_misses.get(op))
                               for op, w in self.wrappers.items()}
                run.explain = {op: trident.explain(w) for op, w in self.wrappers.items()}

        self._phase(fin)
        self.done = True


def run_mode(mode, name, model, prov: Provider, a, prompts, deadline) -> ModeRun:
    """One mode from warm-up to its last measured request (`--no-interleave`)."""
    sess = ModeSession(mode, name, model, prov, a, deadline)
    sess.warm()
    for s, i in measured_order(a):
        sess.measure(s, i)
    sess.finish()
    if mode.startswith("compile"):
        torch._dynamo.reset()
    return sess.run


def run_interleaved(modes, name, model, prov: Provider, a, deadline) -> list:
    """Every mode warmed up in turn, then the measured requests in rounds: request k of every
    mode, the modes' order rotating by one each round; then each mode's breakdown.  Warm-ups
    end `--reserve-s` before the deadline (a warm-up still running then is cut and its mode not
    measured), so that the measured requests of the modes that did warm up have that time."""
    sessions = []
    warm_until = deadline - a.reserve_s
    for mode in modes:
        if STOP or time.time() > warm_until:
            sessions.append(None)
            continue
        say(f"== {name} / {mode} (warm-up)")
        sess = ModeSession(mode, name, model, prov, a, deadline)
        sess.warm(warm_until)
        sessions.append(sess if not sess.done else sess.run)  # a ModeRun: failed or cut
        if sess.done:
            say(f"!! {name}/{mode}: not measured ({sess.run.note or sess.run.error})")
    live = [x for x in sessions if isinstance(x, ModeSession)]
    for k, (s, i) in enumerate(measured_order(a)):
        for j in range(len(live)):
            live[(j + k) % len(live)].measure(s, i)
    for sess in live:
        sess.finish()
    torch._dynamo.reset()
    runs = []
    for mode, sess in zip(modes, sessions):
        if sess is None:
            runs.append(ModeRun(mode, name, note=f"skipped: run stopped ({STOP[0]})" if STOP
                                else "skipped: time budget"))
        elif isinstance(sess, ModeRun):
            runs.append(sess)
        else:
            runs.append(sess.run)
    return runs


def mode_failed(run: ModeRun, e: BaseException, tb_lines: int = 25) -> None:
    """First one line saying what failed, then the end of the traceback (output tails get cut
    from the front, so the type and message come first and the innermost frames last)."""
    if isinstance(e, (Terminated, KeyboardInterrupt)):
        STOP.append(type(e).__name__)
    msg = " ".join(str(e).split())
    run.error = f"{type(e).__name__}: {msg[:500]}"
    say(f"MODE FAILED: {run.model}/{run.mode}: {run.error}")
    # (without Python's ^^^ position markers, which would halve what 25 lines show)
    tb = [x for x in traceback.format_exc().rstrip("\n").split("\n") if x.strip(" ^~")]
    run.error_tb = "\n".join(tb[-tb_lines:])
    say(run.error_tb)
    run.note = f"error: {type(e).__name__}: {msg[:200]}".replace("|", "/")


def dynamo_summary() -> str:
    c = torch._dynamo.utils.counters
    breaks = c["graph_break"]
    top = "; ".join(f"{n}x {r[:120]}" for r, n in breaks.most_common(3))
    return (
        (
            f"{c['stats']['unique_graphs']} graph(s), {sum(breaks.values())} graph break(s)"
            + (f" (most frequent: {top})" if top else "")
        )
        .replace("|", "/")
        .replace("\n", " ")
    )


def report_warmup(run: ModeRun) -> None:
    for op, rec in run.timings.items():
        line = f"   {run.model}/{run.mode} {op}: {rec.calls} call(s) in warm-up"
        if rec.cand:
            line += (
                f", host median {statistics.median(rec.cand) * 1e6:.1f} us vs eager wrapper "
                f"{statistics.median(rec.base) * 1e6:.1f} us -> {rec.verdict(region=op not in OPS)}"
            )
        say(line)
    if run.mode in FILTERED:
        dropped = [op for op, k in run.kept.items() if k == "eager"]
        say(f"   {run.model}/{run.mode}: dropped (eager wrapper instead): {dropped or 'none'}")
    for op, st in run.trident.items():
        say(f"   trident {run.model} {op}: {st}")
    if run.dynamo:
        say(f"   {run.model}/{run.mode} Dynamo in warm-up: {run.dynamo}")
