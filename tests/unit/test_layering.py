"""The stages import in the order data flows (docs/architecture.md): a module may import its own
stage and earlier ones, never a later one, at module level or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "trident"

# In processing order.  ir.nodes is the IR's vocabulary, which the guard translation already
# writes in; the IR stage proper (lowering, passes, the launch lowering, the printer) comes
# after the guards.
STAGES = (
    ("base", ("trident.errors", "trident.config", "trident.abi", "trident.ir.nodes")),
    ("triton", ("trident.triton",)),
    ("capture", ("trident.capture",)),
    ("guards", ("trident.guards",)),
    ("ir", ("trident.ir",)),
    ("codegen", ("trident.codegen",)),
    ("native", ("trident.native",)),
    ("scm", ("trident.persist", "trident.eager", "trident.introspect", "trident.scm",
             "trident.api", "trident.demo", "trident.examples", "trident")),
)


def _stage(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(STAGES):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, module
    return rank


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


def _targets(module: str, names) -> list:
    """`from module import a, b`: the submodules imported, else the module itself."""
    subs = [f"{module}.{a.name}" for a in names if _is_module(f"{module}.{a.name}")]
    return subs or [module]


def _imports(path: Path, name: str):
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)]
            yield from _targets(".".join(base + ([node.module] if node.module else [])),
                                node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trident"):
            yield from _targets(node.module, node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("trident"))


def test_no_module_imports_a_later_stage():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        name = _module_name(path)
        own = _stage(name)
        for target in _imports(path, name):
            if _stage(target) > own:
                bad.append(f"{name} ({STAGES[own][0]}) imports {target} "
                           f"({STAGES[_stage(target)][0]})")
    assert not bad, "\n".join(bad)


def test_every_module_has_a_stage():
    for path in PKG.rglob("*.py"):
        _stage(_module_name(path))
