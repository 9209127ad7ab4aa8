"""Typed exceptions Trident raises to users."""

from __future__ import annotations


class TridentError(Exception):
    """Base class of Trident's own errors."""


class CaptureError(TridentError):
    """Dynamo could not capture a path as one graph (raised by `capture`; the SCM runs that
    path eagerly, or raises UnsupportedError in strict mode)."""


class UnsupportedError(TridentError):
    """A captured version uses something Trident cannot run natively safely:
    a guard kind it does not translate, a side effect, an output it cannot
    rebuild.  In non-strict mode the call falls back to eager instead."""


class BuildError(TridentError):
    """The C compiler failed.  Carries the exact command and its output."""

    def __init__(self, what: str, cmd: list[str], log: str):
        self.cmd = cmd
        self.log = log
        super().__init__(f"{what} failed: {' '.join(cmd)}\n{log[-4000:]}")


class RecompileError(TridentError):
    """A specialization miss happened while TRIDENT_ASSERT_NO_RECOMPILE=1."""
