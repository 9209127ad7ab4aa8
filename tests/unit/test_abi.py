"""trident/abi.py agrees with the C headers: every constant, and every enumeration member."""

from __future__ import annotations

import re
from pathlib import Path

from trident import abi
from trident.triton import launch

RUNTIME = Path(__file__).resolve().parents[2] / "trident" / "runtime"
HEADERS = ("trident_rt.h", "scm_prelude.h", "scm_dispatch.h")


def _c_constants() -> dict:
    """NAME -> value for every `#define TRT_... <int>` and every enum member of the headers
    (an enum member without `=` is the previous one plus 1, as in C)."""
    out = {}
    for name in HEADERS:
        text = (RUNTIME / name).read_text()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        for m in re.finditer(r"^#define\s+(TRT_\w+)\s+\(?(-?\d+)\)?\s*$", text, flags=re.M):
            out[m.group(1)] = int(m.group(2))
        for body in re.findall(r"enum\s*\{(.*?)\}", text, flags=re.S):
            nxt = 0
            for item in filter(None, (s.strip() for s in body.split(","))):
                m = re.fullmatch(r"(TRT_\w+)(?:\s*=\s*(-?\d+))?", item)
                assert m, f"{name}: cannot read enum member {item!r}"
                value = int(m.group(2)) if m.group(2) is not None else nxt
                out[m.group(1)] = value
                nxt = value + 1
    return out


def test_every_shared_constant_matches_the_headers():
    c = _c_constants()
    missing = sorted(set(abi.C_NAMES) - set(c))
    assert not missing, f"abi.C_NAMES names what no header defines: {missing}"
    wrong = {k: (v, c[k]) for k, v in abi.C_NAMES.items() if c[k] != v}
    assert not wrong, f"(python, C) differ: {wrong}"


def test_every_enum_member_has_a_python_value():
    c = _c_constants()
    for prefix in abi.C_ENUM_PREFIXES:
        members = {k for k in c if k.startswith(prefix)}
        # TRT_K_ is a prefix of TRT_KT_: keep each enumeration's own members
        if prefix == "TRT_K_":
            members = {k for k in members if not k.startswith("TRT_KT_")}
        unknown = sorted(members - set(abi.C_NAMES))
        assert not unknown, f"{prefix}* members without a value in trident/abi.py: {unknown}"


def test_users_take_their_codes_from_the_table():
    assert launch.PARAM_CODES is abi.PARAM_CODES
    assert launch.KEY_CODES is abi.KEY_CODES
    assert launch.TRANSFORM_CODES is abi.TRANSFORM_CODES


def test_the_built_runtime_reports_the_same_abi():
    from trident.native import build

    rt = build.runtime_module()
    assert rt.ABI_VERSION == abi.ABI_VERSION
    assert rt.GLOBAL_STATE_WORDS == abi.GLOBAL_STATE_WORDS
