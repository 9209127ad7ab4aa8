"""Triton launch preparation on the CPU: the runtime's parameter packing
(the same code launch_call runs before cuLaunchKernelEx) against Triton
3.6's launch ABI (triton/backends/nvidia/driver.py, make_launcher): every
non-constexpr argument in signature order, pointers as CUdeviceptr, ints in
their C width, fp16/bf16/fp32 as packed bits, fp64 as double; constexprs and
ints specialised to 1 are not passed.  And the preconditions: a failed one
returns None (nothing would be launched)."""

from __future__ import annotations

import struct

import pytest
import torch

from trident.native.build import runtime_module

P = {"ptr": 0, "i1": 1, "i8": 2, "i16": 3, "i32": 4, "i64": 5, "u8": 6, "u16": 7, "u32": 8,
     "u64": 9, "fp16": 10, "bf16": 11, "fp32": 12, "fp64": 13, "one": 14}


@pytest.fixture(scope="module")
def rt():
    return runtime_module()


def param(kind, slot=-1, ival=0, dval=0.0, div16=0, dtype=-1):
    return (P[kind], slot, ival, dval, div16, dtype)


def words(b: bytes):
    return [b[i:i + 8] for i in range(0, len(b), 8)]


def test_pack_matches_triton_abi(rt):
    x = torch.randn(64)
    w = torch.randn(64, dtype=torch.float16)
    f32 = rt.enum_code(torch.float32)
    eps = 1e-6
    n = int(torch.randint(1, 1000, ()).item()) * 16
    params = [param("ptr", 0, div16=1, dtype=f32), param("ptr", 1),
              param("i32", 2, div16=1), param("i64", 3), param("fp32", 4),
              param("fp16", -1, dval=0.5), param("bf16", -1, dval=-2.0), param("fp64", 4),
              param("one", 5)]
    got = rt.launch_pack_for_test(params, [x, w, n, -7, eps, 1])
    want = [struct.pack("<Q", x.data_ptr()), struct.pack("<Q", w.data_ptr()),
            struct.pack("<i", n), struct.pack("<q", -7), struct.pack("<f", eps),
            struct.pack("<e", 0.5), struct.pack("<f", -2.0)[2:],  # bf16: high half of fp32
            struct.pack("<d", eps)]
    ws = words(got)
    assert len(ws) == len(want)  # `one` is checked, not passed
    for g, e in zip(ws, want):
        assert g[:len(e)] == e


@pytest.mark.parametrize("case", ["misaligned", "not_div16", "i32_overflow", "not_one", "dtype"])
def test_failed_precondition_launches_nothing(rt, case):
    f32 = rt.enum_code(torch.float32)
    x = torch.randn(65)
    if case == "misaligned":
        got = rt.launch_pack_for_test([param("ptr", 0, div16=1, dtype=f32)], [x[1:]])
    elif case == "not_div16":
        got = rt.launch_pack_for_test([param("i32", 0, div16=1)], [33])
    elif case == "i32_overflow":
        got = rt.launch_pack_for_test([param("i32", 0)], [2**31])
    elif case == "not_one":
        got = rt.launch_pack_for_test([param("one", 0)], [2])
    else:
        got = rt.launch_pack_for_test([param("ptr", 0, dtype=f32)], [x.half()])
    assert got is None


def test_aligned_view_passes(rt):
    x = torch.randn(64)
    got = rt.launch_pack_for_test([param("ptr", 0, div16=1)], [x[4:]])  # 16 bytes in
    assert words(got)[0] == struct.pack("<Q", x[4:].data_ptr())


def test_pointer_to_non_tensor_is_an_error(rt):
    with pytest.raises(TypeError):
        rt.launch_pack_for_test([param("ptr", 0)], [3])
