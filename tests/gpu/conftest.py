"""Everything under tests/gpu needs CUDA and Triton.

Each test collected here gets the `gpu` marker.  Without a CUDA device or
without an importable Triton, every test module here is reported as skipped
without being imported (so a module may import triton at top level).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def _gpu_unavailable_reason() -> str | None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return "torch is not importable"
    if not torch.cuda.is_available():
        return "needs CUDA (torch.cuda.is_available() is False)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "needs Triton (import triton failed)"
    return None


_REASON = _gpu_unavailable_reason()


class _SkippedModule(pytest.File):
    """Stands in for a test module that cannot run here: reports a skip."""

    def collect(self):
        pytest.skip(_REASON)


def pytest_pycollect_makemodule(module_path, parent):
    if _REASON is not None:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def _in_gpu_dir(item) -> bool:
    try:
        Path(str(item.path)).resolve().relative_to(_HERE)
        return True
    except ValueError:
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _in_gpu_dir(item):
            item.add_marker(pytest.mark.gpu)
            if _REASON is not None:
                item.add_marker(pytest.mark.skip(reason=_REASON))
