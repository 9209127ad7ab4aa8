"""`python -m trident.native`: build (or verify) Trident's C++ runtime now, not at the first call.

The runtime is built once per machine for each torch, Python and Trident source version, into
the build cache (`<TRIDENT_CACHE_DIR>/runtime/<hash>/`), and reused by every later process,
checkout or virtual environment with the same versions. A server image can run this at build
time so that its first request does not wait for the compiler (25-40 s).
"""

from __future__ import annotations

import time

from .build import runtime_module


def main() -> None:
    t0 = time.perf_counter()
    rt = runtime_module()
    print(f"trident runtime ready: {rt.__file__} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
