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


_PACKAGE_DIR = __file__.rsplit("/", 1)[0].rsplit("\\", 1)[0]


def user_stacklevel() -> int:
    """The `stacklevel` for a warning issued by the caller of this function that points
    at the first frame outside the trident package (the user's call), however many of
    Trident's frames lie between (as pandas' find_stack_level)."""
    import sys
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level
