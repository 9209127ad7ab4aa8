"""Dynamo's own description of the function's return value -> a `returns.Returned`.

The backend reads the VariableTracker on top of the translator's stack (what Dynamo's
bytecode rebuilds the result from) and the attribute stores of `checks.check_side_effects`:
a tensor or symbolic int is the graph output or input carrying that node or symbolic
expression, a `ConstantVariable` a constant under the version's guards, a container the
function built its items, a new dataclass object (`AttributeMutationNew`) its class and its
fields' values from the side-effect table, a pre-existing object returned as itself its
source.  Nothing is matched by value; `returns.check_described` then checks the description
against the capturing call's own result.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedError
from ..ir.nodes import Frozen, frozen
from . import rebuild
from .checks import AttrStore, own_kwargs_name
from .returns import (
    Const,
    DictOf,
    GraphOutput,
    InputRef,
    NewObject,
    Rebuild,
    RebuildArg,
    ReturnDesc,
    Returned,
    Seq,
    Shared,
    SourceRef,
    Store,
)

if TYPE_CHECKING:
    from torch._dynamo.source import Source


def describe_return(tx, gm: torch.fx.GraphModule, stores: tuple[AttrStore, ...] = (),
                    fn=None) -> Returned:
    """The return value on top of `tx`'s stack, over the graph `gm`'s outputs and inputs, after
    the attribute `stores` (`fn`: the function, for its own **kwargs dict); raises
    UnsupportedError for a value the version could not rebuild."""
    if not tx.stack:
        raise UnsupportedError("cannot see the function's return value")
    return _Describer(tx, gm, fn, bool(stores)).describe(stores)


@frozen
class _Pending(Frozen):
    """A container the function made, while the walk goes on: `Shared` where it comes again
    (the walk's `walked` table then holds its share number), else `desc` itself."""

    key: int  # id() of its VariableTracker
    desc: _Desc | None  # None at its places after the first


_Desc = ReturnDesc | _Pending


class _Describer:
    def __init__(self, tx, gm: torch.fx.GraphModule, fn, has_stores: bool):
        self.tx = tx
        self.gm = gm
        self.has_stores = has_stores
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = out_node.args[0]
        self.outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        self.out_pos = {id(n): i for i, n in enumerate(self.outs) if isinstance(n, torch.fx.Node)}
        self.in_pos = {id(n): j for j, n in
                       enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
        self.own_kwargs = own_kwargs_name(fn)
        # id(vt) -> share number (None until it comes again) of the new containers walked
        self.walked: dict[int, int | None] = {}
        self.seen_new: set[int] = set()  # id(vt) of the new dataclass objects walked

    def describe(self, stores: tuple[AttrStore, ...]) -> Returned:
        # The stores first: the version makes them before it builds the result (OutStores), so
        # an object both stored and returned is built at its store and is that object in the
        # result.
        out = []
        for store in stores:
            try:
                item = self.walk(store.value)
                if self.own_kwargs is not None and \
                        not isinstance(item, (GraphOutput, InputRef, Const)):
                    # With **kwargs, only tensors, sizes and constants are stored: on torch 2.11
                    # a stored **kwargs dict escaped every check above and was replayed without
                    # the items the caller passed (a wrong result)
                    raise UnsupportedError(f"a function with **{self.own_kwargs} stores an object")
                out.append((store, item))
            except UnsupportedError as e:
                raise UnsupportedError(
                    f"the function mutates a Python object that existed before the call: it "
                    f"stores into {store.target.name}.{store.name} a value Trident cannot "
                    f"replay ({e})") from None
        result = self.walk(self.tx.stack[-1])
        return Returned(self.settle(result),
                        tuple(Store(s.target, s.name, self.settle(d)) for s, d in out))

    def settle(self, d: _Desc) -> ReturnDesc:
        """The description with each pending container made `Shared` where it came again."""
        if isinstance(d, _Pending):
            number = self.walked[d.key]
            if d.desc is None:
                return Shared(number, None)
            inner = self.settle(d.desc)
            return inner if number is None else Shared(number, inner)
        if isinstance(d, Seq):
            return Seq(d.kind, tuple(self.settle(x) for x in d.items))
        if isinstance(d, DictOf):
            return DictOf(d.keys, tuple(self.settle(x) for x in d.values))
        if isinstance(d, NewObject):
            return NewObject(d.cls, d.names, tuple(self.settle(x) for x in d.values))
        if isinstance(d, Rebuild):
            return Rebuild(d.fn, d.names, tuple(x if isinstance(x, RebuildArg) else
                                                self.settle(x) for x in d.values))
        return d

    def node_ref(self, vt, kind) -> ReturnDesc:
        node = vt.proxy.node
        if kind != "tensor":
            # Dynamo returns a symbolic value through whichever graph value
            # carries the same expression (e.g. the placeholder s0 for x.size(0)).
            num = vt.sym_num
            if not isinstance(num, (torch.SymInt, torch.SymBool)):
                return Const(num)
            e = num.node.expr
            for i, n in enumerate(self.outs):
                if isinstance(n, torch.fx.Node) and _expr_of(n) == e:
                    return GraphOutput(i, kind)
            for n in self.gm.graph.nodes:
                if n.op == "placeholder" and _expr_of(n) == e:
                    return InputRef(self.in_pos[id(n)], kind)
        if id(node) in self.out_pos:
            return GraphOutput(self.out_pos[id(node)], kind)
        if id(node) in self.in_pos:
            return InputRef(self.in_pos[id(node)], kind)
        if kind == "tensor" and getattr(vt, "source", None) is not None:
            return self.source_ref(vt.source)  # an input Dynamo pruned from the graph
        src = getattr(node.meta.get("grapharg"), "source", None) or getattr(vt, "source", None)
        if node.op == "placeholder" and src is not None and _item_path(src):
            # An int argument's own symbol, pruned from the graph (the trace only guarded on
            # it): the value is the argument the caller passed.
            return self.source_ref(src)
        raise UnsupportedError(f"returned {kind} {node.name} is not a graph value")

    def source_ref(self, src: Source) -> SourceRef:
        from torch._dynamo.source import LocalSource

        if type(src) is LocalSource and src.local_name == self.own_kwargs:
            # The call's own **kwargs dict, which the function may have changed (those
            # changes are not replayed): it must not escape.
            raise UnsupportedError(f"the function returns or stores its **{self.own_kwargs} dict")
        return SourceRef(src)

    def walk(self, vt, depth: int = 0) -> _Desc:
        from torch._dynamo.variables import ConstDictVariable, ListVariable, TensorVariable
        from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

        if depth > 32:
            raise UnsupportedError("result nested too deeply")
        src = _unrealized_source(vt)
        if src is not None and (not self.has_stores or _item_path(src)):
            # An argument (or global) the function never looked at, returned as it came:
            # Dynamo returns it by loading its source.  The isinstance checks below would
            # realize it, adding a graph input (an int's automatic-dynamic symbol) after the
            # graph was compiled, which its callers never pass.
            return self.source_ref(src)
        if isinstance(vt, TensorVariable):
            if type(vt).__name__ == "NumpyNdarrayVariable":  # a torch._numpy array
                if getattr(vt, "source", None) is not None:
                    return self.source_ref(vt.source)  # an argument's array, returned as itself
                return Rebuild(rebuild.ndarray, ("value",), (self.node_ref(vt, "tensor"),))
            return self.node_ref(vt, "tensor")
        if getattr(vt, "source", None) is None and (
                isinstance(vt, (ListVariable, ConstDictVariable, UserDefinedObjectVariable))
                or type(vt).__name__ in ("DequeVariable", "SetVariable")):
            # A container the function made: where it is returned (or stored) twice, the
            # version builds it once and hands out the same object at each place.
            if id(vt) in self.walked:
                if self.walked[id(vt)] is None:
                    self.walked[id(vt)] = len(self.walked)
                return _Pending(id(vt), None)
            self.walked[id(vt)] = None
            return _Pending(id(vt), self.walk_new(vt, depth))
        return self.walk_new(vt, depth)

    def walk_new(self, vt, depth: int) -> _Desc:
        from torch._dynamo.variables import (
            ConstantVariable,
            ConstDictVariable,
            ListVariable,
            SymNodeVariable,
            TensorVariable,
            TupleVariable,
        )
        from torch._dynamo.variables.base import AttributeMutationNew
        from torch._dynamo.variables.lists import SizeVariable
        from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

        walk = self.walk
        name = type(vt).__name__
        if isinstance(vt, SymNodeVariable):
            t = vt.python_type()
            if t not in (int, bool):
                raise UnsupportedError(f"a returned symbolic {t.__name__}")
            return self.node_ref(vt, t.__name__)
        if isinstance(vt, ConstantVariable):
            return Const(vt.as_python_constant())
        if isinstance(vt, ConstDictVariable) and self.own_kwargs is not None:
            # The function may change its own **kwargs dict, and Dynamo does not say the same
            # thing of that dict in every version (torch 2.11 returned it with items missing):
            # a function with **kwargs returns or stores no dict.
            raise UnsupportedError(f"a function with **{self.own_kwargs} returns or stores a dict")
        if (isinstance(vt, (TupleVariable, ListVariable, ConstDictVariable))
                and getattr(vt, "source", None) is not None):
            # An argument (or global) container returned as it came: the same
            # object (pre-existing objects that were mutated are refused).
            return self.source_ref(vt.source)
        if type(vt) in (TupleVariable, ListVariable):
            kind = "tuple" if type(vt) is TupleVariable else "list"
            return Seq(kind, tuple(walk(i, depth + 1) for i in vt.items))
        if type(vt) is SizeVariable:  # a torch.Size built in the function (x.shape)
            return Seq("size", tuple(walk(i, depth + 1) for i in vt.items))
        if type(vt) is ConstDictVariable and vt.python_type() is dict:
            keys, values = [], []
            for k, v in vt.items.items():
                keys.append(k.vt.as_python_constant() if hasattr(k, "vt") else k)
                values.append(walk(v, depth + 1))
            return DictOf(tuple(keys), tuple(values))
        if (isinstance(vt, ConstDictVariable) and getattr(vt, "source", None) is None
                and vt.python_type() is collections.OrderedDict):
            # an OrderedDict the function made: torch 2.12's ConstDictVariable of that class,
            # 2.14's OrderedDictVariable (2.13 reports it as a user object, below)
            return self.dict_of(collections.OrderedDict, vt, depth)
        if (name == "GetAttrVariable" and isinstance(vt.obj, TensorVariable)
                and isinstance(vt.name, str) and vt.name.isidentifier()):
            # an attribute Dynamo reads when it returns it (a numpy array's .strides)
            return Rebuild(rebuild.attribute, ("obj", "name"),
                           (walk(vt.obj, depth + 1), RebuildArg(vt.name)))
        if name == "DequeVariable" and getattr(vt, "source", None) is None:
            items = Seq("list", tuple(walk(i, depth + 1) for i in vt.items))
            return Rebuild(rebuild.deque, ("items", "maxlen"),
                           (items, RebuildArg(vt.maxlen.as_python_constant())))
        if name in ("SetVariable", "FrozensetVariable") and getattr(vt, "source", None) is None:
            fn = rebuild.set_of if name == "SetVariable" else rebuild.frozenset_of
            return Rebuild(fn, ("items",),
                           (Seq("tuple", tuple(walk(x.vt, depth + 1) for x in vt.set_items)),))
        mutations = self.tx.output.side_effects.store_attr_mutations
        if (name in ("NamedTupleVariable", "StructSequenceVariable")
                and getattr(vt, "source", None) is None
                and not mutations.get(vt)
                and _plain_type(vt.python_type(), tuple)):
            # a namedtuple or a structseq (torch.return_types.max) the function made
            return Rebuild(rebuild.tuple_of, ("cls", "items"),
                           (RebuildArg(vt.python_type()),
                            Seq("tuple", tuple(walk(i, depth + 1) for i in vt.items))))
        if isinstance(vt, UserDefinedObjectVariable):
            if isinstance(getattr(vt, "mutation_type", None), AttributeMutationNew):
                cls = vt.python_type()
                if mutations.get(vt):
                    pass  # attributes of its own: new_object says why (or rebuilds a dataclass)
                elif isinstance(base := _dict_part(vt), ConstDictVariable) \
                        and _plain_type(cls, dict) \
                        and not issubclass(cls, collections.defaultdict):  # its factory
                    return self.dict_of(cls, base, depth)
                return self.new_object(vt, depth)
            src = getattr(vt, "source", None)
            # A pre-existing object returned as itself (a KV cache passed in).  Loaded after
            # the stores, so when there are stores only through a path of items from a
            # parameter: an attribute path could lead to an object the stores replaced.
            if src is not None and (not self.has_stores or _item_path(src)):
                return self.source_ref(src)
        if vt.is_python_constant():
            v = vt.as_python_constant()
            if type(v) in (int, float, bool, str, type(None), torch.dtype, torch.device):
                return Const(v)
        src = getattr(vt, "source", None)
        raise UnsupportedError(f"a returned {name}" + (f" ({src.name})" if src is not None else ""))

    def dict_of(self, cls, dvt, depth: int) -> Rebuild:
        """A dict of class `cls` (a plain subclass) the function made, from the items of
        Dynamo's dict variable `dvt`: constant str/int keys, each value described."""
        keys, values = [], []
        for k, v in dvt.items.items():
            keys.append(k.vt.as_python_constant() if hasattr(k, "vt") else k)
            values.append(self.walk(v, depth + 1))
        if not all(type(k) in (str, int) for k in keys):
            raise UnsupportedError(f"a returned {cls.__qualname__} has keys that "
                                   "are not constant strings or ints")
        return Rebuild(rebuild.dict_of, ("cls", "keys", "values"),
                       (RebuildArg(cls), RebuildArg(tuple(keys)), Seq("tuple", tuple(values))))

    def new_object(self, vt, depth: int) -> NewObject:
        if id(vt) in self.seen_new:
            # One object at two places (returned twice, or stored and returned): the version
            # would build two.
            raise UnsupportedError("a new object is returned or stored at two places")
        self.seen_new.add(id(vt))
        cls = vt.python_type()
        name = getattr(cls, "__qualname__", repr(cls))
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise UnsupportedError(f"a returned new {name} object (only dataclasses are rebuilt)")
        fields = dataclasses.fields(cls)
        if any(not f.init for f in fields):
            raise UnsupportedError(f"a returned new {name}: a field is not an __init__ argument")
        attrs = self.tx.output.side_effects.store_attr_mutations.get(vt) or {}
        names = tuple(f.name for f in fields)
        extra = sorted(set(attrs) - set(names))
        if extra:
            raise UnsupportedError(
                f"a returned new {name} has attributes besides its fields: {extra}")
        values = []
        for n in names:
            if n not in attrs:
                raise UnsupportedError(f"a returned new {name}: field {n!r} not set")
            values.append(self.walk(attrs[n], depth + 1))
        return NewObject(cls, names, tuple(values))


def _expr_of(node):
    ev = node.meta.get("example_value")
    return ev.node.expr if isinstance(ev, (torch.SymInt, torch.SymBool)) else None


def _plain_type(cls, base) -> bool:
    """Whether `cls`, a subclass of `base` (tuple or dict), builds and fills its instances as
    the standard type does (a namedtuple's or structseq's own constructor for a tuple): no
    __new__, __init__ or __setitem__ of a user class on the way, so that `rebuild` makes the
    object the function made."""
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return False
    for c in cls.__mro__:
        own = vars(c)
        if c.__module__ in ("builtins", "collections") or (
                base is tuple and (("_fields" in own and "_make" in own)  # namedtuple's class
                                   or "n_fields" in own)):  # a structseq
            return True
        if any(n in own for n in ("__new__", "__init__", "__setitem__")):
            return False
    return False


def _item_path(src) -> bool:
    """Whether `src` is a parameter or an item (by index or key) of one, item of that, ...:
    a path no attribute store can redirect."""
    from torch._dynamo.source import DictGetItemSource, GetItemSource, LocalSource

    while isinstance(src, (DictGetItemSource, GetItemSource)):
        src = src.base
    return type(src) is LocalSource


def _dict_part(vt):
    """The dict variable holding the items of a dict-subclass object Dynamo tracks
    (`_base_vt` from torch 2.12, UserDefinedDictVariable's `_dict_vt` in 2.11), else None."""
    base = getattr(vt, "_base_vt", None)
    if base is None and type(vt).__name__ == "UserDefinedDictVariable":
        base = getattr(vt, "_dict_vt", None)
    return base


def _unrealized_source(vt):
    """The source of `vt` where it is a lazy variable Dynamo never realized (the traced code
    did not look at the value), else None."""
    from torch._dynamo.variables.lazy import LazyVariableTracker

    # issubclass on the type: isinstance on a lazy variable realizes it (torch 2.13's
    # LazyConstantVariable, for an int, float, bool or str argument, is a subclass)
    if not issubclass(type(vt), LazyVariableTracker) or vt.is_realized():
        return None
    return getattr(vt, "source", None)
