"""Trident: guarded dispatch and host execution compiled into one native module.

    import trident

    @trident.jit
    def f(x, w): ...
"""

from .api import explain, jit, stats, versions, wait
from .capture.adapters import register_kernel_wrapper
from .errors import BuildError, CaptureError, RecompileError, TridentError, UnsupportedError

__all__ = ["jit", "explain", "stats", "versions", "wait", "register_kernel_wrapper", "TridentError", "CaptureError",
           "UnsupportedError", "BuildError", "RecompileError"]
__version__ = "0.1.0"
