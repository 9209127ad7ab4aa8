"""What a captured path may do, checked on Dynamo's trace: side effects and mode changes.

`check_side_effects` keeps the attribute stores the function makes on objects that existed
before the call (`AttrStore`, replayed by the version after its program) and refuses every
other mutation of such objects.  `whole_function_mode` recognizes a mode change around the
whole function (a `@torch.no_grad()` decorator: the version runs under it) and `mode_change`
says why any other grad-mode, inference-mode or autocast change inside is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedError
from ..ir.nodes import Frozen, frozen

if TYPE_CHECKING:
    from torch._dynamo.source import Source
    from torch._dynamo.variables.base import VariableTracker


@frozen
class AttrStore(Frozen):
    """`target.name = value` on an object that existed before the call, as Dynamo traced it
    (`value` a VariableTracker); `obj` is the object itself, read after the capturing call
    to check the value the version will store (`returns.check_described`)."""

    target: Source
    name: str
    value: VariableTracker
    obj: object


def _base_modified(var, se) -> bool:
    """Whether a user object's builtin base (a dict / list subclass's contents) was changed."""
    f = getattr(var, "is_base_vt_modified", None)
    if f is not None:
        return bool(f(se))
    for attr in ("_base_vt", "base_cls_vt"):  # torch versions before the method
        b = getattr(var, attr, None)
        if b is not None and se.is_modified(b):
            return True
    return False


def _plain_store(obj, name: str) -> str:
    """Why `setattr(obj, name, v)` would not simply set the instance-dict entry Dynamo's replay
    sets (a custom __setattr__, which Dynamo inlined and replays with object.__setattr__; a
    data descriptor such as a property or a slot), or "" when it would."""
    import inspect

    cls = type(obj)
    if getattr(cls, "__setattr__", None) is not object.__setattr__:
        return f"{cls.__qualname__} defines __setattr__"
    if not hasattr(obj, "__dict__"):
        return f"{cls.__qualname__} has no instance __dict__"
    d = inspect.getattr_static(cls, name, None)
    if d is not None and hasattr(type(d), "__set__"):
        return f"{cls.__qualname__}.{name} is a data descriptor"
    return ""


def own_kwargs_name(fn) -> str | None:
    """The name of fn's `**kwargs` parameter: a dict made afresh for every call, so changes
    to it inside the call are seen by no one after it (unless it escapes, which the result's
    description refuses)."""
    co = getattr(fn, "__code__", None)
    if co is None or not co.co_flags & 0x08:  # CO_VARKEYWORDS
        return None
    return co.co_varnames[co.co_argcount + co.co_kwonlyargcount + bool(co.co_flags & 0x04)]


def check_side_effects(output_graph, own_kwargs: str | None = None) -> tuple[AttrStore, ...]:
    """The attribute stores the function makes on objects that existed before the call, in
    Dynamo's order: the version replays them after its program, as Dynamo's own bytecode
    does.  Anything else that mutates a pre-existing object (a list or dict changed in place,
    an attribute deleted, an object without a source) and tensor hooks are refused."""
    se = output_graph.side_effects
    from torch._dynamo.source import LocalSource
    from torch._dynamo.variables.base import (
        AttributeMutationExisting,
        AttributeMutationNew,
        ValueMutationNew,
    )
    from torch._dynamo.variables.misc import DeletedVariable
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    stores = []
    for var in list(se.id_to_variable.values()):
        if not se.is_modified(var):
            continue
        src = getattr(var, "source", None)
        if own_kwargs is not None and type(src) is LocalSource and src.local_name == own_kwargs:
            continue  # the call's own **kwargs dict (see own_kwargs_name)
        mt = getattr(var, "mutation_type", None)
        if isinstance(mt, (AttributeMutationNew, ValueMutationNew)):
            continue  # an object created by the function: returned, not replayed
        attrs = se.store_attr_mutations.get(var)
        if (isinstance(mt, AttributeMutationExisting) and attrs
                and isinstance(var, UserDefinedObjectVariable)
                and getattr(var, "source", None) is not None
                and not _base_modified(var, se)):
            obj = getattr(var, "value", None)
            for name, value in attrs.items():
                if isinstance(value, DeletedVariable):
                    raise UnsupportedError(
                        f"the function deletes attribute {name!r} of {var.source.name}; "
                        "Trident replays attribute stores only")
                why = _plain_store(obj, name)
                if why:
                    raise UnsupportedError(
                        f"the function mutates a Python object that existed before the call: "
                        f"it stores {var.source.name}.{name}, and {why}")
                stores.append(AttrStore(var.source, name, value, obj))
            continue
        src = getattr(var, "source", None)
        raise UnsupportedError(
            f"the function mutates a Python object that existed before the call "
            f"({var}{' at ' + src.name if src is not None else ''}); "
            "Trident replays attribute stores on such objects, not this")
    if se.tensor_hooks:
        raise UnsupportedError("the function registers tensor hooks")
    return tuple(stores)


_MISSING = object()
_HINT = (" (a mode around the whole function compiles: a `with` block around the whole "
         "body, a decorator such as @torch.inference_mode(), or the mode around the call)")


def _grad_may_flow(gm) -> bool:
    """Whether any tensor of the graph (an input, a parameter, an attribute, an intermediate,
    in the capturing call's trace) requires grad, or one cannot tell. Where none does, grad
    mode changes nothing a version computes: no operator records history, every result's
    requires_grad is False either way (Dynamo breaks the graph at `requires_grad_()` and
    refuses factories with requires_grad=True, so none can start requiring grad inside)."""
    for mod in gm.modules():
        if not isinstance(mod, torch.fx.GraphModule):
            continue
        for n in mod.graph.nodes:
            if n.op == "get_attr":
                v = mod
                try:
                    for part in str(n.target).split("."):
                        v = getattr(v, part)
                except AttributeError:
                    return True
            else:
                v = n.meta.get("example_value", _MISSING)
                if v is _MISSING:
                    if n.op == "placeholder":
                        return True
                    continue
            for leaf in torch.utils._pytree.tree_leaves(v):
                if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
                    return True
    return False


def whole_function_mode(gm):
    """(run_mode, enter node, exit node) where the graph is one mode change around the whole
    function, as a `@torch.no_grad()`, `@torch.enable_grad()` or `@torch.inference_mode()`
    decorator makes it: the first call of the graph enters a mode that differs from the
    caller's, the last one leaves it (back to the caller's), and no operator runs outside.
    A version then runs its whole program under that mode (ir.Version.run_mode), as eager
    would; the global-state guard keeps the caller's state as at capture. None otherwise."""
    import torch.autograd.grad_mode as gmode

    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                   "call_module")]
    if len(calls) < 2:
        return None
    first, last = calls[0], calls[-1]
    if first.op != "call_function" or last.op != "call_function":
        return None
    if (first.target is torch._C._set_grad_enabled and last.target is torch._C._set_grad_enabled
            and len(first.args) == 1 and len(last.args) == 1 and not first.kwargs
            and not last.kwargs):
        want, back = first.args[0], last.args[0]
        now = torch.is_grad_enabled()
        if isinstance(want, bool) and want != now and back is now:
            return (2 if want else 1), first, last
        return None
    enter = getattr(gmode, "_enter_inference_mode", None)
    leave = getattr(gmode, "_exit_inference_mode", None)
    if (enter is not None and first.target is enter and last.target is leave
            and tuple(first.args) == (True,) and not first.kwargs
            and tuple(last.args) == (first,) and not torch.is_inference_mode_enabled()
            and len(first.users) == 1):
        return 3, first, last
    return None


def mode_change(gm, skip=()) -> str | None:
    """Why the graph cannot become a version, if it changes grad mode, inference mode or
    autocast inside the function (`with torch.no_grad()`, `torch.enable_grad()`,
    `torch.inference_mode()`, `torch.autocast(...)`): Dynamo records those as graph nodes, the
    ATen trace does not, and a version's program would run every operator under the caller's
    state (a `no_grad` block's results would record autograd history and change gradients).
    Dynamo records a grad-mode node only where the mode changes; a grad-mode change where no
    tensor of the graph requires grad (`_grad_may_flow`: the tensor guards then keep every
    input that way) and an autocast or inference-mode entry that changes nothing (autocast
    disabled where it is off, as in transformers' rotary embeddings) are allowed. This runs in
    the capturing call, whose state the versions' global-state guard then fixes. Subgraphs
    (higher-order operators' bodies) are searched too."""
    import torch.amp.autocast_mode as am
    import torch.autograd.grad_mode as gmode

    grad_flows = None
    for mod in gm.modules():
        if not isinstance(mod, torch.fx.GraphModule):
            continue
        for n in mod.graph.nodes:
            if n.op != "call_function" or n in skip:
                continue
            t = n.target
            if t is torch._C._set_grad_enabled:
                if grad_flows is None:
                    grad_flows = _grad_may_flow(gm)
                if grad_flows:
                    return ("the function changes grad mode inside (torch.no_grad, "
                            "torch.enable_grad or set_grad_enabled) where a tensor requires "
                            "grad: a version runs its operators under the caller's" + _HINT)
            if t is getattr(gmode, "_enter_inference_mode", None):
                mode = n.args[0] if n.args else True
                if bool(mode) != torch.is_inference_mode_enabled():
                    return ("the function changes inference mode inside: a version runs its "
                            "operators under the caller's" + _HINT)
            if t is getattr(am, "_enter_autocast", None):
                a = list(n.args)
                device = a[0] if a else "cuda"
                enabled = a[2] if len(a) > 2 else n.kwargs.get("enabled", True)
                if enabled or torch.is_autocast_enabled(device):
                    return (f"the function enters torch.autocast({device!r}, enabled={enabled}) "
                            "while that changes the autocast state: a version runs its "
                            "operators under the caller's" + _HINT)
    return None

