"""``infer-ranges``: make every extent and sum range explicit, prove every access in bounds.

Inference follows Tensor Comprehensions: an index's range is the largest one
that keeps every access using it in bounds.  It proceeds in rounds; in each
round an unknown index gets its range from the accesses in which every *other*
index is already known (so in ``y[i] = sum[k](x[i + k] * w[k])`` the round-one
``w[k]`` fixes ``k``, then ``x[i + k]`` fixes ``i`` as the "valid" correlation
range).  A left-hand index always starts at 0, so only its upper bound is
inferred.  Ranges are affine in the size names; where two candidate bounds
cannot be ordered for all sizes the user must say which one is meant.

After inference every access is proved in bounds with Fourier–Motzkin under
the facts of its position (index ranges, enclosing sums, ``where`` guards), or
reported with the range its index actually covers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from tcc.ir.diagnostics import TccError
from tcc.ir.constrained_sums import UnboundedSum, csum_to_sums
from tcc.ir.expr import RANGED, CSum, Expr, MatrixFn, Reduce, Sum, fresh_name, postorder, rebuild, transform
from tcc.ir.index import Affine, Compare, Cond, FloorDiv, format_affine
from tcc.ir.bounds import prove_in_bounds, uses
from tcc.ir.polyhedra import Facts, expression_range, program_facts
from tcc.ir.program import Definition, Program
from tcc.ir.substitution import substitute
from tcc.ir.verifier import matrix_extents, verify
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InferRanges(Pass):
    name = "infer-ranges"
    level = Level.INDEX
    summary = "infer extents and sum ranges from accesses; prove every access in bounds"

    def run(self, program: Program, ctx: PassContext) -> Program:
        verify(program, bounds=False)
        program = _unshadow(program)
        sizes = program.sizes()
        defs: list[Definition] = []
        current = program
        for d in program.definitions:
            new = _infer_definition(current, d, sizes)
            prove_in_bounds(current, new, sizes)
            defs.append(new)
            current = current.with_definitions(defs + list(program.definitions[len(defs):]))
        # Without output declarations every definition is a result; say so, so that
        # the printed program (which now fixes all extents) keeps that meaning.
        if not current.outputs:
            current = current.replace(outputs=current.results())
        return current


# ---------------------------------------------------------------------------


def _unshadow(program: Program) -> Program:
    """``program`` with every sum or reduction variable named like a size renamed (``sum[p](A[i, p])``
    with ``input A[n, p]`` becomes ``sum[p2](A[i, p2])``).

    Inside such a sum the name means the variable, in its bounds the size.  The interpreter keeps the
    two apart, but a pass that moves a body out of its sum (``blas`` outlining a contraction, which
    gave wrong values) or reads sizes off free names does not; one rename here, where every pipeline
    starts, keeps the distinction out of every later pass.
    """
    sizes = set(program.sizes())
    if not sizes or not any(isinstance(n, RANGED) and n.var in sizes
                            for d in program.definitions if not isinstance(d.body, MatrixFn)
                            for n in postorder(d.body)):
        return program
    taken = program.names_in_use()

    def rename(node: Expr) -> Expr:
        if not (isinstance(node, RANGED) and node.var in sizes):
            return node
        new = fresh_name(node.var, taken)
        taken.add(new)
        body = substitute(node.body, {node.var: Affine.var(new)})
        if isinstance(node, Sum):
            return Sum(new, node.lo, node.hi, body)
        return Reduce(node.op, new, node.lo, node.hi, body)

    return program.with_definitions(
        d if isinstance(d.body, MatrixFn) else d.with_body(transform(d.body, rename)) for d in program.definitions)


def _infer_definition(program: Program, d: Definition, sizes: Sequence[str]) -> Definition:
    if isinstance(d.body, MatrixFn):
        # a matrix function has the extents of its (square) argument, or none
        extents = matrix_extents(program, d)
        assert extents is not None  # the argument is earlier: its extents are known by now
        return Definition(d.name, d.indices, d.body, extents, d.loc)
    unknown_sums = _unranged_sums(d.body)
    csums = [n for n in postorder(d.body) if isinstance(n, CSum)]
    bounded_csums = {id(n): n for n in csums if _is_bounded(n)}
    if d.extents is not None and not unknown_sums and not csums:
        return d
    inference = _Inference(program, d, sizes, unknown_sums, csums, bounded_csums)
    inference.solve()
    inference.clip_bounded_csums()
    return inference.filled()


#: A known range: the lists of lower and upper bounds (affine in the sizes)
#: whose max and min it is.
_Range = tuple[tuple[Affine, ...], tuple[Affine, ...]]
#: One round's findings per unknown: lower bounds, upper bounds, and the
#: accesses that gave them (for the error when they cannot be ordered).
_Progress = dict[object, tuple[list[Affine], list[Affine], list[str]]]


class _Inference:
    """The unknown ranges of one definition, found in rounds (see the module docstring).

    An unknown is keyed by what it belongs to: a left-hand index by its name,
    a sum by its node's ``id``, a variable of an unbounded constrained sum by
    ``("csum", id, var)``.
    """

    def __init__(
        self,
        program: Program,
        d: Definition,
        sizes: Sequence[str],
        unknown_sums: list[Sum],
        csums: list[CSum],
        bounded_csums: dict[int, CSum],
    ) -> None:
        self.program, self.d, self.sizes = program, d, sizes
        self.bounded_csums = bounded_csums
        self.base = program_facts(sizes, program.assumptions)
        # known ranges: name/sum-node -> (lo, hi) lists of affine expressions in sizes
        self.lhs_known: dict[str, _Range] = {}
        if d.extents is not None:
            for i, e in zip(d.indices, d.extents):
                self.lhs_known[i] = ((Affine.constant(0),), (e - 1,))
        self.sum_known: dict[int, _Range] = {}
        for s in _ranged_sums(d.body):
            self.sum_known[id(s)] = (s.lo, s.hi)
        # a constrained sum whose own constraints bound its variables is "known" through them;
        # the variables of an unbounded one get box ranges inferred like sum[k]
        self.csum_known: dict[tuple, _Range] = {}
        pending_csum_vars = {("csum", id(n), v): n for n in csums if id(n) not in bounded_csums for v in n.vars}
        self.pending_lhs = [i for i in d.indices if i not in self.lhs_known]
        self.pending_sums: dict[object, Expr] = {id(s): s for s in unknown_sums}
        self.pending_sums.update(pending_csum_vars)
        self.all_uses = list(uses(d.body))
        self.clips: dict[int, list[Cond]] = {}  # bounded constrained sum -> access-derived constraints it gains

    def resolve(self, name: str, scopes: tuple) -> object:
        for s in reversed(scopes):
            if isinstance(s, RANGED) and s.var == name:
                return id(s)
            if isinstance(s, CSum) and name in s.vars:
                return ("csum", id(s), name)
        if name in self.d.indices:
            return name
        return None  # size

    def known_range(self, key: object):  # noqa: ANN201 - a (lo, hi) range, a bounded CSum, or None
        if isinstance(key, str):
            return self.lhs_known.get(key)
        if isinstance(key, int):
            return self.sum_known.get(key)
        if key in self.csum_known:
            return self.csum_known[key]
        return self.bounded_csums.get(key[1])

    def solve(self) -> None:
        """Rounds until nothing is pending or a round bounds nothing; what is left is an error."""
        while self.pending_lhs or self.pending_sums:
            progress = self._round()
            if not progress:
                break
            self._settle(progress)
        self._check_all_known()

    def _round(self) -> _Progress:
        """Bounds on each unknown from the accesses in which it is the only unknown."""
        progress: _Progress = {}
        for use in self.all_uses:
            extents = self.program.extents_of(use.access.tensor)
            if extents is None:
                continue
            for ix, ext in zip(use.access.indices, extents):
                found = _constrain(ix, ext, use.scopes, self.resolve, self.known_range, self.base, self.sizes)
                if found is None:
                    continue
                key, new_lows, new_highs = found
                lows, highs, why = progress.setdefault(key, ([], [], []))
                lows.extend(new_lows)
                highs.extend(new_highs)
                why.append(str(use.access))
        # a left-hand index needs an upper bound, a sum index both bounds
        return {k: v for k, v in progress.items() if v[1] and (isinstance(k, str) or v[0])}

    def _settle(self, progress: _Progress) -> None:
        """Each unknown of the round gets the tightest of its bounds and is known from now on."""
        d, program, base = self.d, self.program, self.base
        for key, (lows, highs, why) in progress.items():
            if isinstance(key, str):
                hi = _tightest(highs, base, upper=True, what=f"the extent of '{d.name}' along '{key}'", why=why, d=d, program=program)
                self.lhs_known[key] = ((Affine.constant(0),), (hi,))
                self.pending_lhs.remove(key)
            else:
                s = self.pending_sums.pop(key)
                var = key[2] if isinstance(key, tuple) else s.var
                lo = _tightest(lows, base, upper=False, what=f"the range of sum index '{var}'", why=why, d=d, program=program)
                hi = _tightest(highs, base, upper=True, what=f"the range of sum index '{var}'", why=why, d=d, program=program)
                (self.csum_known if isinstance(key, tuple) else self.sum_known)[key] = ((lo,), (hi,))

    def _check_all_known(self) -> None:
        d, program = self.d, self.program
        if self.pending_lhs:
            i = self.pending_lhs[0]
            raise TccError(
                f"cannot infer the extent of '{d.name}' along index '{i}': no access bounds it; declare it with 'output {d.name}[...]'",
                d.loc,
                program.source,
            )
        if self.pending_sums:
            key, s = next(iter(self.pending_sums.items()))
            if isinstance(key, tuple):
                raise TccError(
                    f"cannot infer the range of sum index '{key[2]}': neither the constraints of the sum"
                    f" nor an access bound it; add bounds such as 0 <= {key[2]} to the constraints",
                    program.loc_of(s) or d.loc,
                    program.source,
                )
            raise TccError(
                f"cannot infer the range of sum index '{s.var}': no access bounds it; write sum[{s.var}: lo..hi]",
                program.loc_of(s) or d.loc,
                program.source,
            )

    def clip_bounded_csums(self) -> None:
        """Intersect each bounded constrained sum with the points where its accesses are in bounds.

        A constrained sum whose own constraints bound its variables used to
        keep exactly those bounds, so one constraint more could make a valid
        program an error: ``sum[x, y | x + y >= 2, y - x <= 4, x + y <= 10,
        x - y <= 4](inp[x, y])`` is a diamond reaching ``x = -1``, while with
        any three of its constraints the range came from ``inp``'s extents.
        Like an unbounded one (and like ``sum[k]``), it now also ranges only
        where its accesses are in bounds: for each access evaluated at every
        point of the sum (directly in its body: not under a ``where`` or an
        inner sum), ``0 <= e`` and ``e <= extent - 1`` of each index ``e`` that
        mentions the sum's variables are added to its constraints -- they are
        affine, so the intersection is exact -- unless the constraints (with
        the definition's index ranges) already imply them.
        """
        d = self.d
        for node in self.bounded_csums.values():
            facts = self.base
            for i, (lo, hi) in self.lhs_known.items():
                facts = facts.with_range(i, list(lo), list(hi))
            for c in node.constraints:
                facts = facts.with_cond(c)
            allowed = set(node.vars) | set(d.indices) | set(self.sizes)
            extra: list[Cond] = []
            for use in self.all_uses:
                if not use.scopes or use.scopes[-1] is not node or use.conds:
                    continue
                for ix, ext in zip(use.access.indices, self.program.extents_of(use.access.tensor) or ()):
                    if not set(ix.names()) & set(node.vars) or not set(ix.names()) <= allowed or not ix.is_linear:
                        continue
                    for cond in (Compare("<=", Affine.constant(0), ix), Compare("<=", ix, ext - 1)):
                        if cond not in extra and not facts.implies(cond):
                            extra.append(cond)
            if extra:
                self.clips[id(node)] = extra

    def filled(self) -> Definition:
        """The definition with every range written in.

        Keyed by the original nodes: bottom-up over the DAG, not by recursion
        (a long sum is a tree as deep as it is long).
        """
        d = self.d
        memo: dict[int, Expr] = {}
        for e in postorder(d.body):
            if isinstance(e, RANGED):
                lo, hi = (e.lo, e.hi) if e.has_range else self.sum_known[id(e)]
                out: Expr = (Sum(e.var, tuple(lo), tuple(hi), memo[id(e.body)]) if isinstance(e, Sum)
                             else Reduce(e.op, e.var, tuple(lo), tuple(hi), memo[id(e.body)]))
            elif isinstance(e, CSum) and id(e) not in self.bounded_csums:
                extra: list[Cond] = []
                for v in e.vars:
                    (lo,), (hi,) = self.csum_known[("csum", id(e), v)]
                    extra += [Compare("<=", lo, Affine.var(v)), Compare("<=", Affine.var(v), hi)]
                out = CSum(e.vars, e.constraints + tuple(extra), memo[id(e.body)])
            elif isinstance(e, CSum) and id(e) in self.clips:
                out = CSum(e.vars, e.constraints + tuple(self.clips[id(e)]), memo[id(e.body)])
            else:
                kids = e.children()
                new = tuple(memo[id(k)] for k in kids)
                out = rebuild(e, new) if new != kids else e
            memo[id(e)] = out
        body = memo[id(d.body)]
        extents = d.extents
        if extents is None:
            extents = tuple(_extent(self.lhs_known[i][1][0]) for i in d.indices)
        return Definition(d.name, d.indices, body, extents, d.loc)


def _constrain(
    ix: Affine,
    ext: Affine,
    scopes: tuple,
    resolve,  # noqa: ANN001 - name -> key
    known_range,  # noqa: ANN001 - key -> (lo, hi) or None
    base: Facts,
    sizes: Sequence[str],
) -> tuple[object, list[Affine], list[Affine]] | None:
    """Bounds on the one unknown index that keep ``0 <= ix <= ext - 1``.

    The index may depend on the unknown directly (``x[i + k]``) or through the
    range of a summation index (``sum[k: 0..i](x[k])``): Fourier–Motzkin with
    the unknown as a parameter gives the extreme values of ``ix`` as affine
    functions of it, which are then solved for the unknown.
    """
    collected: dict[str, object] = {}
    stack = list(ix.names())
    while stack:
        name = stack.pop()
        if name in collected:
            continue
        key = resolve(name, scopes)
        if key is None:
            continue  # a size
        collected[name] = key
        rng = known_range(key)
        if isinstance(rng, CSum):
            stack.extend(n for c in rng.constraints for n in c.names())
        elif rng is not None:
            for b in rng[0] + rng[1]:
                stack.extend(b.names())
    unknown = [n for n, k in collected.items() if known_range(k) is None]
    if len(unknown) != 1:
        return None
    var = unknown[0]
    facts = base
    for name, key in collected.items():
        if name == var:
            continue
        rng = known_range(key)
        if isinstance(rng, CSum):
            for c in rng.constraints:
                facts = facts.with_cond(c)
        else:
            facts = facts.with_range(name, rng[0], rng[1])
    if isinstance(collected[var], str):
        facts = facts.with_range(var, [Affine.constant(0)], [])  # left-hand indices start at 0
    rng = expression_range(facts, ix, list(sizes) + [var])
    if rng is None:
        return None
    lows: list[Affine] = []
    highs: list[Affine] = []
    try:
        if rng[1]:  # max(ix) <= ext - 1
            _solve(_tightest(rng[1], facts, upper=True), var, ext - 1, True, lows, highs)
        if rng[0]:  # min(ix) >= 0
            _solve(_tightest(rng[0], facts, upper=False), var, Affine.constant(0), False, lows, highs)
    except TccError:
        return None  # bounds that cannot be ordered: this access teaches nothing
    if not lows and not highs:
        return None
    return collected[var], lows, highs


def _solve(t: Affine, var: str, bound: Affine, le: bool, lows: list[Affine], highs: list[Affine]) -> None:
    """Bounds on ``var`` equivalent to ``t <= bound`` (``le``) or ``t >= bound``.

    ``t`` is affine in ``var`` or ``num // m + c`` with ``num`` affine in it (the
    form Fourier–Motzkin's floor/ceil bounds take); anything else teaches nothing.
    """
    a = t.coeff(var)
    rest = t - Affine.var(var, a)
    if var not in rest.names():
        if a == 0:
            return
        # a*var <= bound - rest  (or >=)
        if (a > 0) == le:
            highs.append((bound - rest).floordiv(abs(a)) if a > 0 else (rest - bound).floordiv(-a))
        else:
            lows.append((bound - rest).ceildiv(a) if a > 0 else (rest - bound).ceildiv(-a))
        return
    atoms = [(x, c) for x, c in t.terms if not isinstance(x, str)]
    if len(atoms) != 1 or atoms[0][1] != 1 or not isinstance(atoms[0][0], FloorDiv):
        return
    fd = atoms[0][0]
    c0 = t - Affine.atom(fd)
    if var in c0.names():
        return
    # num // m <= B  <=>  num <= m*B + m - 1;   num // m >= B  <=>  num >= m*B
    m = fd.den
    limit = (bound - c0) * m + (m - 1) if le else (bound - c0) * m
    _solve(fd.num, var, limit, le, lows, highs)


def _tightest(
    cands: list[Affine],
    facts: Facts,
    upper: bool,
    what: str = "",
    why: Sequence[str] = (),
    d: Definition | None = None,
    program: Program | None = None,
) -> Affine:
    """The smallest upper bound (``upper``) or the largest lower bound among ``cands``."""
    uniq = list(dict.fromkeys(cands))
    if len(uniq) == 1:
        return uniq[0]
    for c in uniq:
        if upper:
            ok = all(facts.entails_ge(o, c) for o in uniq if o is not c)
        else:
            ok = all(facts.entails_ge(c, o) for o in uniq if o is not c)
        if ok:
            return c
    if d is None or program is None:
        raise TccError(
            "cannot order the bounds " + ", ".join(format_affine(c) for c in uniq) + " for all sizes"
        )
    raise TccError(
        f"cannot infer {what}: the bounds {', '.join(format_affine(c) for c in uniq)} "
        f"(from {', '.join(dict.fromkeys(why))}) cannot be ordered for all sizes; declare the extent explicitly",
        d.loc,
        program.source,
    )


def _is_bounded(node: CSum) -> bool:
    """Do the sum's own constraints bound every variable (for all values of the others)?"""
    try:
        csum_to_sums(node)
    except UnboundedSum:
        return False
    return True


def _extent(hi: Affine) -> Affine:
    """``hi + 1``, folded into a floor division when there is one: ``(n - 2) // 2 + 1`` is ``n // 2``."""
    atoms = [(x, c) for x, c in hi.terms if isinstance(x, FloorDiv)]
    if len(atoms) == 1 and atoms[0][1] == 1:
        fd = atoms[0][0]
        return hi - Affine.atom(fd) + (fd.num + fd.den).floordiv(fd.den)
    return hi + 1


def _unranged_sums(e: Expr) -> list[Sum]:
    return [n for n in postorder(e) if isinstance(n, RANGED) and not n.has_range]


def _ranged_sums(e: Expr) -> list[Sum]:
    return [n for n in postorder(e) if isinstance(n, RANGED) and n.has_range]


# ---------------------------------------------------------------------------
