"""The constants Trident's Python side shares with its C runtime, in one table.

The C side names them in `runtime/trident_rt.h` (the runtime's api and the launch ABI),
`runtime/scm_prelude.h` (environment blocks, function attributes) and `runtime/scm_dispatch.h`
(the dispatcher and its index).
`C_NAMES` maps each C name to the value Python writes into generated code or passes to the
runtime; `tests/unit/test_abi.py` parses the headers and checks every entry, and that every
member of the enumerations listed in `C_ENUM_PREFIXES` has one.
"""

from __future__ import annotations

ABI_VERSION = 10  # TRT_ABI_VERSION: trident_scm_init refuses an SCM built for another

# A call's status (TRT_HIT / TRT_MISS / TRT_ERROR) and a runtime call's result.
HIT, MISS, ERROR = 0, 1, 2
OK, FAIL = 0, -1
PRECONDITION = 1  # launch_call: a CUBIN precondition failed, nothing launched

# ir.Version.run_mode: the mode a whole version runs under (TRT_MODE_*).
MODES = {"none": 0, "no_grad": 1, "enable_grad": 2, "inference": 3}

# Operator argument encodings (trt_arg.kind, TRT_ARG_*) and list items.
ARG_KINDS = {"slot": 0, "none": 1, "int": 2, "double": 3, "bool": 4, "str": 5, "device": 6,
             "list": 7}
ITEM_CONST, ITEM_NONE = -1, -2
OP_BELOW_AUTOGRAD = 1  # op_new flag

# What api->tensor_prop reads of a tensor without a tensor guard (TRT_PROP_*).
TENSOR_PROPS = {"size": 0, "stride": 1, "offset": 2}
# Which function attribute trt_attr_func reads (scm_prelude.h, TRT_FN_*).
FUNC_ATTRS = {"__defaults__": 0, "__kwdefaults__": 1, "__code__": 2}

# Triton launches: trt_launch_param kinds (TRT_P_*), key kinds (TRT_K_*) and the transforms
# of an int key part (TRT_KT_*).
PARAM_CODES = {"ptr": 0, "i1": 1, "i8": 2, "i16": 3, "i32": 4, "i64": 5, "u8": 6, "u16": 7,
               "u32": 8, "u64": 9, "fp16": 10, "bf16": 11, "fp32": 12, "fp64": 13, "one": 14}
PARAM_CONST = -1  # trt_launch_param.slot of a constant parameter (TRT_PARAM_CONST)
DTYPE_ANY = -1  # trt_launch_param.dtype where the pointer's dtype is not checked (TRT_DTYPE_ANY)
KEY_CODES = {"ptr": 0, "int": 1, "double": 2}
TRANSFORM_CODES = {"raw": 0, "class": 1, "log2": 2, "align32": 3}

GLOBAL_STATE_WORDS = 48  # trt_global_state: int64 words of the global-state snapshot

# The dispatch index's limits (scm_dispatch.h, TRT_SCM_INDEX_*): dimensions of a probed tensor,
# values in a group's key, groups in an index.
INDEX_NDIM, INDEX_WIDTH, INDEX_GROUPS = 16, 64, 32

# Environment blocks (scm_prelude.h): the longest load chain a block evaluates, and the steps.
ENV_STEPS = 32
ENV_STEP_OPS = {"global": 0, "const": 1, "attr": 2, "item_int": 3, "item_str": 4, "typeof": 5,
                "dict_key_at": 6, "dict_value_at": 7, "dict_item": 8}
# An environment block row's check (TRT_EG_*) and its flags (TRT_EGF_*, bits).
ENV_GUARD_KINDS = {"id": 0, "eq": 1, "type": 2, "same": 3, "notin": 4, "contains": 5, "len": 6,
                   "dictkeys": 7}
ENV_GUARD_FLAGS = {"uncovered": 1, "dict": 2, "present": 4, "set": 8}

C_NAMES = {
    "TRT_ABI_VERSION": ABI_VERSION,
    "TRT_HIT": HIT, "TRT_MISS": MISS, "TRT_ERROR": ERROR, "TRT_OK": OK, "TRT_FAIL": FAIL,
    "TRT_PRECONDITION": PRECONDITION, "TRT_SCM_MISS": MISS,
    **{f"TRT_MODE_{k.upper()}": v for k, v in MODES.items()},
    **{f"TRT_ARG_{k.upper()}": v for k, v in ARG_KINDS.items()},
    "TRT_ITEM_CONST": ITEM_CONST, "TRT_ITEM_NONE": ITEM_NONE,
    "TRT_OP_BELOW_AUTOGRAD": OP_BELOW_AUTOGRAD,
    **{f"TRT_PROP_{k.upper()}": v for k, v in TENSOR_PROPS.items()},
    **{f"TRT_FN_{k.strip('_').upper()}": v for k, v in FUNC_ATTRS.items()},
    "TRT_PARAM_CONST": PARAM_CONST, "TRT_DTYPE_ANY": DTYPE_ANY,
    **{f"TRT_P_{k.upper()}": v for k, v in PARAM_CODES.items()},
    **{f"TRT_K_{k.upper()}": v for k, v in KEY_CODES.items()},
    **{f"TRT_KT_{k.upper()}": v for k, v in TRANSFORM_CODES.items()},
    "TRT_GLOBAL_STATE_WORDS": GLOBAL_STATE_WORDS,
    "TRT_SCM_INDEX_NDIM": INDEX_NDIM, "TRT_SCM_INDEX_WIDTH": INDEX_WIDTH,
    "TRT_SCM_INDEX_GROUPS": INDEX_GROUPS,
    "TRT_ENV_STEPS": ENV_STEPS,
    **{f"TRT_ES_{k.upper()}": v for k, v in ENV_STEP_OPS.items()},
    **{f"TRT_EG_{k.upper()}": v for k, v in ENV_GUARD_KINDS.items()},
    **{f"TRT_EGF_{k.upper()}": v for k, v in ENV_GUARD_FLAGS.items()},
}

# Enumerations whose every member must be in C_NAMES (a member added on one side only fails).
C_ENUM_PREFIXES = ("TRT_P_", "TRT_K_", "TRT_KT_", "TRT_ARG_", "TRT_ES_", "TRT_MODE_", "TRT_EG_",
                   "TRT_EGF_", "TRT_PROP_", "TRT_FN_")
