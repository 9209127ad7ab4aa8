"""The function's return value as a version rebuilds it: a tree of frozen dataclasses.

`describe.describe_return` makes the tree from Dynamo's own description of the value (the
VariableTracker on top of the translator's stack when the backend runs), so nothing is
guessed; `check_described` checks it against what the capturing call itself returned and
stored; `ir.lower` turns it into the version's output tree (`ir.Out*`).

    GraphOutput   the index-th graph output (a tensor, or a symbolic int or bool)
    InputRef      the index-th graph input, returned as it came in
    SourceRef     an object that existed before the call, returned as itself
    Const         a constant under the version's guards
    Seq, DictOf   a tuple, list or torch.Size / a dict the function built
    NewObject     a dataclass object the function created (a Hugging Face ModelOutput):
                  rebuilt by calling cls(field=value, ...)
    Rebuild       another object the function built (a numpy array, a deque, a set, a
                  namedtuple, an OrderedDict, ...): one call of a `capture.rebuild` function
    Shared        an object the function built that the result holds at several places
    Returned      the top: the value, after the attribute stores on pre-existing objects
                  (`Store`, see `checks.check_side_effects`) that the version makes first
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import torch

from ..ir.nodes import Frozen, frozen

if TYPE_CHECKING:
    from torch._dynamo.source import Source

Kind = Literal["tensor", "int", "bool"]


@frozen
class GraphOutput(Frozen):
    """The `index`-th output of the captured graph."""

    index: int
    kind: Kind


@frozen
class InputRef(Frozen):
    """The `index`-th input (placeholder) of the captured graph, returned as it came in."""

    index: int
    kind: Kind


@frozen
class SourceRef(Frozen):
    """An object that existed before the call (an argument, a global, an input Dynamo pruned
    from the graph), returned as itself: loaded from its Dynamo source."""

    source: Source


@frozen
class Const(Frozen):
    """A constant under the version's guards."""

    value: object


@frozen
class Seq(Frozen):
    """A tuple, list or torch.Size the function built."""

    kind: Literal["tuple", "list", "size"]
    items: tuple[ReturnDesc, ...]


@frozen
class DictOf(Frozen):
    """A plain dict the function built: its constant keys in order, a value for each."""

    keys: tuple[object, ...]
    values: tuple[ReturnDesc, ...]


@frozen
class NewObject(Frozen):
    """A dataclass object the function created: `cls(**dict(zip(names, values)))`, every
    field an __init__ argument (`check_described` checks that this rebuilds the object)."""

    cls: type
    names: tuple[str, ...]
    values: tuple[ReturnDesc, ...]


@frozen
class RebuildArg(Frozen):
    """A constant argument of a `Rebuild` call (a class, keys, a maxlen, an attribute name)."""

    value: object


@frozen
class Rebuild(Frozen):
    """`fn(**dict(zip(names, values)))` with `fn` one of `capture.rebuild`'s functions."""

    fn: Callable[..., object]
    names: tuple[str, ...]
    values: tuple[ReturnDesc | RebuildArg, ...]


@frozen
class Shared(Frozen):
    """An object the function built that is returned (or stored) at several places: built at
    its first place (`desc`), the same object again at the others (`desc` None)."""

    number: int
    desc: ReturnDesc | None


@frozen
class Store(Frozen):
    """`setattr(target, name, value)` on an object that existed before the call."""

    target: Source
    name: str
    value: ReturnDesc


@frozen
class Returned(Frozen):
    """The whole description: the attribute stores, in Dynamo's order, then the value (an
    object both stored and returned is built at its store and is that object in the value)."""

    value: ReturnDesc
    stores: tuple[Store, ...] = ()


ReturnDesc = (GraphOutput | InputRef | SourceRef | Const | Seq | DictOf | NewObject | Rebuild
              | Shared)

_SEQ_TYPES = {"tuple": tuple, "list": list, "size": torch.Size}


def check_described(ret: Returned, result, store_objs: Sequence[object] = ()) -> str | None:
    """Why the version's description of the result (and of the values it stores on
    `store_objs`, one object per store) would not rebuild what the capturing call itself
    returned and stored, or None.  Checked on that call: containers have the same type, length
    and keys in order, constants are equal, and calling each new dataclass's class with its
    field values rebuilds the same object (the same type, instance attributes and, for a dict
    subclass such as a ModelOutput, the same keys in order, each value the same object).  A
    description Dynamo got wrong is refused, never run."""
    seen: dict[int, object] = {}  # share number -> the object a shared container's first place
    if ret.stores:  # in the order the version builds them: the stores, the result
        if len(store_objs) != len(ret.stores):
            return "the stores are not what Dynamo described"
        for obj, store in zip(store_objs, ret.stores):
            try:
                stored = getattr(obj, store.name)
            except AttributeError:
                return f"the stored attribute {store.name!r} is missing after the call"
            why = _check(store.value, stored, seen)
            if why:
                return f"the value stored in .{store.name}: {why}"
    return _check(ret.value, result, seen)


def _check(desc: ReturnDesc, real, seen: dict[int, object]) -> str | None:
    if isinstance(desc, Const):
        ok = type(real) is type(desc.value) and (real is desc.value or real == desc.value)
        return None if ok else "a returned constant is not what Dynamo described"
    if isinstance(desc, Seq):
        if type(real) is not _SEQ_TYPES[desc.kind] or len(real) != len(desc.items):
            return f"a returned {desc.kind} is not what Dynamo described"
        for d, r in zip(desc.items, real):
            why = _check(d, r, seen)
            if why:
                return why
        return None
    if isinstance(desc, DictOf):
        if type(real) is not dict or list(real) != list(desc.keys):
            return "a returned dict is not what Dynamo described"
        for k, d in zip(desc.keys, desc.values):
            why = _check(d, real[k], seen)
            if why:
                return why
        return None
    if isinstance(desc, Shared):
        if desc.desc is None:
            return None if seen.get(desc.number) is real else \
                "an object returned at two places is two objects"
        seen[desc.number] = real
        return _check(desc.desc, real, seen)
    if isinstance(desc, Rebuild):
        from . import rebuild

        args = {n: d.value for n, d in zip(desc.names, desc.values) if isinstance(d, RebuildArg)}
        items = dict(zip(desc.names, desc.values))
        why, parts = rebuild.check(desc.fn, real, args, items)
        if why:
            return why
        for name, part in parts:
            why = _check(items[name], part, seen)
            if why:
                return why
        return None
    if isinstance(desc, NewObject):
        return _check_new(desc, real, seen)
    return None  # a graph output or input, a source: the call's own value


def _check_new(desc: NewObject, real, seen: dict[int, object]) -> str | None:
    cls = desc.cls
    name = cls.__qualname__
    if type(real) is not cls:
        return f"the returned {name} is a {type(real).__qualname__}"
    kw = {}
    for n, d in zip(desc.names, desc.values):
        kw[n] = getattr(real, n)
        why = _check(d, kw[n], seen)
        if why:
            return why
    try:
        again = cls(**kw)
    except Exception as e:  # noqa: BLE001 - reported as the reason
        return f"{name}(**fields) raised {type(e).__name__}: {e}"

    def same_items(a, b):
        return list(a) == list(b) and all(a[k] is b[k] for k in a)

    if not same_items(vars(real), vars(again)):
        return f"{name}(**fields) does not rebuild the returned object's attributes"
    if isinstance(real, dict) and not same_items(real, again):
        return f"{name}(**fields) does not rebuild the returned object's items"
    return None
