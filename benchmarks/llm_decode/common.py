"""What every part of the benchmark shares: the operators and modes, printing, and the two
BaseExceptions that end a mode (the time budget, a signal) with the flags that go with them."""

from __future__ import annotations

import os

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/

OPS = ("mm", "addmm", "bmm", "embedding")
MODES = ("torch", "eager", "trident", "compile", "compile_cpp", "trident_full")
FILTERED = ("trident", "compile", "compile_cpp", "trident_full")
# trident_full: Trident with every operator on the dispatcher's full path
# (TRIDENT_BELOW_AUTOGRAD=0 while the mode runs): the below-autograd change's A/B in one run
TRIDENTS = ("trident", "trident_full")
MODE_ENV = {"trident_full": {"TRIDENT_BELOW_AUTOGRAD": "0"}}


def say(*a):
    print(*a, flush=True)


class OutOfTime(BaseException):
    """The time budget ran out.  A BaseException, so that the alarm that cuts a warm-up stuck
    in a long compile (`ModeSession.warm`) is not turned into a fallback by an `except
    Exception` on the way (Trident's, Dynamo's)."""


_ALARM: list = []  # armed: SIGALRM raises OutOfTime (only during a warm-up)


def _on_alarm(signum, frame):
    if _ALARM:
        _ALARM.clear()
        raise OutOfTime("warm-up cut: time budget")


class Terminated(BaseException):
    """SIGTERM arrived (e.g. from `timeout`).  A BaseException, so that no `except Exception`
    on the way (Trident's and Dynamo's fallback paths) turns it into a fallback."""


STOP: list = []  # set when a signal ended a mode: main() runs no further mode


def _on_sigterm(signum, frame):
    STOP.append(f"signal {signum}")
    raise Terminated(f"signal {signum} (SIGTERM: a timeout?)")
