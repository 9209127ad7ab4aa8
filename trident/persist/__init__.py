"""Persistent SCMs: a new process serves the versions an earlier process captured, from disk,
without Dynamo and without a C compiler.

  key.py      what a record is keyed on: the function's code, options, torch/Triton/Trident/
              Python versions and CUDA devices
  consts.py   a version's constants as plain data, re-resolved by name (or copied by value) in
              the new process
  record.py   the records in the build cache; `restore` at a function's first miss (`retry`
              once more after a call, for paths a library builds lazily), `save`
              after each install; what `trident.explain` and `trident.stats` show

The SCM calls `restore` and `save` (scm.py); docs/cache.md says what is trusted.
"""

from .record import describe, note, origins, restore, retry, save

__all__ = ["restore", "retry", "save", "origins", "describe", "note"]
