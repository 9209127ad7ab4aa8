"""The passes between lowering and codegen (trident/ir/passes): each records its decision in
the host IR, which the printer shows and codegen only prints."""

from __future__ import annotations

from trident.codegen.c import generate_version
from trident.ir import nodes as ir
from trident.ir import passes
from trident.ir.passes.env_block import env_block
from trident.ir.printer import print_version


def _version(guards, program=(), output=None, consts=(dict, object(), [1], 7)):
    return ir.Version(0, tuple(guards), tuple(program), output or ir.OutConst(3, "7"), 4,
                      consts=consts)


def test_env_block_takes_the_environment_guards_only():
    mod = ir.Global("mod")
    guards = [
        ir.TensorMatch(ir.Local(0, "x"), 1, "Tensor", 6, "float32", 0, -1, "cpu", False, 1,
                       (2,), (1,)),
        ir.IdMatch(ir.Attr(mod, "f"), 1, "mod.f"),
        ir.EqualsMatch(ir.Item(ir.Attr(mod, "cfg"), "n"), 0, 2, "[1]"),  # a mutable value
        ir.TypeMatch(ir.Local(1, "y"), 0, "dict"),  # an argument: not the environment
        ir.Contains(ir.Attr(mod, "s"), "set", 3, True, "7"),
        ir.LengthMatch(ir.Attr(mod, "d"), 0, "dict", 2),
        ir.NotInDict(ir.TypeOf(ir.ConstObj(1, "obj")), "x"),
    ]
    v = env_block(_version(guards))
    assert v.env.guards == (1, 2, 4, 5, 6)
    rows = {c.guard: c for c in v.env.checks}
    assert rows[1].kind == "id" and rows[1].chains == (
        (ir.EnvStep("global", "mod"), ir.EnvStep("attr", "f")),)
    assert rows[2].flags == ("uncovered",)
    assert rows[2].chains[0][-1] == ir.EnvStep("item_str", "n")
    assert set(rows[4].flags) == {"set", "uncovered", "present"}
    assert rows[5].flags == ("dict",) and rows[5].n == 2
    assert rows[6].name == "x" and rows[6].chains == (
        (ir.EnvStep("const", 1), ir.EnvStep("typeof", 0)),)
    assert "environment block [1] [2] (uncovered)" in print_version(v)
    c = generate_version(v).text
    assert c.count("TRT_EG_") == 5 and "static const int envg_ix[] = {1, 2, 4, 5, 6};" in c
    assert "{TRT_EG_CONTAINS, 13, " in c  # uncovered | present | set, from trident.abi


def test_without_the_pass_every_guard_is_inline():
    guards = [ir.IdMatch(ir.Attr(ir.Global("mod"), "f"), 1, "mod.f")]
    c = generate_version(_version(guards)).text
    assert "envg_desc" not in c and "trt_getattr" in c


def test_the_pipeline_is_idempotent():
    guards = [ir.IdMatch(ir.Attr(ir.Global("mod"), "f"), 1, "mod.f")]
    v = passes.run(_version(guards))
    assert passes.run(v) == v and passes.run(v).env == v.env


def _npow2(e):
    """Triton's next_power_of_2 as Dynamo writes it out: each step repeats its operand."""
    e = ir.BinOp("-", e, ir.IntConst(1))
    for sh in (1, 2, 4, 8, 16, 32):
        e = ir.BinOp("|", e, ir.BinOp(">>", e, ir.IntConst(sh)))
    return ir.BinOp("+", e, ir.IntConst(1))


def test_shared_subexpressions_are_computed_once():
    x = ir.Local(0, "x")
    tm = ir.TensorMatch(x, 1, "Tensor", 6, "float32", 0, -1, "cpu", False, 1, (None,), (1,))
    p = _npow2(ir.SymLeaf(ir.TensorSize(x, 0)))
    guard = ir.ShapeGuard(ir.BinOp("<=", p, ir.IntConst(4096)), "next_power_of_2(s0) <= 4096")
    plain = ir.ShapeGuard(ir.BinOp("<=", ir.IntConst(2), ir.SymLeaf(ir.TensorSize(x, 0))), "")
    v = passes.run(_version([tm, guard, plain]))
    shared = v.guards[1].shared
    assert v.guards[1] == guard and str(v.guards[1]) == str(guard)  # what misses report
    assert v.guards[2].shared is None  # nothing repeats
    # each of the six steps reads the previous one twice: six temporaries, the innermost first
    assert str(shared).count(":=") == 6 and "(t0 := (L['x'].size(0) - 1))" in str(shared)
    assert str(shared).startswith("((((t5 := ")
    assert "computed as ((" in print_version(v)
    c = generate_version(v).text
    assert "int64_t c1_5 = " in c and "int64_t c1_6" not in c
    assert len(c) < len(generate_version(_version([tm, guard, plain])).text)


def test_integers_of_the_inputs_move_first_and_int_arguments_are_checked():
    x, n = ir.Local(0, "x"), ir.Local(1, "n")
    program = (
        ir.LoadScalar(0, n, "int"),
        ir.LoadTensor(1, x),
        ir.Call("aten::clamp_", "", (ir.Slot(1), ir.ConstArg("int", 0)), (2,), True),
        ir.SymFromSlot("s0", 2),  # an integer an operator returned: stays in place
        ir.SymDef("s1", ir.BinOp("*", ir.SymLeaf(ir.PyInt(ir.Local(2, "m"))), ir.IntConst(2)),
                  3),
        ir.SymDef("s2", ir.BinOp("+", ir.SymVar("s0"), ir.IntConst(1)), 4),
    )
    tm = ir.TensorMatch(x, 1, "Tensor", 6, "float32", 0, -1, "cpu", False, 1, (2,), (1,))
    v = passes.run(_version([tm], program))
    assert [type(i).__name__ for i in v.program] == [
        "SymDef", "LoadScalar", "LoadTensor", "Call", "SymFromSlot", "SymDef"]
    assert v.program[0].var == "s1" and v.program[-1].var == "s2"
    # in the order lowering wrote them, not the reordered program's
    assert v.int_checks == (n, ir.Local(2, "m"))
    assert "ints checked to fit int64 after the guards (else a miss): L['n'], L['m']" \
        in print_version(v)
    c = generate_version(v).text
    assert c.index("trt_pyint(o1, &ok); if (!ok) FAIL(1)") < c.index("S->h.hits++")
    assert c.index("s1 = trt_mul(") < c.index("api->frame_set_tensor(F, 1")


def test_floats_of_the_inputs_move_first_and_their_ints_are_checked():
    # A FloatDef of the inputs' sizes and ints moves first (its failure is then a miss, not
    # the late error after the clamp_); one reading an operator's integer stays in place.
    x, m = ir.Local(0, "x"), ir.Local(2, "m")
    size = ir.SymLeaf(ir.TensorSize(x, 0))
    program = (
        ir.LoadTensor(0, x),
        ir.Call("aten::clamp_", "", (ir.Slot(0), ir.ConstArg("int", 0)), (1,), True),
        ir.SymFromSlot("s0", 1),
        ir.FloatDef("f1", ir.FloatBin("/", ir.FloatConst(1.0), ir.FloatOf(size)), 2),
        ir.FloatDef("f2", ir.FloatUn("sqrt", ir.FloatOf(ir.SymVar("s0"))), 3),
        ir.SymDef("s3", ir.IntOfFloat("floor", ir.IntDiv(ir.SymLeaf(ir.PyInt(m)),
                                                          ir.IntConst(3))), 4),
        ir.FloatDef("f4", ir.FloatBin("**", ir.FloatVar("f1"), ir.FloatConst(-0.5)), 5),
    )
    tm = ir.TensorMatch(x, 1, "Tensor", 6, "float32", 0, -1, "cpu", False, 1, (None,), (1,))
    v = passes.run(_version([tm], program))
    assert [getattr(i, "var", None) for i in v.program] == [
        "f1", "s3", "f4", None, None, "s0", "f2"]
    assert v.int_checks == (m,)
    text = print_version(v)
    assert "%2 = f1 = (1.0 / float(L['x'].size(0)))" in text
    assert "%4 = s3 = floor((int(L['m']) / 3))" in text
    c = generate_version(v).text
    for piece in ("trt_fdiv((0x1.0000000000000p+0), ((double)", "trt_fsqrt(((double)s0), &ok)",
                  "trt_float_to_int(trt_idiv(", "trt_fpow(f1, (-0x1.0000000000000p-1), &ok)",
                  "api->frame_set_double(F, 5, f4);"):
        assert piece in c, piece


def test_lowering_reads_no_knob_and_codegen_decides_nothing():
    import trident.codegen.c as c
    import trident.ir.lower as lower

    assert not hasattr(lower, "config")  # the knobs are read by passes.lowering_plan
    for name in ("_inputs_first", "_pyint_sources", "_env_guard", "_total", "_immutable"):
        assert not hasattr(c, name), name
    assert passes.PIPELINE[-2:] == (passes.int_checks, passes.inputs_first)  # lowering's order
