"""Capture one executed path of a function with TorchDynamo.

In: a Python function and one call's arguments.  Out: a `Capture` holding
the ATen-level graph of the path (symbolic where Dynamo made dimensions
dynamic), the complete list of guards Dynamo recorded for it, the shape
guards rendered over Trident's own variable names, what the graph's inputs
are (their Dynamo sources), and the call's own result.

Dynamo is driven through `torch.compile(fullgraph=True)` with a backend
that records the graph and a `guard_filter_fn` that records (and keeps) every
guard.  The capturing call runs the captured graph, so it returns its own
result.  Dynamo's own cache for the code object is cleared before each
capture: Trident's SCM, not Dynamo, decides which version runs.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading

from dataclasses import dataclass, field

import torch

from ..errors import CaptureError, UnsupportedError
from . import adapters


@dataclass
class GraphInput:
    """One placeholder of the graph: where its value comes from at call time."""

    source: object  # a Dynamo Source
    example: object  # FakeTensor, SymInt, int, float


@dataclass
class Capture:
    aten_graph: torch.fx.GraphModule
    dynamo_graph: torch.fx.GraphModule
    inputs: list
    guard_entries: list
    shape_exprs: list  # [(python expr over names, {name: Dynamo Source})]
    sizes_strides: dict  # Dynamo Source -> (sizes, strides) with None = symbolic
    global_state: bytes
    result: object
    graph_outputs: list  # the runner's outputs for the capturing call
    launches: list  # LaunchRecord per Triton launch, in graph order
    ret: object  # the return value as Dynamo knows it (see _describe_return)
    tf_mode_stack_len: int
    dynamic: bool = False
    notes: list = field(default_factory=list)
    # Guards Trident's adapters add (see capture/adapters.py): (kind, Source, payload).
    extra_guards: list = field(default_factory=list)
    # Globals Dynamo installed for the trace, name -> object (see SourceConverter.installed).
    installed_globals: dict = field(default_factory=dict)
    # A dynamic attempt stopped because a Triton launch's autotune key or heuristics read a
    # dynamic size, and this capture is the static retry.
    triton_needs_static: bool = False
    # The function's own whole-body mode (ir.RUN_MODES; see _whole_function_mode).
    run_mode: int = 0
    # The globals of the frame Dynamo traced (the function's own, or those of Dynamo's
    # wrap_inline frame around a function of torch's files: guards.translate.dynamo_wrapped).
    global_scope: dict | None = None


class _NeedStatic(Exception):
    """The graph launches a Triton kernel whose autotune key or heuristics
    read a dynamic size: capture again with static shapes (nothing ran)."""


class _Refused(Exception):
    """Raised by the guard filter when the backend refused the capture: Dynamo has built the
    path's guards (recorded for its eager version, `PathGuards`) and nothing ran. The call then
    runs eagerly, not through Dynamo's bytecode (torch 2.11's replay of a stored **kwargs
    dict lost the caller's items: what Trident refuses, Dynamo may not run right either)."""


class _GuardsRecorded(Exception):
    """Stops Dynamo's guard building once the guards of a failed trace are recorded."""


@dataclass
class PathGuards:
    """The guards Dynamo recorded for a path whose capture was refused, with what
    `guards.translate` reads beside the entries (the fields of `Capture` of the same names):
    the refused path's eager version runs under exactly these. For a trace that stopped (a
    graph break under fullgraph, an unsupported construct) they are the guards of the trace up
    to the point where it stopped, inlined functions included: every call that passes them
    traces the same way to the same point, and stops there too."""

    guard_entries: list
    shape_exprs: list
    sizes_strides: dict
    global_state: bytes
    tf_mode_stack_len: int
    extra_guards: list = field(default_factory=list)
    installed_globals: dict = field(default_factory=dict)
    global_scope: dict | None = None


def _path_guards(st, gstate, tf_len, adapted) -> PathGuards | None:
    """The recorded guards of this attempt (None where Dynamo built none)."""
    if "entries" not in st:
        return None
    return PathGuards(guard_entries=st["entries"], shape_exprs=st.get("shape_exprs", []),
                      sizes_strides=st.get("sizes", {}), global_state=gstate,
                      tf_mode_stack_len=tf_len, extra_guards=list(adapted.extra_guards),
                      installed_globals=dict(st.get("installed", {})),
                      global_scope=st.get("global_scope"))


def _sizes_strides(og) -> dict:
    sizes = {}
    for src, meta in og.input_source_to_sizes_strides.items():
        if "size" in meta and "stride" in meta:
            sizes[src] = (_concrete(meta["size"]), _concrete(meta["stride"]))
    return sizes


# The capture in progress on each thread (its state dict and guard filter), for the hook on
# Dynamo's root translator; the hook is installed while any thread captures.
_TRACE = threading.local()
_HOOK_LOCK = threading.Lock()
_HOOK: dict = {"users": 0, "orig": None, "had": False}


def _record_failed_trace(tx) -> None:
    """The root translator `tx` stopped with an error while this thread captures: record the
    guards of its trace so far (see _guards_of_failed_trace)."""
    from torch._dynamo.guards import CheckFunctionManager

    cur = getattr(_TRACE, "current", None)
    if cur is None:
        return
    st, guard_filter = cur
    og = getattr(tx, "output", None)
    if og is None or "entries" in st or st.get("need_static"):
        return

    def record(entries):
        guard_filter(entries)
        raise _GuardsRecorded()

    st["og"] = og
    try:
        st["sizes"] = _sizes_strides(og)
        CheckFunctionManager(tx.f_code, og, guard_filter_fn=record)
    except _GuardsRecorded:
        pass
    except Exception:  # noqa: BLE001 - no guards: the refusal keys on the call
        st.pop("entries", None)


@contextlib.contextmanager
def _guards_of_failed_trace(st: dict, guard_filter):
    """When Dynamo's trace of the root frame stops with an error (a graph break under
    fullgraph, an unsupported construct, a data-dependent branch), record the guards of the
    trace so far: Dynamo's own guard building over its output graph, as it would have run
    at the end, with `guard_filter` recording the entries (and stopping it there).  Restarts of
    the analysis are not failures.  Where the guards cannot be built, none are recorded.  The
    hook on `InstructionTranslator.run` is shared by the threads that capture at once (each
    records into its own capture's state) and removed when the last one is done."""
    from torch._dynamo import exc as dexc
    from torch._dynamo.symbolic_convert import InstructionTranslator

    restart = getattr(dexc, "RestartAnalysis", ())
    with _HOOK_LOCK:
        if _HOOK["users"] == 0:
            _HOOK["had"] = "run" in InstructionTranslator.__dict__
            orig = _HOOK["orig"] = InstructionTranslator.run

            def run(self):
                try:
                    return orig(self)
                except Exception as e:
                    if not isinstance(e, restart):
                        _record_failed_trace(self)
                    raise

            InstructionTranslator.run = run
        _HOOK["users"] += 1
    prev = getattr(_TRACE, "current", None)
    _TRACE.current = (st, guard_filter)
    try:
        yield
    finally:
        _TRACE.current = prev
        with _HOOK_LOCK:
            _HOOK["users"] -= 1
            if _HOOK["users"] == 0:
                if _HOOK["had"]:
                    InstructionTranslator.run = _HOOK["orig"]
                else:
                    del InstructionTranslator.run
                _HOOK["orig"] = None


class _GraphRunError(Exception):
    """Wraps an exception raised while running the captured graph itself."""

    def __init__(self, exc: BaseException):
        self.exc = exc


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


def _own_kwargs_name(fn) -> str | None:
    """The name of fn's `**kwargs` parameter: a dict made afresh for every call, so changes
    to it inside the call are seen by no one after it (unless it escapes, which the result's
    description refuses)."""
    co = getattr(fn, "__code__", None)
    if co is None or not co.co_flags & 0x08:  # CO_VARKEYWORDS
        return None
    return co.co_varnames[co.co_argcount + co.co_kwonlyargcount + bool(co.co_flags & 0x04)]


def _check_side_effects(output_graph, own_kwargs: str | None = None) -> list:
    """The attribute stores the function makes on objects that existed before the call, as
    [(object's Source, attribute name, VariableTracker stored)], in Dynamo's order: the
    version replays them after its program, as Dynamo's own bytecode does.  Anything else that
    mutates a pre-existing object (a list or dict changed in place, an attribute deleted, an
    object without a source) and tensor hooks are refused."""
    se = output_graph.side_effects
    from torch._dynamo.variables.base import (AttributeMutationExisting, AttributeMutationNew,
                                              ValueMutationNew)
    from torch._dynamo.variables.misc import DeletedVariable
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    from torch._dynamo.source import LocalSource

    stores = []
    store_objs = []  # the object each store goes to, for _check_described
    for var in list(se.id_to_variable.values()):
        if not se.is_modified(var):
            continue
        src = getattr(var, "source", None)
        if own_kwargs is not None and type(src) is LocalSource and src.local_name == own_kwargs:
            continue  # the call's own **kwargs dict (see _own_kwargs_name)
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
                stores.append((var.source, name, value))
                store_objs.append(obj)
            continue
        src = getattr(var, "source", None)
        raise UnsupportedError(
            f"the function mutates a Python object that existed before the call "
            f"({var}{' at ' + src.name if src is not None else ''}); "
            "Trident replays attribute stores on such objects, not this")
    if se.tensor_hooks:
        raise UnsupportedError("the function registers tensor hooks")
    output_graph._trident_store_objs = store_objs
    return stores


def _symbolic(fakes) -> bool:
    """Whether any graph input has a symbolic size or stride."""
    for f in fakes:
        if isinstance(f, torch.Tensor):
            if any(isinstance(v, torch.SymInt) for v in (*f.shape, *f.stride())):
                return True
        elif isinstance(f, torch.SymInt):
            return True
    return False


def _python_dispatcher():
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


_SIZE_LISTS = {"size": "sym_size", "stride": "sym_stride"}


def _rewrite_size_lists(gm) -> None:
    """`aten::size(t)` / `aten::stride(t)` (a whole list, not a dispatcher operator) read one
    element at a time: `getitem(size(t), i)` becomes `sym_size.int(t, i)`.  A list used any
    other way is refused (the runtime cannot call it)."""
    import operator

    if gm is None:
        return
    g = gm.graph
    changed = False
    for node in list(g.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        kind = _SIZE_LISTS.get(node.target._schema.name.partition("::")[2])
        if kind is None or node.target._schema.overload_name != "" or \
                not node.target._schema.name.startswith("aten::"):
            continue
        one = getattr(torch.ops.aten, kind).int
        for user in list(node.users):
            if not (user.op == "call_function" and user.target is operator.getitem
                    and len(user.args) == 2 and isinstance(user.args[1], int)):
                raise UnsupportedError(
                    f"the ATen graph uses the list {node.format_node()} other than by index")
            with g.inserting_before(user):
                new = g.call_function(one, (node.args[0], user.args[1]))
            new.meta.update(user.meta)
            user.replace_all_uses_with(new)
            g.erase_node(user)
        g.erase_node(node)
        changed = True
    if changed:
        g.lint()
        gm.recompile()


def _concrete(xs):
    out = []
    for x in xs:
        if isinstance(x, torch.SymInt):
            v = x.node.maybe_as_int()
            out.append(v)
        else:
            out.append(int(x))
    return tuple(out)


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


def _whole_function_mode(gm):
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


def _mode_change(gm, skip=()) -> str | None:
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


def capture(fn, args: tuple, kwargs: dict, *, dynamic, global_state_fn) -> Capture:
    """Capture `fn(*args, **kwargs)`; raises CaptureError / UnsupportedError.

    An exception raised by the user's own operations while the captured graph
    runs is re-raised as is (it is what eager raises).
    """
    from torch._dynamo.symbolic_convert import InstructionTranslator
    from torch.fx.experimental.proxy_tensor import make_fx

    st: dict = {"calls": 0}

    def backend(gm: torch.fx.GraphModule, example_inputs):
        st["calls"] += 1
        tx = InstructionTranslator.current_tx()
        og = tx.output
        st["og"] = og
        # Dynamo's guard manager is never used (the code's cache is reset after the capture;
        # Trident translates the guard entries): skip its self-check and its latency profile,
        # which flushes the CPU caches (about 25 ms a capture).  No guard entry changes.
        og.skip_guards_check = True
        stores = []
        try:
            stores = _check_side_effects(og, _own_kwargs_name(fn))
            st["store_objs"] = og._trident_store_objs
        except UnsupportedError as e:
            st["unsupported"] = str(e)
        inputs = []
        fakes = []
        for node in gm.graph.nodes:
            if node.op != "placeholder":
                continue
            ga = node.meta.get("grapharg")
            ex = node.meta.get("example_value")
            if ga is None:
                st["unsupported"] = f"graph input {node.name} has no source"
                ex = None
            inputs.append(GraphInput(ga.source if ga is not None else None, ex))
            fakes.append(ex)
        st["inputs"] = inputs
        whole = _whole_function_mode(gm)
        if whole is not None:
            st["run_mode"] = whole[0]
        change = _mode_change(gm, skip=whole[1:] if whole else ())
        if change is not None:
            st["unsupported"] = change
        try:
            st["ret"] = _describe_return(tx, gm, stores, fn)
        except UnsupportedError as e:
            st["unsupported"] = str(e)
        except Exception as e:  # noqa: BLE001 - a description Trident cannot make: refused
            st["unsupported"] = (f"the return value cannot be described "
                                 f"({type(e).__name__}: {_first_line(e)})")
        fake_mode = None
        for f in fakes:
            if isinstance(f, torch._subclasses.fake_tensor.FakeTensor):
                fake_mode = f.fake_mode
                break
        if fake_mode is None:
            fake_mode = torch._guards.detect_fake_mode(example_inputs)
        try:
            # Identity saved-tensor hooks on top: the user's own hooks must not
            # see the tracing (they run on the real tensors of the capturing run).
            # With symbolic sizes, the Python dispatcher is on while tracing (as AOTAutograd
            # does): composite operators then decompose through their symbolic-aware Python
            # decompositions (matmul's C++ one calls numel() on CUDA inputs).
            with torch.autograd.graph.saved_tensors_hooks(_same, _same), \
                    (_python_dispatcher() if _symbolic(fakes) else contextlib.nullcontext()):
                if fake_mode is not None:
                    with fake_mode:
                        aten = make_fx(gm, tracing_mode="real")(*fakes)
                else:
                    aten = make_fx(gm, tracing_mode="real")(*example_inputs)
            _rewrite_size_lists(aten)
        except Exception as e:  # noqa: BLE001 - reported as the reason
            st["unsupported"] = f"lowering to ATen failed: {type(e).__name__}: {e}"
            aten = None
        st["aten"] = aten
        st["gm"] = gm
        st["sizes"] = _sizes_strides(og)

        has_triton = any(_is_triton_node(n) for n in gm.graph.nodes)
        if has_triton and dynamic is not False and _triton_needs_static(gm):
            st["need_static"] = True
            raise _NeedStatic()
        if "unsupported" in st:
            # Refused: Dynamo goes on to build the path's guards, which the guard filter
            # records before it stops the compile (_Refused), so nothing runs.
            st["refused"] = True
            return _never_runs
        st["launches"] = []

        def runner(*a):
            try:
                if has_triton:
                    outs = _RecordingInterpreter(gm, st["launches"]).run(*a)
                else:
                    outs = gm(*a)
            except Exception as e:  # noqa: BLE001 - re-raised unchanged by capture()
                raise _GraphRunError(e) from e
            st["outs"] = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            return outs

        return runner

    def guard_filter(entries):
        # Dynamo builds the guards before the traced call runs; the function may then change
        # its own **kwargs dict, and an attribute may appear: what a guard compares with is
        # read here, before the call (_before_call).
        st["entries"] = [_before_call(e) for e in entries]
        og = st.get("og")
        if og is not None:  # see SourceConverter.installed
            scope = getattr(og, "global_scope", None) or {}
            st["installed"] = {n: scope[n] for n in getattr(og, "installed_globals", ())
                               if n in scope}
            st["global_scope"] = scope or None
        exprs = []
        if og is not None and any(e.guard_type == "SHAPE_ENV" for e in entries):
            shape_env = og.shape_env
            fs = shape_env.tracked_fakes or []
            names: dict = {}

            def source_ref(src):
                key = src.name
                if key not in names:
                    names[key] = (f"_v{len(names)}", src)
                return names[key][0]

            helpers = shape_env.produce_guards_verbose(
                [a.fake for a in fs], [a.source for a in fs],
                input_contexts=[a.symbolic_context for a in fs],
                source_ref=source_ref, langs=("python",))
            mapping = {v[0]: v[1] for v in names.values()}
            exprs = [(e, mapping) for e in helpers[0].exprs]
        st["shape_exprs"] = exprs
        if st.get("refused"):
            raise _Refused(st["unsupported"])
        return [True] * len(entries)

    from torch._C._dynamo.eval_frame import reset_code

    reset_code(fn.__code__)
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic,
                             options={"guard_filter_fn": guard_filter})
    def empty_graph(og):
        # Dynamo skips the backend when the path runs no operation; Trident
        # still wants the path as a version (it returns inputs and constants).
        g = torch.fx.Graph()
        g.graph_copy(og.graph, {})
        g.output(())
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        backend(gm, [n.meta.get("example_value") for n in g.nodes if n.op == "placeholder"])

    gstate = global_state_fn()
    tf_len = torch._C._len_torch_function_stack()
    adapted = adapters.State(empty_graph=empty_graph, backend_calls=lambda: st["calls"])
    try:
        # Python floats are specialized (a new value is a new version), as in
        # torch.compile's defaults before 2.6: a dynamic float needs float
        # shape guards (math.isnan ...) the SCM does not evaluate.
        with torch._dynamo.config.patch(specialize_float=True), adapters.active(adapted), \
                _guards_of_failed_trace(st, guard_filter):
            result = compiled(*args, **kwargs)
    except _GraphRunError as e:
        raise e.exc from None
    except Exception as e:  # noqa: BLE001
        if st.get("refused"):
            # Nothing ran: no `result`, so the caller runs the function eagerly.
            err = UnsupportedError(st["unsupported"])
            err.guards = _path_guards(st, gstate, tf_len, adapted)
            raise err from None
        static_guards = None
        if dynamic is not False and (st.get("need_static") or st["calls"] == 0):
            # Nothing ran yet (Dynamo stopped while tracing, or the backend
            # asked for static shapes): a dynamic size may be what Dynamo or
            # a Triton launch cannot handle, so try once with static shapes.
            reset_code(fn.__code__)
            try:
                cap = capture(fn, args, kwargs, dynamic=False, global_state_fn=global_state_fn)
            except CaptureError as static_err:
                if st.get("need_static"):
                    raise
                # The static trace stopped too.  The dynamic trace's guards key the path's
                # eager version (a call that passes them traces to the same stop), or else the
                # static trace's.
                static_guards = getattr(static_err, "guards", None)
            else:
                cap.triton_needs_static = bool(st.get("need_static"))
                cap.notes.append("captured with static shapes: "
                                 + ("a Triton autotune key or heuristic reads a dynamic size"
                                    if st.get("need_static") else
                                    f"with dynamic shapes Dynamo failed: {_first_line(e)}"))
                return cap
        inner = e
        while isinstance(inner, _GraphRunError) or isinstance(inner.__cause__, _GraphRunError):
            inner = inner.exc if isinstance(inner, _GraphRunError) else inner.__cause__
            if isinstance(inner, _GraphRunError):
                continue
            raise inner from None
        err = CaptureError(f"{type(e).__name__}: {_first_line(e)}")
        err.guards = _path_guards(st, gstate, tf_len, adapted) or static_guards
        raise err from e
    finally:
        reset_code(fn.__code__)
        _forget_backend(backend)
    reason = None
    if st["calls"] == 0:
        reason = ("Dynamo produced no graph (the function runs no tensor operation "
                  "Trident can capture)")
    elif st["calls"] > 1:
        reason = "Dynamo produced several graphs"
    elif "unsupported" in st:
        reason = st["unsupported"]
    if reason is None:
        reason = _check_described(st.get("ret"), result, st.get("store_objs", []))
    if reason is not None:
        # The capturing call already ran correctly: hand its result back.
        err = UnsupportedError(reason)
        err.result = result
        err.guards = _path_guards(st, gstate, tf_len, adapted)
        raise err
    return Capture(
        aten_graph=st["aten"], dynamo_graph=st["gm"], inputs=st["inputs"],
        guard_entries=st.get("entries", []), shape_exprs=st.get("shape_exprs", []),
        sizes_strides=st["sizes"], global_state=gstate, result=result,
        graph_outputs=st.get("outs", []), launches=st.get("launches", []),
        ret=st.get("ret"),
        tf_mode_stack_len=tf_len,
        dynamic=bool(dynamic),
        extra_guards=list(adapted.extra_guards),
        installed_globals=dict(st.get("installed", {})),
        run_mode=st.get("run_mode", 0),
        global_scope=st.get("global_scope"))


def _forget_backend(backend) -> None:
    """Drop this capture's backend from Dynamo's process-wide `cached_backends` (kept there for
    `torch._dynamo.reset`): it closes over the capture's state (the OutputGraph, the graphs,
    the fake mode), about 0.2 MB a capture that would otherwise live as long as the process."""
    cached = getattr(torch._dynamo.eval_frame, "cached_backends", None)
    if not isinstance(cached, dict):
        return
    for key, value in list(cached.items()):
        if value is backend or getattr(value, "compiler_fn", None) is backend:
            cached.pop(key, None)


def _describe_return(tx, gm, stores=(), fn=None):
    """The function's return value as Dynamo tracks it, as plain data:
    ("out", i, kind)  the i-th graph output (kind: tensor | int | bool)
    ("in", j, kind)   the j-th graph input, returned as it came in
    ("const", value)  a constant under this version's guards
    ("seq", "tuple"|"list", [items]) / ("dict", [(key, item)])
    ("stores", result, [(Source, name, item)])  attribute stores on pre-existing objects
                      (see _check_side_effects), made before the result is returned
    ("new", cls, [(field, item)])  a dataclass object the function created (a Hugging Face
                      ModelOutput): rebuilt by calling cls(field=item, ...); the capture
                      checks that this call rebuilds the object it returned
                      (_check_described)
    Dynamo rebuilds the result from exactly this, so nothing is guessed."""
    from torch._dynamo.source import LocalSource
    from torch._dynamo.variables import (ConstantVariable, ConstDictVariable, ListVariable,
                                         SymNodeVariable, TensorVariable, TupleVariable)
    from torch._dynamo.variables.base import AttributeMutationNew
    from torch._dynamo.variables.lists import SizeVariable
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    from . import rebuild

    if not tx.stack:
        raise UnsupportedError("cannot see the function's return value")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    out_pos = {id(n): i for i, n in enumerate(outs) if isinstance(n, torch.fx.Node)}
    in_pos = {id(n): j for j, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}

    def expr_of(node):
        ev = node.meta.get("example_value")
        return ev.node.expr if isinstance(ev, (torch.SymInt, torch.SymBool)) else None

    def node_ref(vt, kind):
        node = vt.proxy.node
        if kind != "tensor":
            # Dynamo returns a symbolic value through whichever graph value
            # carries the same expression (e.g. the placeholder s0 for x.size(0)).
            num = vt.sym_num
            if not isinstance(num, (torch.SymInt, torch.SymBool)):
                return ("const", num)
            e = num.node.expr
            for i, n in enumerate(outs):
                if isinstance(n, torch.fx.Node) and expr_of(n) == e:
                    return ("out", i, kind)
            for n in gm.graph.nodes:
                if n.op == "placeholder" and expr_of(n) == e:
                    return ("in", in_pos[id(n)], kind)
        if id(node) in out_pos:
            return ("out", out_pos[id(node)], kind)
        if id(node) in in_pos:
            return ("in", in_pos[id(node)], kind)
        if kind == "tensor" and getattr(vt, "source", None) is not None:
            return source_ref(vt.source)  # an input Dynamo pruned from the graph
        raise UnsupportedError(f"returned {kind} {node.name} is not a graph value")

    own_kwargs = _own_kwargs_name(fn)

    def source_ref(src):
        if type(src) is LocalSource and src.local_name == own_kwargs:
            # The call's own **kwargs dict, which the function may have changed (those
            # changes are not replayed): it must not escape.
            raise UnsupportedError(f"the function returns or stores its **{own_kwargs} dict")
        return ("source", src)

    walked: dict = {}  # id(vt) -> [share number or None] of the new containers walked

    def walk(vt, depth=0):
        if depth > 32:
            raise UnsupportedError("result nested too deeply")
        if isinstance(vt, TensorVariable):
            if type(vt).__name__ == "NumpyNdarrayVariable":  # a torch._numpy array
                if getattr(vt, "source", None) is not None:
                    return source_ref(vt.source)  # an argument's array, returned as itself
                return ("rebuild", rebuild.ndarray, [("value", node_ref(vt, "tensor"))])
            return node_ref(vt, "tensor")
        if getattr(vt, "source", None) is None and (
                isinstance(vt, (ListVariable, ConstDictVariable, UserDefinedObjectVariable))
                or type(vt).__name__ in ("DequeVariable", "SetVariable")):
            # A container the function made: where it is returned (or stored) twice, the
            # version builds it once and hands out the same object at each place.
            if id(vt) in walked:
                share = walked[id(vt)]
                if not share:
                    share.append(len(walked))
                return ("same", share[0], None)
            walked[id(vt)] = share = []
            desc = walk_new(vt, depth)
            return ("same", share, desc)  # share stays empty unless the object comes again
        return walk_new(vt, depth)

    def walk_new(vt, depth):
        if isinstance(vt, SymNodeVariable):
            t = vt.python_type()
            if t not in (int, bool):
                raise UnsupportedError(f"a returned symbolic {t.__name__}")
            return node_ref(vt, t.__name__)
        if isinstance(vt, ConstantVariable):
            return ("const", vt.as_python_constant())
        if isinstance(vt, ConstDictVariable) and own_kwargs is not None:
            # The function may change its own **kwargs dict, and Dynamo does not say the same
            # thing of that dict in every version (torch 2.11 returned it with items missing):
            # a function with **kwargs returns or stores no dict.
            raise UnsupportedError(f"a function with **{own_kwargs} returns or stores a dict")
        if (isinstance(vt, (TupleVariable, ListVariable, ConstDictVariable))
                and getattr(vt, "source", None) is not None):
            # An argument (or global) container returned as it came: the same
            # object (pre-existing objects that were mutated are refused).
            return source_ref(vt.source)
        if type(vt) in (TupleVariable, ListVariable):
            kind = "tuple" if type(vt) is TupleVariable else "list"
            return ("seq", kind, [walk(i, depth + 1) for i in vt.items])
        if type(vt) is SizeVariable:  # a torch.Size built in the function (x.shape)
            return ("seq", "size", [walk(i, depth + 1) for i in vt.items])
        if type(vt) is ConstDictVariable and vt.python_type() is dict:
            items = []
            for k, v in vt.items.items():
                key = k.vt.as_python_constant() if hasattr(k, "vt") else k
                items.append((key, walk(v, depth + 1)))
            return ("dict", items)
        if (type(vt).__name__ == "GetAttrVariable" and isinstance(vt.obj, TensorVariable)
                and isinstance(vt.name, str) and vt.name.isidentifier()):
            # an attribute Dynamo reads when it returns it (a numpy array's .strides)
            return ("rebuild", rebuild.attribute,
                    [("obj", walk(vt.obj, depth + 1)), ("name", ("arg", vt.name))])
        if type(vt).__name__ == "DequeVariable" and getattr(vt, "source", None) is None:
            return ("rebuild", rebuild.deque,
                    [("items", ("seq", "list", [walk(i, depth + 1) for i in vt.items])),
                     ("maxlen", ("arg", vt.maxlen.as_python_constant()))])
        if (type(vt).__name__ in ("SetVariable", "FrozensetVariable")
                and getattr(vt, "source", None) is None):
            fn = rebuild.set_of if type(vt).__name__ == "SetVariable" else rebuild.frozenset_of
            return ("rebuild", fn,
                    [("items", ("seq", "tuple", [walk(x.vt, depth + 1) for x in vt.set_items]))])
        if (type(vt).__name__ in ("NamedTupleVariable", "StructSequenceVariable")
                and getattr(vt, "source", None) is None
                and not tx.output.side_effects.store_attr_mutations.get(vt)
                and _plain_type(vt.python_type(), tuple)):
            # a namedtuple or a structseq (torch.return_types.max) the function made
            return ("rebuild", rebuild.tuple_of,
                    [("cls", ("arg", vt.python_type())),
                     ("items", ("seq", "tuple", [walk(i, depth + 1) for i in vt.items]))])
        if isinstance(vt, UserDefinedObjectVariable):
            if isinstance(getattr(vt, "mutation_type", None), AttributeMutationNew):
                cls = vt.python_type()
                if tx.output.side_effects.store_attr_mutations.get(vt):
                    pass  # attributes of its own: new_object says why (or rebuilds a dataclass)
                elif hasattr(vt, "_base_vt") and isinstance(vt._base_vt, ConstDictVariable) \
                        and _plain_type(cls, dict) \
                        and not issubclass(cls, collections.defaultdict):  # its factory
                    keys, values = [], []
                    for k, v in vt._base_vt.items.items():
                        keys.append(k.vt.as_python_constant() if hasattr(k, "vt") else k)
                        values.append(walk(v, depth + 1))
                    if not all(type(k) in (str, int) for k in keys):
                        raise UnsupportedError(f"a returned {cls.__qualname__} has keys that "
                                               "are not constant strings or ints")
                    return ("rebuild", rebuild.dict_of,
                            [("cls", ("arg", cls)), ("keys", ("arg", tuple(keys))),
                             ("values", ("seq", "tuple", values))])
                return new_object(vt, depth)
            src = getattr(vt, "source", None)
            # A pre-existing object returned as itself (a KV cache passed in).  Loaded after
            # the stores, so when there are stores only through a path of items from a
            # parameter: an attribute path could lead to an object the stores replaced.
            if src is not None and (not stores or _item_path(src)):
                return source_ref(src)
        if vt.is_python_constant():
            v = vt.as_python_constant()
            if type(v) in (int, float, bool, str, type(None), torch.dtype, torch.device):
                return ("const", v)
        src = getattr(vt, "source", None)
        raise UnsupportedError(f"a returned {type(vt).__name__}"
                               + (f" ({src.name})" if src is not None else ""))

    seen_new: set = set()

    def new_object(vt, depth):
        if id(vt) in seen_new:
            # One object at two places (returned twice, or stored and returned): the version
            # would build two.
            raise UnsupportedError("a new object is returned or stored at two places")
        seen_new.add(id(vt))
        cls = vt.python_type()
        name = getattr(cls, "__qualname__", repr(cls))
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise UnsupportedError(f"a returned new {name} object (only dataclasses are rebuilt)")
        fields = dataclasses.fields(cls)
        if any(not f.init for f in fields):
            raise UnsupportedError(f"a returned new {name}: a field is not an __init__ argument")
        attrs = tx.output.side_effects.store_attr_mutations.get(vt) or {}
        names = [f.name for f in fields]
        extra = sorted(set(attrs) - set(names))
        if extra:
            raise UnsupportedError(
                f"a returned new {name} has attributes besides its fields: {extra}")
        items = []
        for n in names:
            if n not in attrs:
                raise UnsupportedError(f"a returned new {name}: field {n!r} not set")
            items.append((n, walk(attrs[n], depth + 1)))
        return ("new", cls, items)

    def settle(d):
        """("same", [k], desc) -> ("same", k, desc) where the object comes again, else desc."""
        if not isinstance(d, tuple) or not d:
            return d
        if d[0] == "same":
            if d[2] is None:
                return d
            inner = settle(d[2])
            return ("same", d[1][0], inner) if d[1] else inner
        if d[0] == "seq":
            return ("seq", d[1], [settle(x) for x in d[2]])
        if d[0] == "dict":
            return ("dict", [(k, settle(v)) for k, v in d[1]])
        if d[0] in ("new", "rebuild"):
            return (d[0], d[1], [(n, settle(v)) for n, v in d[2]])
        if d[0] == "stores":
            return ("stores", settle(d[1]), [(src, n, settle(v)) for src, n, v in d[2]])
        return d

    # The stores first: the version makes them before it builds the result (OutStores), so an
    # object both stored and returned is built at its store and is that object in the result.
    out = []
    for src, name, value in stores:
        try:
            item = walk(value)
            if own_kwargs is not None and item[0] not in ("out", "in", "const"):
                # With **kwargs, only tensors, sizes and constants are stored: on torch 2.11 a
                # stored **kwargs dict escaped every check above and was replayed without
                # the items the caller passed (a wrong result)
                raise UnsupportedError(f"a function with **{own_kwargs} stores an object")
            out.append((src, name, item))
        except UnsupportedError as e:
            raise UnsupportedError(
                f"the function mutates a Python object that existed before the call: it "
                f"stores into {src.name}.{name} a value Trident cannot replay ({e})") from None
    result = walk(tx.stack[-1])
    return settle(("stores", result, out) if stores else result)


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


# Guard kinds whose check `translate` reads from the entry's value's contents.
_CONTENT_KINDS = ("SEQUENCE_LENGTH", "LIST_LENGTH", "DICT_LENGTH", "DICT_KEYS", "DICT_KEYS_MATCH",
                  "EMPTY_NN_MODULE_HOOKS_DICT")


@dataclass(frozen=True)
class Presence:
    """A HASATTR entry's answer, taken before the call: `hasattr(object, name)`."""

    present: bool


def _before_call(e):
    """A guard entry whose value no longer changes with the call: a container's shallow copy
    for the kinds that read its contents (a function's own **kwargs dict is the one pre-existing
    container it may change), and for HASATTR a `Presence` (torch >= 2.12 puts HASATTR on the
    object, with `attr=`; torch <= 2.11 on the attribute's own source, whose value is missing
    exactly when the attribute is)."""
    if e.guard_type == "HASATTR":
        kw = getattr(e.orig_guard.create_fn, "keywords", None) or {}
        if "attr" in kw:
            if not e.has_value:
                return e
            present = hasattr(e.value, kw["attr"])
        else:
            present = bool(e.has_value)
        return dataclasses.replace(e, value=Presence(present), has_value=True)
    if e.guard_type in _CONTENT_KINDS and e.has_value and type(e.value) in (dict, list, set):
        return dataclasses.replace(e, value=type(e.value)(e.value))
    return e


def _item_path(src) -> bool:
    """Whether `src` is a parameter or an item (by index or key) of one, item of that, ...:
    a path no attribute store can redirect."""
    from torch._dynamo.source import DictGetItemSource, GetItemSource, LocalSource

    while isinstance(src, (DictGetItemSource, GetItemSource)):
        src = src.base
    return type(src) is LocalSource


def _check_described(desc, real, store_objs=(), seen=None) -> str | None:
    """Why the version's description of the result (and of the values it stores) would not
    rebuild what the capturing call itself returned and stored, or None.  Checked on that
    call: containers have the same type, length and keys in order, constants are equal, and
    calling each new dataclass's class with its field values rebuilds the same object (the same
    type, instance attributes and, for a dict subclass such as a ModelOutput, the same keys in
    order, each value the same object).  A description Dynamo got wrong is refused, never run."""
    if not isinstance(desc, tuple) or not desc:
        return None
    if seen is None:
        seen = {}  # share number -> the object a shared container's first place holds
    tag = desc[0]
    if tag == "stores":  # in the order the version builds them: the stores, the result
        if len(store_objs) != len(desc[2]):
            return "the stores are not what Dynamo described"
        for obj, (_, name, item) in zip(store_objs, desc[2]):
            try:
                stored = getattr(obj, name)
            except AttributeError:
                return f"the stored attribute {name!r} is missing after the call"
            why = _check_described(item, stored, seen=seen)
            if why:
                return f"the value stored in .{name}: {why}"
        return _check_described(desc[1], real, seen=seen)
    if tag == "const":
        ok = type(real) is type(desc[1]) and (real is desc[1] or real == desc[1])
        return None if ok else "a returned constant is not what Dynamo described"
    if tag == "seq":
        kinds = {"tuple": tuple, "list": list, "size": torch.Size}
        if type(real) is not kinds[desc[1]] or len(real) != len(desc[2]):
            return f"a returned {desc[1]} is not what Dynamo described"
        for d, r in zip(desc[2], real):
            why = _check_described(d, r, seen=seen)
            if why:
                return why
        return None
    if tag == "dict":
        if type(real) is not dict or list(real) != [k for k, _ in desc[1]]:
            return "a returned dict is not what Dynamo described"
        for k, d in desc[1]:
            why = _check_described(d, real[k], seen=seen)
            if why:
                return why
        return None
    if tag == "same":
        if desc[2] is None:
            return None if seen.get(desc[1]) is real else \
                "an object returned at two places is two objects"
        if desc[1] is not None:
            seen[desc[1]] = real
        return _check_described(desc[2], real, seen=seen)
    if tag == "rebuild":
        from . import rebuild

        args = {n: d[1] for n, d in desc[2] if d[0] == "arg"}
        items = dict(desc[2])
        why, parts = rebuild.check(desc[1], real, args, items)
        if why:
            return why
        for name, _, part in parts:
            why = _check_described(items[name], part, seen=seen)
            if why:
                return why
        return None
    if tag != "new":
        return None
    cls, items = desc[1], desc[2]
    name = cls.__qualname__
    if type(real) is not cls:
        return f"the returned {name} is a {type(real).__qualname__}"
    kw = {}
    for n, d in items:
        kw[n] = getattr(real, n)
        why = _check_described(d, kw[n], seen=seen)
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


def _same(t):
    return t


def _never_runs(*args):
    raise AssertionError("trident: a refused capture's graph ran")  # the guard filter stops it


def _triton_needs_static(gm) -> bool:
    """Does a Triton launch in `gm` feed a dynamic value to an autotune key
    or to a kernel under @triton.heuristics?  (Its config would then hold
    only for the captured value.)"""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from triton.runtime.autotuner import Autotuner, Heuristics

    for n in gm.graph.nodes:
        if not _is_triton_node(n):
            continue
        k = kernel_side_table.get_kernel(n.kwargs["kernel_idx"])
        from ..triton.launch import select_info

        if select_info(k) is not None:
            continue  # its config is chosen per call (ir.LaunchSelect)
        keys: set = set()
        heur = False
        while hasattr(k, "fn") and not hasattr(k, "device_caches"):
            if isinstance(k, Autotuner):
                keys.update(getattr(k, "keys", None) or getattr(k, "key", None) or ())
            elif isinstance(k, Heuristics):
                heur = True
            k = k.fn
        for name, v in dict(n.kwargs.get("kwargs", {})).items():
            if isinstance(v, torch.fx.Node):
                ex = v.meta.get("example_value", v.meta.get("val"))
                if not isinstance(ex, torch.Tensor) and (heur or name in keys):
                    return True
    return False


def _is_triton_node(n) -> bool:
    return n.op == "call_function" and "triton_kernel_wrapper" in str(n.target)


class _RecordingInterpreter(torch.fx.Interpreter):
    """Runs the captured graph and records each Triton launch's real values."""

    def __init__(self, gm, out: list):
        super().__init__(gm)
        self.out = out

    def call_function(self, target, args, kwargs):
        if "triton_kernel_wrapper" in str(target):
            from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

            from ..triton.launch import LaunchRecord, select_info

            rec = LaunchRecord(
                kernel_idx=kwargs["kernel_idx"], constant_args_idx=kwargs["constant_args_idx"],
                grid=list(kwargs["grid"]), kwargs=dict(kwargs["kwargs"]))
            self.out.append(rec)
            kernel = kernel_side_table.get_kernel(rec.kernel_idx)
            info = select_info(kernel)
            if info is not None:
                # Launch through the user's own autotuner (its cache and its
                # choice for this key, as eager), not Dynamo's key-less copy.
                dynamo_tuner, user_tuner, _jit = info
                consts = dict(kernel_side_table.get_constant_args(rec.constant_args_idx))
                grids = [tuple(g) + (1,) * (3 - len(g)) for g in rec.grid] or [(1, 1, 1)]
                configs = dynamo_tuner.configs

                def grid_fn(meta):
                    for i, c in enumerate(configs):
                        if all(meta.get(k, _MISSING) == v for k, v in c.kwargs.items()):
                            return grids[i if len(grids) > 1 else 0]
                    raise RuntimeError("trident: no captured grid for this autotune config")

                user_tuner[grid_fn](**consts, **rec.kwargs)
                rec.best_config = user_tuner.best_config
                return None
            out = super().call_function(target, args, kwargs)
            if hasattr(kernel, "best_config"):
                rec.best_config = kernel.best_config
            return out
        return super().call_function(target, args, kwargs)


_MISSING = object()
_HINT = (" (a mode around the whole function compiles: a `with` block around the whole "
         "body, a decorator such as @torch.inference_mode(), or the mode around the call)")


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__
