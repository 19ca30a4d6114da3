"""Fresh names for what a rewrite invents (DESIGN.md rule: the smallest free integer suffix).

Kept apart from :mod:`tcc.ir.expr`, which re-exports both names, so that the
expression module stays within the size limit of tests/test_layers.py.
"""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ["FreshNames", "fresh_name"]


def fresh_name(base: str, taken: set[str] | Mapping[str, Any]) -> str:
    """``base`` if free, else the smallest integer suffix that makes it free (DESIGN.md rule)."""
    if base not in taken:
        return base
    k = 2
    while f"{base}{k}" in taken:
        k += 1
    return f"{base}{k}"


class FreshNames:
    """For the rewriters that invent names: ``self.taken`` holds every name in use (set it before the
    first :meth:`fresh`), and :meth:`fresh` takes :func:`fresh_name`'s free name and records it, so
    no two names a rewrite invents collide with each other or with the program's."""

    taken: set[str]

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name
