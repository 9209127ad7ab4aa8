"""Paths that run eagerly: a refused capture costs its own path, not the whole function.

When Trident refuses a path's capture for a reason that concerns that path (a graph break, a
side effect it does not replay, a result it cannot rebuild, a mode change inside, a failed
lowering), the SCM adds an *eager version* (`eager_version`): the guards Dynamo recorded for
the path (`capture.dynamo.PathGuards`, translated as any version's, none dropped) and a program
that is one call of the function itself in Python with the call's own arguments (`ir.OutNew`
over the bound locals).  A call on that path then costs one native guard check and one Python
call; the other paths stay native.

Where the path's guards themselves cannot be translated (a guard kind or source Trident does
not translate), or Dynamo recorded none, the miss handler keeps a *negative entry* instead
(`NegativeEntries`), keyed on what is cheap and exact to compare (`call_key`): the global-state
snapshot and, per bound argument, its type and, for a tensor, its dtype, device, layout, sizes,
strides and requires_grad; for a scalar its value; for a tuple, list or dict its items' keys;
for any other object its type.  A later miss with an equal key runs eagerly without a
capture; a call whose key differs is captured as usual.  An entry only ever makes a call run
eagerly, so a key that is too coarse costs speed, never a result.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from .guards.translate import ConstPool, local_names
from .ir import nodes as ir


class _Caller:
    """`fn` called with its locals passed by name, for a function whose parameters cannot all
    be passed by keyword (positional-only parameters, `*args`, `**kwargs`)."""

    def __init__(self, fn):
        co = fn.__code__
        self.fn = fn
        names = local_names(fn)
        self.positional = tuple(names[:co.co_argcount])
        self.kwonly = tuple(names[co.co_argcount:co.co_argcount + co.co_kwonlyargcount])
        i = co.co_argcount + co.co_kwonlyargcount
        self.varargs = names[i] if co.co_flags & inspect.CO_VARARGS else None
        i += bool(self.varargs)
        self.varkw = names[i] if co.co_flags & inspect.CO_VARKEYWORDS else None

    def __call__(self, /, **kw):
        args = [kw[n] for n in self.positional]
        if self.varargs is not None:
            args.extend(kw[self.varargs])
        kws = {n: kw[n] for n in self.kwonly}
        if self.varkw is not None:
            kws.update(kw[self.varkw])
        return self.fn(*args, **kws)

    def __repr__(self) -> str:
        return f"<call of {self.fn.__qualname__}>"


def parameters(fn) -> list[str]:
    """The locals the binder fills from the call (its closure cells excluded)."""
    names = local_names(fn)
    return names[:len(names) - len(fn.__code__.co_freevars)]


def eager_version(fn, index: int, guards: tuple, consts: ConstPool, *, why: str,
                  reason: str = "", notes: tuple = ()) -> ir.Version:
    """A version of `fn` under `guards` whose program calls `fn` itself in Python with the
    call's bound arguments (defaults applied, as the binder fills them): eager's result, its
    exceptions and its side effects, once per call."""
    co = fn.__code__
    names = tuple(parameters(fn))
    direct = not (co.co_posonlyargcount or co.co_flags & (inspect.CO_VARARGS
                                                          | inspect.CO_VARKEYWORDS))
    callee = fn if direct else _Caller(fn)
    values = tuple(ir.OutSource(ir.Local(i, n)) for i, n in enumerate(names))
    out = ir.OutNew(consts.add(callee), fn.__qualname__, consts.add(names), names, values)
    return ir.Version(index=index, guards=tuple(guards), program=(), output=out, nslots=0,
                      consts=tuple(consts.objs), reason=reason, notes=tuple(notes), eager=why)


# ------------------------------------------------------------------ negative entries

_SCALARS = (int, bool, str, bytes, type(None), torch.dtype, torch.device, torch.layout,
            torch.memory_format)


def _leaf_key(v, depth: int = 0):
    t = type(v)
    if isinstance(v, torch.Tensor):
        if v.layout != torch.strided:
            return (t, v.layout, v.dtype, v.device, tuple(v.shape), id(v))
        return (t, v.dtype, v.device, tuple(v.shape), v.stride(), v.requires_grad)
    if t in _SCALARS:
        return (t, v)
    if t is float:
        return (t, repr(v))  # -0.0 and 0.0 differ, a NaN equals itself
    if t in (tuple, list) and depth < 4 and len(v) <= 64:
        return (t, tuple(_leaf_key(x, depth + 1) for x in v))
    if t is dict and depth < 4 and len(v) <= 64 and all(type(k) in _SCALARS for k in v):
        return (t, tuple((type(k), k, _leaf_key(x, depth + 1)) for k, x in v.items()))
    # Any other object by its type alone: an object made anew for each call (an iterator, a
    # config) then keeps its key (by identity, each call would be captured again).
    return (t,)


def call_key(signature: inspect.Signature, args: tuple, kwargs: dict, state: bytes):
    """The key of a call for negative entries (see the module docstring), or None where one
    cannot be made (such a call is never served by a negative entry)."""
    try:
        b = signature.bind(*args, **kwargs)
        b.apply_defaults()
        key = (state,) + tuple((n, _leaf_key(v)) for n, v in b.arguments.items())
        hash(key)
    except Exception:  # noqa: BLE001 - e.g. a tensor subclass whose metadata raises
        return None
    return key


def describe_key(key: tuple) -> str:
    """A short text of a key for `trident.explain`."""
    def leaf(k):
        t = k[0]
        if len(k) == 1:
            return t.__name__
        if issubclass(t, torch.Tensor):
            if isinstance(k[1], torch.dtype):
                return f"{t.__name__}({str(k[1]).removeprefix('torch.')}, {k[2]}, {list(k[3])})"
            return t.__name__
        if t in (tuple, list):
            inner = ", ".join(leaf(x) for x in k[1])
            return f"({inner})" if t is tuple else f"[{inner}]"
        if t is float:
            return k[1]
        if t is dict:
            return "{" + ", ".join(f"{kk!r}: {leaf(x)}" for _, kk, x in k[1]) + "}"
        return repr(k[1])
    return ", ".join(f"{n}={leaf(k)}" for n, k in key[1:])


@dataclass
class NegativeEntry:
    reason: str
    calls: int = 0
    retries: int = 0  # captures still to try for this key (see SCM._refused)


class NegativeEntries:
    """Call keys whose path runs eagerly without a capture (see the module docstring)."""

    def __init__(self):
        self.entries: dict = {}

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key) -> NegativeEntry | None:
        if key is None:
            return None
        return self.entries.get(key)

    def add(self, key, reason: str, retries: int = 0) -> tuple:
        """(the key's entry, whether it is new); (None, False) for no key."""
        if key is None:
            return None, False
        old = self.entries.get(key)
        if old is not None:
            return old, False
        entry = self.entries[key] = NegativeEntry(reason, retries=retries)
        return entry, True

    def discard(self, key) -> None:
        self.entries.pop(key, None)

    def items(self):
        return self.entries.items()
