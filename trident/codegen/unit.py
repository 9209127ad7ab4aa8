"""What codegen returns: C translation units, plain text (no I/O)."""

from __future__ import annotations

from ..ir.nodes import Frozen, frozen


@frozen
class Unit(Frozen):
    """One C translation unit: its file name in the build and its text."""

    name: str
    text: str


@frozen
class SCMSource(Frozen):
    """The C of one SCM: a unit per version, in dispatch order, and the
    dispatcher.  `text()` is all of it as one listing, for dumps and golden
    tests; the build compiles the units separately."""

    versions: tuple
    dispatcher: Unit

    @property
    def units(self) -> tuple:
        return (*self.versions, self.dispatcher)

    def text(self) -> str:
        return "\n".join(f"/* ==== {u.name} ==== */\n{u.text}" for u in self.units)
