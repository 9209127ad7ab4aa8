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


def test_a_value_the_test_frame_cannot_hold_raises(rt):
    # the test hooks' frames take tensors, floats and ints; anything else raises (not packed)
    with pytest.raises(TypeError):
        rt.launch_pack_for_test([param("i32", 0)], [None])
    with pytest.raises(OverflowError):
        rt.launch_select_for_test([(0, 0)], lambda *a: None, [(1, 1, 1)], [[2**70]])


# ---- selecting launches (autotuned kernels whose key changes within a version)

K = {"ptr": 0, "int": 1, "double": 2}


class FakeResolver:
    """Stands in for ir.launch.Resolver: maps a key to a variant whose
    config (grid row) depends on n, as an autotuner keyed on n would."""

    def __init__(self, launch_first=True):
        self.calls = []
        self.launch_first = launch_first

    def __call__(self, key, operands, grids):
        self.calls.append((key, operands, grids))
        aligned, n = key
        row = 0 if n < 1000 else 1
        params = (param("ptr", 0, div16=aligned),
                  param("i32", 1, div16=int(n % 16 == 0)))
        variant = ("k", b"cubin", 4, 1, 0, 0, 0, row, params)
        return (self.launch_first, variant)


def test_select_resolves_each_key_once_and_picks_its_grid(rt):
    res = FakeResolver()
    x = torch.randn(4096)
    grids = [(3, 1, 1), (5, 1, 1)]
    calls = [[x, 100], [x, 100], [x, 5000], [x[1:], 100], [x, 5000], [x[1:], 100], [x, 100]]
    got = rt.launch_select_for_test([(0, K["ptr"]), (1, K["int"])], res, grids, calls)
    # the resolver ran for each new key only (and launched those calls itself)
    assert [c[0] for c in res.calls] == [(1, 100), (1, 5000), (0, 100)]
    assert got[0] is None and got[2] is None and got[3] is None
    # operands and evaluated grids reach the resolver as Python values
    key, operands, gs = res.calls[0]
    assert operands[0] is x and operands[1] == 100 and gs == tuple(grids)
    # later calls of a known key launch natively with that key's variant
    for i, (ptr, n, row) in {1: (x, 100, 0), 4: (x, 5000, 1), 5: (x[1:], 100, 0),
                             6: (x, 100, 0)}.items():
        grid_row, packed = got[i]
        assert grid_row == row
        assert words(packed)[0] == struct.pack("<Q", ptr.data_ptr())
        assert words(packed)[1][:4] == struct.pack("<i", n)


def test_select_launches_the_variant_when_the_resolver_did_not(rt):
    res = FakeResolver(launch_first=False)
    x = torch.randn(64)
    got = rt.launch_select_for_test([(0, K["ptr"]), (1, K["int"])], res, [(1, 1, 1), (2, 1, 1)],
                                    [[x, 32]])
    assert got[0][0] == 0 and len(res.calls) == 1


@pytest.mark.parametrize("bad", ["not_tuple", "grid_out_of_range", "neither", "raises"])
def test_select_resolver_errors_are_raised(rt, bad):
    x = torch.randn(64)

    def resolver(key, operands, grids):
        if bad == "raises":
            raise ValueError("from the autotuner")
        if bad == "not_tuple":
            return None
        if bad == "neither":
            return (False, None)
        return (True, ("k", b"c", 4, 1, 0, 0, 0, 7, ()))

    with pytest.raises((TypeError, RuntimeError, ValueError)):
        rt.launch_select_for_test([(0, K["ptr"])], resolver, [(1, 1, 1)], [[x]])


def test_select_key_reads_floats_and_rejects_non_tensors(rt):
    seen = []

    def resolver(key, operands, grids):
        seen.append(key)
        return (True, None)  # never cached: every call goes to the resolver

    got = rt.launch_select_for_test([(0, K["double"])], resolver, [(1, 1, 1)], [[0.5], [0.5]])
    assert got == [None, None]
    assert seen[0] == seen[1] == (struct.unpack("<q", struct.pack("<d", 0.5))[0],)
    with pytest.raises(TypeError):
        rt.launch_select_for_test([(0, K["ptr"])], resolver, [(1, 1, 1)], [[3]])


def test_key_of_matches_the_native_key(rt):
    from trident.triton.launch import KEY_CODES, key_of

    x = torch.randn(64)
    seen = []

    def resolver(key, operands, grids):
        seen.append(key)
        return (True, None)

    for vals in ([x, 17, 0.25], [x[1:], 16, -1.0]):
        rt.launch_select_for_test([(0, KEY_CODES["ptr"]), (1, KEY_CODES["int"]),
                                   (2, KEY_CODES["double"])], resolver, [(1, 1, 1)], [vals])
        assert seen[-1] == key_of(("ptr", "int", "double"), tuple(vals))


def test_key_transforms_match_the_native_key(rt):
    """Classes and buckets: the native key and key_of agree on every transform,
    edge values included (1, multiples of 16, 0, negatives, 32/64-bit, past
    the exact-bucket limit)."""
    from trident.triton.launch import KEY_CODES, TRANSFORM_CODES, key_of

    seen = []

    def resolver(key, operands, grids):
        seen.append(key)
        return (True, None)

    values = [1, 2, 15, 16, 17, 31, 32, 33, 100, 127, 128, 129, 0, -1, -5, -40, 2**31 - 1,
              2**31, -2**31, -2**31 - 1, 2**40, 2**40 + 1, 2**40 - 1, 2**62]
    for t in ("raw", "class", "log2", "align32"):
        keys = [(0, KEY_CODES["int"], TRANSFORM_CODES[t])]
        got = rt.launch_select_for_test(keys, resolver, [(1, 1, 1)], [[v] for v in values])
        assert got == [None] * len(values)
        assert seen[-len(values):] == [key_of(("int",), (v,), (t,)) for v in values], t


def test_buckets_are_flaggems_strategies():
    """log2 / align32 are FlagGems' LibTuner "log" and "align32" strategies
    (2 ** ceil(log2 v), ceil(v / 32) * 32) wherever they are used."""
    import math

    from trident.triton.launch import bucket, spec_class

    for v in list(range(1, 5000)) + [2**k + d for k in range(13, 40) for d in (-1, 0, 1)] + [2**40]:
        assert bucket("log2", v) == 2 ** math.ceil(math.log2(v)), v
    for v in list(range(-200, 5000)) + [2**40 - 3, 2**39 + 17]:
        assert bucket("align32", v) == math.ceil(v / 32) * 32, v
    # a value's class separates what Triton specialises on
    assert len({spec_class(v) for v in (1, 16, 3, 2**31, 2**31 + 1)}) == 5
    assert spec_class(3) == spec_class(5) and spec_class(32) == spec_class(48)


def test_one_variant_object_for_many_keys_launches_each_with_its_values(rt):
    """Keys that share a variant object (one CUBIN) launch it with their own
    operand values; the shared variant keeps its grid row."""
    x = torch.randn(64)
    variant = ("k", b"cubin", 4, 1, 0, 0, 0, 1, (param("ptr", 0, div16=1), param("i32", 1)))
    calls = []

    def resolver(key, operands, grids):
        calls.append(key)
        return (False, variant)

    got = rt.launch_select_for_test([(0, K["ptr"]), (1, K["int"])], resolver,
                                    [(1, 1, 1), (2, 1, 1)], [[x, 3], [x, 5], [x, 3], [x, 7]])
    assert len(calls) == 3  # 3, 5, 7: raw keys
    for (row, packed), n in zip(got, (3, 5, 3, 7)):
        assert row == 1
        assert words(packed)[1][:4] == struct.pack("<i", n)


@pytest.mark.parametrize("meta, refused", [
    ({}, None),
    ({"instrumentation_mode": ""}, None),
    ({"global_scratch_size": 128}, "scratch"),
    ({"profile_scratch_size": 64}, "scratch"),
    ({"tensordesc_meta": [{"block": 1}]}, "tensor descriptors"),
    # Triton 3.8's TRITON_INSTRUMENTATION_MODE=gsan passes one more kernel parameter
    ({"instrumentation_mode": "gsan"}, "instrumentation"),
])
def test_compiled_kernels_outside_the_launch_abi_are_refused(meta, refused):
    from types import SimpleNamespace

    from trident.errors import UnsupportedError
    from trident.triton.launch import check_metadata

    def kern():
        pass

    res = SimpleNamespace(jit=SimpleNamespace(fn=kern),
                          compiled=SimpleNamespace(metadata=SimpleNamespace(**meta),
                                                   asm={"cubin": b"\x7fELF"}))
    if refused is None:
        check_metadata(res)
    else:
        with pytest.raises(UnsupportedError, match=refused):
            check_metadata(res)
    res.compiled.asm = {"ptx": "..."}  # no CUBIN: not an NVIDIA target
    with pytest.raises(UnsupportedError):
        check_metadata(res)
