"""``cse``: share common subexpressions as named temporaries.

Hash-consing already makes repeated subexpressions one node, but a printed
program, the interpreter and a naive code generator would evaluate the node
once per occurrence, and a subexpression that depends on fewer indices than its
context would be recomputed for every value of the others.  This pass does two
rewrites, both checked by proof so they never read out of bounds:

1. *Instances of a definition*: a subexpression equal to the whole body of an
   earlier definition ``g`` with its indices replaced by index expressions
   ``σ`` becomes the read ``g[σ]`` (e.g. ``exp(-sum[k](...))`` inside a
   derivative becomes ``f[da_0, da_z0]``).
2. *Temporaries*: a non-trivial subexpression that occurs more than once in a
   definition and depends only on that definition's own indices becomes a
   ``local`` definition ``<name>_t<k>`` over those indices, placed before it.

Subexpressions under a ``where`` whose guard protects their accesses are only
shared when the accesses are in bounds on the whole domain.

A matrix-function definition (``B[i, j] = inv(A)[i, j]``) is left alone: it is
never an instance to share, nothing is shared into it, and it gets no
temporaries (its body is the whole-matrix function, not an expression).
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from tcc.ir.expr import (
    Access,
    Binary,
    Const,
    CSum,
    Expr,
    MatrixFn,
    Sum,
    Unary,
    Where,
    free_names,
    fresh_name,
    Step,
    postorder,
    postorder_except,
    rebuild,
    trampoline,
)
from tcc.ir.substitution import substitute
from tcc.ir.bounds import facts_at, uses
from tcc.ir.index import Affine, Compare, negate
from tcc.ir.polyhedra import Facts, definition_facts
from tcc.ir.program import Definition, Program
from tcc.passes.pass_base import Level, Pass, PassContext

#: this pass's logger (docs/logging.md): silent unless tcc -v / TCC_LOG or the application asks
logger = logging.getLogger(__name__)


def _size(e: Expr, memo: dict[Expr, int]) -> int:
    """Tree size of ``e`` (a shared node counts once per occurrence), memoised per node.

    Only the nodes not yet in ``memo`` are walked: asked about every node of
    a long product, walking each one's whole subtree was quadratic.
    """
    hit = memo.get(e)
    if hit is None:
        for node in postorder_except(e, memo):  # bottom-up, not recursive: long sums are deep trees
            memo[node] = 1 + sum(memo[c] for c in node.children())
        hit = memo[e]
    return hit


def _occurrences(body: Expr) -> Counter:
    """How often each node would be evaluated in a tree walk (parents' counts add up)."""
    order = postorder(body)
    count: Counter = Counter()
    count[id(body)] = 1
    for n in reversed(order):
        for c in n.children():
            count[id(c)] += count[id(n)]
    return count


def _in_bounds_everywhere(program: Program, e: Expr, facts: Facts) -> bool:
    for use in uses(e):
        ext = program.extents_of(use.access.tensor)
        if ext is None:
            return False
        f = facts_at(facts, use)
        for ix, n in zip(use.access.indices, ext):
            if not (f.implies(Compare(">=", ix, Affine.constant(0))) and f.implies(Compare("<=", ix, n - 1))):
                return False
    return True


class _InBounds:
    """:func:`_in_bounds_everywhere` for many subexpressions of one body, each node decided once.

    A node that binds nothing and guards nothing (an access, a constant, a
    ``Unary`` or ``Binary``) adds no facts, so its reads are in bounds exactly
    when its children's are: the answer is the conjunction of the children's
    memoised answers.  Sums and ``where`` change the facts under them and are
    checked whole, as before.  Asking about every node of a long product used
    to re-prove every read of the rest of the chain at each node (quadratic
    in the chain's length, with a Fourier-Motzkin proof per read).
    """

    def __init__(self, program: Program, facts: Facts) -> None:
        self.program = program
        self.facts = facts
        self.memo: dict[Expr, bool] = {}

    def __call__(self, root: Expr) -> bool:
        memo = self.memo
        hit = memo.get(root)
        if hit is not None:
            return hit
        for n in postorder_except(root, memo):
            if isinstance(n, (Unary, Binary, Const)):
                memo[n] = all(memo[c] for c in n.children())
            else:  # an access (a leaf), or a node that adds facts: checked whole
                memo[n] = _in_bounds_everywhere(self.program, n, self.facts)
        return memo[root]


class _Shapes:
    """Interned *shapes*: an expression with every index expression forgotten.

    ``substitute`` only rewrites affine indices, conditions, sum bounds and
    bound-variable names; it keeps node types, operators, tensors, arities and
    constants.  So ``substitute(g.body, σ) is e`` implies
    ``shape(g.body) == shape(e)``, and bucketing the earlier definitions by the
    shape of their bodies finds every candidate ``_match_instance`` could
    accept without trying each definition at each node (which made
    ``share_instances`` quadratic in the number of definitions).

    A shape is a small int, built bottom-up from the children's ints, so every
    node costs O(1) once.  The memo is keyed by ``id`` and holds the key node
    too: a node freed while the memo lives could otherwise hand its ``id`` to a
    different node and inherit a stale shape.
    """

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self._memo: dict[int, tuple[Expr, int]] = {}

    def of(self, root: Expr) -> int:
        memo = self._memo
        hit = memo.get(id(root))
        if hit is not None:
            return hit[1]
        for n in postorder(root):
            if id(n) not in memo:
                memo[id(n)] = (n, self._intern(n))
        return memo[id(root)][1]

    def _intern(self, n: Expr) -> int:
        kids = tuple(self._memo[id(c)][1] for c in n.children())
        if isinstance(n, Access):
            head: tuple = ("access", n.tensor, len(n.indices))
        elif isinstance(n, Const):
            head = ("const", Const._key(n.value))
        elif isinstance(n, (Unary, Binary)):
            head = (type(n).__name__, n.op)
        elif isinstance(n, Sum):
            head = ("sum", len(n.lo), len(n.hi))
        elif isinstance(n, CSum):
            head = ("csum", len(n.vars), len(n.constraints))
        elif isinstance(n, MatrixFn):
            head = ("matrix", n.fn, n.args, n.transposed)
        else:
            head = (type(n).__name__,)
        return self._ids.setdefault(head + kids, len(self._ids))


def _accesses(e: Expr) -> list[Access]:
    return [n for n in postorder(e) if isinstance(n, Access)]


def _match_instance(g: Definition, g_acc: list[Access], e: Expr) -> tuple[Affine, ...] | None:
    """``σ`` with ``substitute(g.body, σ) is e``, found from g's plain-index accesses ``g_acc``."""
    if type(g.body) is not type(e) or not g.indices:
        return None
    sigma: dict[str, Affine] = {}
    e_acc = _accesses(e)
    if len(g_acc) != len(e_acc):
        return None
    for a, b in zip(g_acc, e_acc):
        if a.tensor != b.tensor or len(a.indices) != len(b.indices):
            return None
        for ia, ib in zip(a.indices, b.indices):
            if len(ia.terms) == 1 and ia.terms[0][1] == 1 and ia.terms[0][0] in g.indices:
                v = ia.terms[0][0]
                if v not in sigma:
                    sigma[v] = ib - ia.const
    if set(sigma) != set(g.indices):
        return None
    if substitute(g.body, sigma) is not e:
        return None
    return tuple(sigma[i] for i in g.indices)


def share_instances(program: Program) -> Program:
    """Rewrite 1 (module docstring): the earliest matching definition wins, as in program order.

    Linear in the program: each node's shape is computed once, and only the
    definitions of its shape's bucket are tried there.
    """
    sizes = program.sizes()
    shapes = _Shapes()
    # definitions that may be shared, by the shape of their body, in program order
    by_shape: dict[int, list[tuple[Definition, list[Access]]]] = {}
    defs: list[Definition] = []
    # offered but not yet bucketed: a definition's shape is only needed once a
    # later one is searched, so the last (often the largest: a whole gradient) is never interned
    pending: list[Definition] = []

    def offer(g: Definition) -> None:
        defs.append(g)
        if isinstance(g.body, (Access, Const, MatrixFn)) or not g.indices or g.extents is None:
            return
        pending.append(g)

    def bucket_pending() -> None:
        for g in pending:
            by_shape.setdefault(shapes.of(g.body), []).append((g, _accesses(g.body)))
        pending.clear()

    for d in program.definitions:
        if d.extents is None or isinstance(d.body, MatrixFn):
            offer(d)
            continue
        bucket_pending()
        if not by_shape:
            offer(d)
            continue
        shapes.of(d.body)
        replace: dict[int, Expr] = {}
        for use_node in postorder(d.body):
            for g, g_acc in by_shape.get(shapes.of(use_node), ()):
                sigma = _match_instance(g, g_acc, use_node)
                if sigma is not None:
                    replace[id(use_node)] = Access(g.name, sigma)
                    break
        if not replace:
            offer(d)
            continue
        base = definition_facts(sizes, d.indices, d.extents, program.assumptions)
        offer(d.with_body(_rewrite_checked(program, d.body, replace, base)))
    return program.with_definitions(defs)


def _rewrite_checked(program: Program, body: Expr, replace: dict[int, Expr], facts: Facts) -> Expr:
    """Replace nodes, checking at each position (with its facts) that the new read is in bounds."""

    def visit(e: Expr, f: Facts) -> Step:  # a trampoline step: long sums are deep trees
        new = replace.get(id(e))
        if new is not None and _in_bounds_everywhere(program, new, f):
            return new
        if isinstance(e, Where):
            then = yield visit(e.then, f.with_cond(e.cond))
            other = yield visit(e.other, f.with_cond(negate(e.cond)))
            return Where(e.cond, then, other)
        if isinstance(e, Sum):
            inner = f.with_range(e.var, e.lo, e.hi) if e.has_range else f
            return Sum(e.var, e.lo, e.hi, (yield visit(e.body, inner)))
        if isinstance(e, CSum):
            inner = f
            for c in e.constraints:
                inner = inner.with_cond(c)
            return CSum(e.vars, e.constraints, (yield visit(e.body, inner)))
        kids = e.children()
        new_list = []
        for k in kids:
            new_list.append((yield visit(k, f)))
        new_kids = tuple(new_list)
        return rebuild(e, new_kids) if new_kids != kids else e

    return trampoline(visit(body, facts))


def _replace_nodes(body: Expr, replace: dict[int, Expr]) -> Expr:
    """``body`` with the given nodes replaced (replacements are not entered)."""
    memo: dict[int, Expr] = dict(replace)
    # children before parents with an explicit stack (long sums are deep trees)
    stack: list[tuple[Expr, bool]] = [(body, False)]
    while stack:
        e, ready = stack.pop()
        if ready:
            kids = e.children()
            new = tuple(memo[id(k)] for k in kids)
            memo[id(e)] = rebuild(e, new) if new != kids else e
        elif id(e) not in memo:
            stack.append((e, True))
            stack.extend((k, False) for k in reversed(e.children()) if id(k) not in memo)
    return memo[id(body)]


def _mark_inside(n: Expr, inside: set[int]) -> None:
    """Add the ids of ``n`` and its descendants to ``inside``, a set closed under descendants.

    A node already there has all of its descendants there too, so it is not
    entered: marking overlapping subexpressions (the shared prefixes of a long
    product) costs each node once, not once per subexpression holding it.
    """
    stack = [n]
    while stack:
        e = stack.pop()
        if id(e) in inside:
            continue
        inside.add(id(e))
        stack.extend(c for c in e.children() if id(c) not in inside)


def introduce_temporaries(program: Program) -> Program:
    sizes = program.sizes()
    taken: dict[str, None] = dict.fromkeys(program.tensor_names())
    taken.update(dict.fromkeys(sizes))
    out: list[Definition] = []
    for d in program.definitions:
        if d.extents is None or isinstance(d.body, MatrixFn):
            out.append(d)
            continue
        counts = _occurrences(d.body)
        memo: dict[Expr, int] = {}
        names: dict[Expr, tuple[str, ...]] = {}  # free_names memo shared by all the nodes of this body
        own = set(d.indices)
        base = definition_facts(sizes, d.indices, d.extents, program.assumptions)
        in_bounds = _InBounds(program, base)
        chosen: list[Expr] = []
        for n in postorder(d.body):
            if counts[id(n)] < 2 or not isinstance(n, (Unary, Binary, Sum)):
                continue
            if isinstance(n, Unary) and n.op == "neg":
                continue
            if _size(n, memo) < 4 or not set(free_names(n, names)) - set(sizes) <= own:
                continue
            if not in_bounds(n):
                continue
            chosen.append(n)
        # keep the largest shared subexpressions only (their parts are inside them)
        chosen.sort(key=lambda n: -_size(n, memo))
        selected: list[Expr] = []
        inside: set[int] = set()
        for n in chosen:
            if id(n) in inside:
                continue
            selected.append(n)
            _mark_inside(n, inside)
        if not selected:
            out.append(d)
            continue
        replace: dict[int, Expr] = {}
        for n in sorted(selected, key=lambda n: _size(n, memo)):
            fv = [i for i in d.indices if i in set(free_names(n, names))]
            name = fresh_name(f"{d.name}_t", taken)
            taken[name] = None
            ext = tuple(e for i, e in zip(d.indices, d.extents) if i in fv)
            out.append(Definition(name, tuple(fv), n, ext))
            replace[id(n)] = Access(name, tuple(Affine.var(i) for i in fv))

        out.append(d.with_body(_replace_nodes(d.body, replace)))
    return program.with_definitions(out)


@dataclass(frozen=True)
class CSE(Pass):
    name = "cse"
    level = Level.INDEX
    summary = "share repeated subexpressions and instances of earlier definitions as named tensors"

    def run(self, program: Program, ctx: PassContext) -> Program:
        return introduce_temporaries(share_instances(program))
