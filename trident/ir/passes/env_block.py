"""Pass: the environment block.

Guards on the environment alone (every source starts at a global or a constant and continues
through attributes, items, `type()` and dict entries; kinds id, equals, type, same-object,
not-in-dict, contains, length, dict-keys) are checked as one block (trt_envblock in
scm_prelude.h): a row each of the version's `envg_desc` table (its loads as steps from the
root, then its check), evaluated once, then re-checked through the version tags of what the
evaluation read.  This pass chooses the block's guards and describes each row
(`ir.EnvBlock`); codegen prints the table and the block's check where the first of them stood.
"""

from __future__ import annotations

import dataclasses

import torch

from ... import abi
from ...errors import UnsupportedError
from .. import nodes as ir

_ENV_GUARDS = (ir.IdMatch, ir.EqualsMatch, ir.TypeMatch, ir.SameObject, ir.NotInDict,
               ir.Contains, ir.LengthMatch, ir.DictKeysMatch)
_ENV_STEPS = abi.ENV_STEPS  # TRT_ENV_STEPS of scm_prelude.h


def env_block(v: ir.Version) -> ir.Version:
    """`v` with its environment block (`Version.env`; None when no guard qualifies)."""
    checks = tuple(_check(k, g, v.consts) for k, g in enumerate(v.guards) if _env_guard(g))
    return dataclasses.replace(v, env=ir.EnvBlock(checks) if checks else None)


def _check(k: int, g, consts) -> ir.EnvCheck:
    """Guard `g` (index k) as a row of the block."""
    kind, flags, c0, c1, name, n = "id", [], 0, 0, None, 0
    srcs = [g.a, g.b] if isinstance(g, ir.SameObject) else [g.source]
    if isinstance(g, ir.IdMatch):
        c0 = g.const
    elif isinstance(g, ir.EqualsMatch):
        kind, c0, c1 = "eq", g.const, g.type_const
        if not _immutable(consts[g.const]):
            flags.append("uncovered")  # a mutable value: compared on every call
    elif isinstance(g, ir.TypeMatch):
        kind, c0 = "type", g.type_const
    elif isinstance(g, ir.SameObject):
        kind = "same"
    elif isinstance(g, ir.NotInDict):
        kind, name = "notin", g.name
    elif isinstance(g, ir.Contains):
        kind, c0 = "contains", g.key
        flags += ["dict"] if g.kind == "dict" else ["set", "uncovered"]
        if g.present:
            flags.append("present")
    elif isinstance(g, ir.LengthMatch):
        kind, c0, n = "len", g.type_const, g.length
        t = consts[g.type_const]
        if t is dict:
            flags.append("dict")
        elif t not in (tuple, str, bytes):
            flags.append("uncovered")  # a mutable container: measured on every call
    elif isinstance(g, ir.DictKeysMatch):
        kind, c0 = "dictkeys", g.const
        flags.append("dict")
    else:
        raise UnsupportedError(f"guard {type(g).__name__} in an environment block")
    return ir.EnvCheck(k, kind, tuple(flags), tuple(_env_steps(src) for src in srcs),
                       c0, c1, name, n)


def _env_steps(src) -> tuple:
    """The steps loading `src`, from its root."""
    out = []
    while True:
        if isinstance(src, ir.Global):
            out.append(ir.EnvStep("global", src.name))
            break
        if isinstance(src, ir.ConstObj):
            out.append(ir.EnvStep("const", src.index))
            break
        if isinstance(src, ir.Attr):
            out.append(ir.EnvStep("attr", src.name))
        elif isinstance(src, ir.TypeOf):
            out.append(ir.EnvStep("typeof", 0))
        elif isinstance(src, ir.DictEntryAt):
            out.append(ir.EnvStep("dict_value_at" if src.value else "dict_key_at", src.index))
        elif isinstance(src, ir.DictItem):
            out.append(ir.EnvStep("dict_item", src.key_const))
        elif isinstance(src, ir.Item) and isinstance(src.key, int):
            out.append(ir.EnvStep("item_int", src.key))
        elif isinstance(src, ir.Item):
            out.append(ir.EnvStep("item_str", src.key))
        else:  # _env_guard() admitted only the kinds above
            raise UnsupportedError(f"cannot load source {src} in an environment guard")
        src = src.base
    return tuple(out[::-1])


def _env_source(src) -> bool:
    """A source read from the environment alone: a global or a constant, then attributes,
    items, `type()` and dict entries (no call, no argument of the call)."""
    while isinstance(src, (ir.Attr, ir.Item, ir.DictItem, ir.TypeOf, ir.DictEntryAt)):
        src = src.base
    return isinstance(src, (ir.Global, ir.ConstObj))


def _chain_len(src) -> int:
    n = 1
    while isinstance(src, (ir.Attr, ir.Item, ir.DictItem, ir.TypeOf, ir.DictEntryAt)):
        src = src.base
        n += 1
    return n


def _env_guard(g) -> bool:
    if not isinstance(g, _ENV_GUARDS):
        return False
    if isinstance(g, ir.SameObject):
        return (_env_source(g.a) and _env_source(g.b)
                and _chain_len(g.a) + _chain_len(g.b) <= _ENV_STEPS)
    return _env_source(g.source) and _chain_len(g.source) <= _ENV_STEPS


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _immutable(v) -> bool:
    """A value whose equality with a constant cannot change while it is the same object."""
    if type(v) in _IMMUTABLE:
        return True
    if type(v) in (tuple, frozenset):
        return all(_immutable(x) for x in v)
    return False
