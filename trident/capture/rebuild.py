"""Returned Python objects a version rebuilds around its values (`ir.OutNew`: one call of one
of these functions with keyword arguments, from the SCM's C).

Dynamo returns more than tensors, numbers, tuples, lists, dicts and dataclasses: a numpy
array it computed as a tensor (`torch._numpy`), a deque, a set, a namedtuple or a structseq
(`torch.return_types.*`), a dict subclass such as an OrderedDict, each built by the function.
An attribute Dynamo reads from a returned tensor or array (`.strides`) is one more.
`capture.describe` describes such an object as a `returns.Rebuild` (one of the functions
below, its arguments' descriptions by name); `check` says, on the capturing call,
whether that description rebuilds the object the call returned (the same type and, where
they have them, length, keys, maxlen and no instance attributes), and hands back the parts
to check against the item descriptions.  Each function builds the object as the type itself
builds it; a subclass that overrides how it is built or filled is not described this way.
"""

from __future__ import annotations

import collections

from .returns import Const


def ndarray(value):
    """A numpy array Dynamo computed as a tensor, as Dynamo hands it back
    (torch._dynamo.utils.to_numpy_helper)."""
    return value.numpy(force=True)


def attribute(obj, name):
    """An attribute of a returned tensor or array that Dynamo reads as it returns it."""
    return getattr(obj, name)


def deque(items, maxlen):
    return collections.deque(items, maxlen)


def set_of(items):
    return set(items)


def frozenset_of(items):
    return frozenset(items)


def tuple_of(cls, items):
    """A namedtuple (`cls._make`) or a structseq (`cls(items)`)."""
    return cls._make(items) if hasattr(cls, "_make") else cls(items)


def dict_of(cls, keys, values):
    """A dict subclass (OrderedDict, ...) whose construction and item assignment are the
    base type's: an empty one, filled in order."""
    d = cls()
    for k, v in zip(keys, values):
        d[k] = v
    return d


def check(fn, real, args: dict, descs: dict) -> tuple[str | None, list[tuple[str, object]]]:
    """(why `fn(**args)` would not rebuild `real`, or None; the parts of `real` that the
    item descriptions `descs` describe, as (argument name, part)).  `args`: the constant
    arguments by name; `descs`: every argument's description by name (`returns.Rebuild`)."""
    name = fn.__name__
    if fn is ndarray:
        import numpy as np

        return (None if type(real) is np.ndarray else
                f"the returned {type(real).__name__} is not a numpy array"), []
    if fn is attribute:  # Dynamo's own result is this very read, made on its object
        return None, []
    if fn is deque:
        if type(real) is not collections.deque or real.maxlen != args["maxlen"]:
            return "a returned deque is not what Dynamo described", []
        return None, [("items", list(real))]
    if fn in (set_of, frozenset_of):
        kind = set if fn is set_of else frozenset
        items = descs["items"].items  # a Seq of the elements in Dynamo's order
        consts = [d.value for d in items if isinstance(d, Const)]
        if type(real) is not kind or len(real) != len(items) or \
                not all(c in real for c in consts):
            return f"a returned {kind.__name__} is not what Dynamo described", []
        return None, []
    if fn is tuple_of:
        if type(real) is not args["cls"] or getattr(real, "__dict__", None):
            return f"a returned {args['cls'].__qualname__} is not what Dynamo described", []
        return None, [("items", tuple(real))]
    if fn is dict_of:
        if type(real) is not args["cls"] or list(real) != list(args["keys"]) or \
                getattr(real, "__dict__", None):
            return f"a returned {args['cls'].__qualname__} is not what Dynamo described", []
        return None, [("values", tuple(real.values()))]
    return f"no check for {name}", []
