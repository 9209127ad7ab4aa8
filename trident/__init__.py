"""Trident: guarded dispatch and host execution compiled into one native module.

    import trident

    @trident.jit
    def f(x, w): ...
"""

from .api import explain, jit, stats, versions
from .errors import BuildError, CaptureError, RecompileError, TridentError, UnsupportedError

__all__ = ["jit", "explain", "stats", "versions", "TridentError", "CaptureError",
           "UnsupportedError", "BuildError", "RecompileError"]
__version__ = "0.1.0"
