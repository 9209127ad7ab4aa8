"""Golden text of the host IR (after the passes, trident/ir/passes) and the
generated C for hand-built versions: one of ATen calls with symbolic sizes, one
launching a Triton CUBIN.  Set
TRIDENT_UPDATE_GOLDEN=1 to rewrite the expected files after a deliberate
change, then review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trident.codegen.c import generate
from trident.ir import nodes as ir
from trident.ir import passes
from trident.ir.printer import print_version

HERE = Path(__file__).parent


def _aten_version() -> ir.Version:
    x = ir.Local(0, "x")
    w = ir.Local(1, "w")
    guards = (
        ir.GlobalState(tuple(range(48)), ("GLOBAL_STATE", "GRAD_MODE")),
        ir.TensorMatch(x, 0, "Tensor", 6, "float32", 0, -1, "cpu", False, 0x9400010001,
                       (None, 128), (128, 1)),
        ir.TensorMatch(w, 0, "Tensor", 6, "float32", 0, -1, "cpu", False, 0x9400010001,
                       (128,), (1,)),
        ir.EqualsMatch(ir.Local(2, "eps"), 1, 2, "1e-06"),
        ir.IdMatch(ir.Attr(ir.Global("torch"), "rsqrt"), 3, "torch.rsqrt"),
        # through a function attribute: the environment block (a function slot record)
        ir.IdMatch(ir.Attr(ir.Global("helper"), "__code__"), 4, "helper.__code__"),
        ir.Distinct((x, w)),
        ir.ShapeGuard(ir.BinOp("<=", ir.IntConst(2), ir.SymLeaf(ir.TensorSize(x, 0))),
                      "2 <= s0"),
    )
    program = (
        ir.LoadTensor(0, x), ir.LoadTensor(1, w),
        ir.SymDef("s0", ir.SymLeaf(ir.TensorSize(x, 0)), 2),
        ir.Call("aten::pow", "Tensor_Scalar", (ir.Slot(0), ir.ConstArg("int", 2)), (3,),
                below=True),
        ir.Call("aten::mean", "dim", (ir.Slot(3), ir.ListArg((-1,)), ir.ConstArg("bool", True),
                                       ir.ConstArg("none", None)), (4,)),
        ir.Call("aten::add", "Tensor", (ir.Slot(4), ir.ConstArg("double", 1e-6),
                                        ir.ConstArg("int", 1)), (5,)),
        ir.Call("aten::rsqrt", "", (ir.Slot(5),), (6,)),
        ir.Call("aten::mul", "Tensor", (ir.Slot(0), ir.Slot(6)), (7,)),
        ir.Call("aten::mul", "Tensor", (ir.Slot(7), ir.Slot(1)), (8,)),
    )
    out = ir.OutSeq("tuple", (ir.OutSlot(8), ir.OutSym("s0"), ir.OutSource(x)))
    return ir.Version(0, guards, program, out, 9, consts=(object(),) * 5)


def _triton_version() -> ir.Version:
    x = ir.Local(0, "x")
    w = ir.Local(1, "weight")
    guards = (
        ir.TensorMatch(x, 0, "Tensor", 6, "float32", 1, 0, "cuda:0", False, 0x2000000000002,
                       (1024, 128), (128, 1)),
        ir.TensorMatch(w, 0, "Tensor", 6, "float32", 1, 0, "cuda:0", False, 0x2000000000002,
                       (128,), (1,)),
    )
    launch = ir.TritonLaunch(
        kernel="rms_norm_kernel", symbol="rms_norm_kernel", cubin_const=1, num_warps=4,
        num_ctas=1, shared=0, cooperative=False, pdl=False,
        params=(ir.LaunchParam("X", "ptr", ir.Slot(0), True, 6),
                ir.LaunchParam("W", "ptr", ir.Slot(1), True, 6),
                ir.LaunchParam("Y", "ptr", ir.Slot(2), True, 6),
                ir.LaunchParam("stride", "i32", ir.ConstArg("int", 128), True, -1),
                ir.LaunchParam("N", "i32", ir.ConstArg("int", 128), True, -1),
                ir.LaunchParam("eps", "fp32", ir.ConstArg("double", 1e-6), False, -1)),
        grid=(ir.IntConst(1024), ir.IntConst(1), ir.IntConst(1)), config="")
    program = (
        ir.LoadTensor(0, x), ir.LoadTensor(1, w),
        ir.Call("aten::empty_like", "", (ir.Slot(0),) + (ir.ConstArg("none", None),) * 5, (2,)),
        launch,
    )
    return ir.Version(0, guards, program, ir.OutSlot(2), 3, consts=(object(), b"cubin"))


def _triton_select_version() -> ir.Version:
    # an @triton.autotune kernel over a dynamic size: the key (both pointers'
    # alignment, n) selects the variant per call; one grid row per config
    x = ir.Local(0, "x")
    guards = (
        ir.TensorMatch(x, 0, "Tensor", 6, "float32", 1, 0, "cuda:0", False, 0x2000000000002,
                       (None,), (1,)),
    )
    s0 = ir.SymVar("s0")

    def cdiv(b):
        return ir.BinOp("//", ir.BinOp("+", s0, ir.IntConst(b - 1)), ir.IntConst(b))

    select = ir.LaunchSelect(
        resolver_const=2,
        keys=(("X", ir.Slot(0), "ptr"), ("Y", ir.Slot(2), "ptr"), ("n", ir.Slot(1), "int")),
        grids=((cdiv(128), ir.IntConst(1), ir.IntConst(1)),
               (cdiv(1024), ir.IntConst(1), ir.IntConst(1))),
        transforms=("raw", "raw", "log2"))
    launch = ir.TritonLaunch(
        kernel="scale", symbol="scale", cubin_const=1, num_warps=4,
        num_ctas=1, shared=0, cooperative=False, pdl=False,
        params=(ir.LaunchParam("X", "ptr", ir.Slot(0), True, 6),
                ir.LaunchParam("Y", "ptr", ir.Slot(2), True, 6),
                ir.LaunchParam("n", "i32", ir.Slot(1), False, -1),
                ir.LaunchParam("s", "fp32", ir.ConstArg("double", 7.0), False, -1)),
        grid=select.grids[0], config="config=BLOCK: 128, num_warps: 4", select=select)
    program = (
        ir.LoadTensor(0, x),
        ir.SymDef("s0", ir.SymLeaf(ir.TensorSize(x, 0)), 1),
        ir.Call("aten::empty_like", "", (ir.Slot(0),) + (ir.ConstArg("none", None),) * 5, (2,)),
        launch,
    )
    return ir.Version(0, guards, program, ir.OutSlot(2), 3,
                      consts=(object(), b"cubin", object()))


@pytest.mark.parametrize("name,make", [("aten", _aten_version), ("triton", _triton_version),
                                       ("triton_select", _triton_select_version)])
def test_golden(name, make):
    v = passes.run(make())
    text = print_version(v) + "\n\n" + generate([v]).text()
    path = HERE / f"{name}.expected"
    if os.environ.get("TRIDENT_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("make", [_aten_version, _triton_version, _triton_select_version])
def test_generated_c_compiles(make):
    from trident.native.build import build_scm

    assert build_scm(generate([passes.run(make())])).so.exists()
