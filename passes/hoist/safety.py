"""Proving that code moved by ``hoist`` reads memory only where it may.

Moving code must not make it run where it did not run before *and fail*:
scalar arithmetic cannot fail, loads can.  Every phase of the pass (factor,
licm, extract) asks the same question of the code it moves -- is every load in
bounds at the new place? -- and answers it with Fourier-Motzkin over the
enclosing loop ranges and tests (:class:`tcc.ir.polyhedra.Facts`), by
:class:`tcc.ir.loop_analysis.ReadsInBounds`: every read counts, also the
reads of index arrays in indices, loop bounds and conditions
(``for k in ptr[r[d]]..ptr[r[d] + 1] - 1`` moved out of ``where(r[d] == i,
...)`` reads ``ptr[n + 1]`` for a non-zero no row holds).  When a load is safe
only because a loop it leaves runs at least once, the phases keep that test
(:func:`nonempty_guard`); when it is safe only under a test the code leaves,
the extract phase carries the parts of the test it can (see
:meth:`.extract.Extract.nest`), and otherwise the code stays.
"""
from __future__ import annotations

from tcc.ir.index import Cond, compare
from tcc.ir.loop_analysis import ReadsInBounds, negated
from tcc.ir.loops import For
from tcc.ir.polyhedra import Facts

#: The rule every phase applies to the code it moves (shared with any L2 pass
#: that moves code): every read -- loads, and reads of index arrays in
#: indices, loop bounds and conditions -- in bounds on the new domain.
BoundsChecker = ReadsInBounds

#: The facts of an ``else`` branch.
with_negation = negated


def nonempty_guard(loop: For, facts: Facts) -> list[Cond]:
    """The tests ``lo <= hi`` (over all bound pairs) that say ``loop`` runs at
    least once, less those the facts already prove; [] when it always runs."""
    out: list[Cond] = []
    for lo in loop.lo:
        for hi in loop.hi:
            c = compare(">=", hi - lo)
            if not facts.implies(c) and c not in out:
                out.append(c)
    return out
