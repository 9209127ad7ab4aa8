"""`python -m trident.native`: build (or verify) Trident's C++ runtime now, not at the first call,
and, with gcc, the precompiled prelude that version units are compiled with.

The runtime is built once per machine for each torch, Python and Trident source version, into
the build cache (`<TRIDENT_CACHE_DIR>/runtime/<hash>/`), and reused by every later process,
checkout or virtual environment with the same versions. A server image can run this at build
time so that its first request does not wait for the compiler (25-40 s).
"""

from __future__ import annotations

import time

from .. import config
from .build import _prelude_pch, runtime_module


def main() -> None:
    t0 = time.perf_counter()
    rt = runtime_module()
    print(f"trident runtime ready: {rt.__file__} ({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    pch = _prelude_pch(config.version_opt())
    if pch:
        print(f"precompiled prelude ready: {pch[-1]}.gch ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
