"""``autodiff{mode=forward}``: tangent propagation (Jacobian-vector products, Laue et al., sec. 3).

For ``of=f wrt=x,y`` the pass walks the tensor-level graph *forwards*: every
definition ``h`` on a path from the ``wrt`` inputs to ``f`` (the same set that
reverse mode gives an adjoint) gets a **tangent** ``dh`` with ``h``'s indices
and extents, in program order, and

    df[α] = Σ_x Σ_β ∂f[α]/∂x[β] · dx[β]         (J·v, one new input dx per x)

is the result.  The tangent of a body is the ordinary forward derivative of
its scalar expression: an access ``x[e]`` of a ``wrt`` input becomes
``dx[e]``, an access ``h[e]`` of an intermediate ``dh[e]``, ``sum[k](b)``
becomes ``sum[k](tangent of b)`` over the same range, ``where(c, a, b)``
becomes ``where(c, ta, tb)``, and unary functions and binary operators follow
the chain rule.  The local derivatives are reverse mode's own
(:func:`tcc.passes.autodiff.rules.child_adjoints`, called with the tangent of one
child as the "adjoint"): both modes share one table of rules, and the value of
a definition's body is read back as ``h[α]`` (``exp``, ``tanh``,
``sigmoid``...) just as reverse mode does.

No index equation has to be solved: the tangent of ``f[α]`` reads the
tangents at exactly the points ``f[α]`` reads the arguments, so forward mode
is a gather by construction.  Zero tangents are skipped (``rules.mul`` /
``rules.add``); nothing else is folded.

**Jacobians** (``seed=delta``).  The seed ``dx[e]`` is the Kronecker delta
``where(e == β, 1, 0)``; every tangent ``dh`` gets ``x``'s indices ``β`` as
trailing indices.  One chain of tangents is built per ``x``, and the tangent
of ``f`` is named as reverse mode names its Jacobian (``dx``, ``f``'s indices
first then ``x``'s), so both modes give the same program interface.  To let
``simplify`` eliminate the deltas, a sum of a tangent is distributed over the
additive terms of its body and every conjunct of a zero-guard that does not
mention the summation index is moved outside the sum: what remains is
``sum[k](where(k == β..., body, 0))``, which ``simplify`` substitutes.

**Matrix functions** (a definition ``B[i, j] = inv(A)[i, j]``, ``s = det(A)``,
``logdet``, ``adj``) have whole-matrix rules::

    inv:    dB[i, j] = -Σ_{p,q} B[i, p] · dA[p, q] · B[q, j]
    det:    ds = s · Σ_{p,q} inv(A)[q, p] · dA[p, q]
    logdet: ds = Σ_{p,q} inv(A)[q, p] · dA[p, q]
    adj:    dC[i, j] = det(A) · (Σ_{p,q} inv(A)[q, p] · dA[p, q]) · inv(A)[i, j]
                       - det(A) · Σ_{p,q} inv(A)[i, p] · dA[p, q] · inv(A)[q, j]

    matmul: dC[i, j] = Σ_k dA[i, k] · B[k, j] + Σ_k A[i, k] · dB[k, j]

``inv(A)`` and ``det(A)`` are read from an existing definition of the program
when there is one (``B`` itself for ``inv``); otherwise one new definition per
argument (``A_inv``, ``A_det``, fresh names) is placed right after the first
matrix-function definition whose tangent needs it (where reverse mode places
its ``A_inv``).
"""
from __future__ import annotations

from typing import Callable, Sequence

from tcc.ir.contraction_sum import expand_contractions
from tcc.ir.diagnostics import TccError
from tcc.ir.user_functions import Call
from tcc.passes.autodiff.reverse import _argmax_share
from tcc.ir.expr import (
    ONE,
    ZERO,
    Access,
    Binary,
    Select,
    Const,
    CSum,
    Expr,
    MatrixFn,
    Reduce,
    Step,
    Sum,
    Unary,
    Where,
    bound_vars,
    fresh_name,
    is_guard,
    is_zero,
    neg,
    postorder,
    rebuild,
    trampoline,
)
from tcc.ir.index import Affine, And, Compare, Cond, conjuncts, make_and, negate
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.passes.autodiff.rules import Derivation, add, check_arguments, child_adjoints, div, mul, relevant_definitions

__all__ = ["differentiate_forward"]


def differentiate_forward(program: Program, of: str, wrt: Sequence[str], delta: bool = False) -> Program:
    """Forward mode: the tangent ``df`` of ``of`` from new input tangents ``dx``.

    With ``delta`` the seeds are Kronecker deltas and the result is the full
    Jacobian of ``of`` with respect to each ``x`` (``dx``, ``of``'s indices first).
    """
    try:
        return _Forward(expand_contractions(program), of, tuple(wrt), delta).run()  # contract: its sum
    except TccError as exc:
        raise exc.located(None, program.source)


# ---------------------------------------------------------------------------
# expression helpers
# ---------------------------------------------------------------------------


def _delta(indices: Sequence[Affine], beta: Sequence[str]) -> Expr:
    """``where(e == β, 1, 0)`` (``1`` for a scalar)."""
    eqs: list[Cond] = [Compare("==", e, Affine.var(b)) for e, b in zip(indices, beta)]
    if not eqs:
        return ONE
    return Where(eqs[0] if len(eqs) == 1 else And(tuple(eqs)), ONE, ZERO)


class _Lifter:
    """Moves zero-guards out of negations, products and numerators (delta mode only).

    ``rules.mul`` already keeps a guard outermost in a product; a rule that
    negates or divides (``log``, ``/``, ``-``) can still bury one.  The value is
    unchanged; ``simplify`` would lift them too, but the sums must see the
    guards before ``simplify`` runs (see :meth:`_Forward.make_sum`).
    """

    def __init__(self) -> None:
        # keyed by id, so the key node is kept alive with its result: the terms
        # lifted here are built on the fly, and a collected node's id is reused
        self.memo: dict[int, tuple[Expr, Expr]] = {}

    def __call__(self, e: Expr) -> Expr:
        return trampoline(self.step(e))

    # ``step`` and ``_lift`` are trampoline steps: a long product is a deep tree
    def step(self, e: Expr) -> Step:
        hit = self.memo.get(id(e))
        if hit is None:
            hit = (e, (yield self._lift(e)))
            self.memo[id(e)] = hit
        return hit[1]

    def _lift(self, e: Expr) -> Step:
        if isinstance(e, Unary) and e.op == "neg":
            u = yield self.step(e.operand)
            if is_guard(u):
                return Where(u.cond, (yield self.step(neg(u.then))), ZERO)
            return neg(u) if u is not e.operand else e
        if isinstance(e, Binary) and e.op in ("*", "/"):
            a = yield self.step(e.lhs)
            b = (yield self.step(e.rhs)) if e.op == "*" else e.rhs
            if is_guard(a) or is_guard(b):
                if e.op == "/":
                    return Where(a.cond, (yield self.step(div(a.then, b))), ZERO)
                return mul(a, b)  # keeps the guards outermost
            return e if (a is e.lhs and b is e.rhs) else Binary(e.op, a, b)
        return e


def _negated(e: Expr) -> Expr:
    if is_guard(e):
        return Where(e.cond, neg(e.then), ZERO)
    return neg(e)


# ---------------------------------------------------------------------------
# the pass
# ---------------------------------------------------------------------------


class _Forward(Derivation):
    def __init__(self, program: Program, of: str, wrt: tuple[str, ...], delta: bool) -> None:
        super().__init__(program)
        self.of = of
        self.wrt = wrt
        self.delta = delta
        self.lift = _Lifter()
        # helper definitions inv(A) / det(A) for matrix rules: (fn, A) -> name
        self.helpers: dict[tuple[str, str], str] = {}
        # new helper definitions, by the matrix-function definition they follow
        self.after: dict[str, list[Definition]] = {}
        self.current: Definition | None = None
        for d in program.definitions:
            if isinstance(d.body, MatrixFn) and d.body.fn in ("inv", "det"):
                self.helpers.setdefault((d.body.fn, d.body.tensor), d.name)

    # -- driver ------------------------------------------------------------
    def run(self) -> Program:
        program, of, wrt = self.program, self.of, self.wrt
        f = check_arguments(program, of, wrt)
        assert f.extents is not None
        # names in reverse mode's order: d<of>, then d<x> for every x, then the
        # intermediates -- so that with seed=delta the Jacobians get the names
        # reverse mode gives them
        d_of = self.allocate("d" + of)
        d_wrt = {x: self.allocate("d" + x) for x in wrt}
        out_defs: list[Definition] = []
        if not self.delta:
            relevant = relevant_definitions(program, of, wrt)
            names = {x: d_wrt[x] for x in wrt}
            for h in relevant:
                if h.name != of:
                    names[h.name] = self.allocate("d" + h.name)
            names[of] = d_of
            out_defs = self.chain(relevant, names)
            inputs = program.inputs + tuple(TensorDecl(d_wrt[x], self.extents_of(x)) for x in wrt)
            outputs: tuple[str, ...] = (d_of,)
        else:
            for x in wrt:
                relevant = relevant_definitions(program, of, (x,))
                x_ext = self.extents_of(x)
                beta = tuple(self.allocate(f"{d_wrt[x]}_{k}") for k in range(len(x_ext)))
                names = {}
                for h in relevant:
                    if h.name != of:
                        names[h.name] = self.allocate("d" + h.name)
                names[of] = d_wrt[x]
                out_defs += self.chain(relevant, names, (x, beta, x_ext))
            inputs = program.inputs
            outputs = tuple(d_wrt[x] for x in wrt)
        forward: list[Definition] = []
        for d in program.definitions:
            forward.append(d)
            forward += self.after.get(d.name, [])
        return Program(inputs, tuple(forward) + tuple(out_defs), outputs, program.source, program.assumptions)

    def chain(
        self,
        relevant: list[Definition],
        names: dict[str, str],
        delta: tuple[str, tuple[str, ...], tuple[Affine, ...]] | None = None,
    ) -> list[Definition]:
        """Tangent definitions of ``relevant`` in program order (the tangent of ``of`` last).

        ``names`` maps each tensor with a tangent (``wrt`` inputs in input mode,
        definitions) to its tangent's name.  ``delta`` is ``(x, β, x's extents)``
        for a Jacobian: ``x[e]``'s tangent is ``where(e == β, 1, 0)`` and every
        tangent gets ``β`` as trailing indices.
        """
        x, beta, trailing_ext = delta if delta is not None else ("", (), ())
        lead = tuple(Affine.var(b) for b in beta)

        def access_tangent(acc: Access) -> Expr | None:
            if delta is not None and acc.tensor == x:
                return _delta(acc.indices, beta)
            if acc.tensor in names:
                return Access(names[acc.tensor], acc.indices + lead)
            return None

        out: list[Definition] = []
        for h in relevant:
            assert h.extents is not None
            if isinstance(h.body, MatrixFn):
                body = self.matrix_tangent(h, names[h.name], access_tangent)
            else:
                body = self.body_tangent(h, access_tangent)
            out.append(Definition(names[h.name], h.indices + beta, body, tuple(h.extents) + trailing_ext))
        if not relevant:  # f does not depend on x: its tangent is 0
            f = self.program.definition(self.of)
            assert f is not None and f.extents is not None
            out.append(Definition(names[self.of], f.indices + beta, ZERO, tuple(f.extents) + trailing_ext))
        return out

    # -- element-wise bodies -----------------------------------------------
    def body_tangent(self, h: Definition, access_tangent: Callable[[Access], Expr | None]) -> Expr:
        value_of_root = Access(h.name, tuple(Affine.var(i) for i in h.indices))
        tangent: dict[int, Expr | None] = {}
        for n in postorder(h.body):
            t: Expr | None = None
            if isinstance(n, Access):
                t = access_tangent(n)
            elif isinstance(n, Const):
                t = None
            elif isinstance(n, (Sum, CSum)):
                tb = tangent[id(n.children()[0])]
                t = None if tb is None else self.make_sum(n, tb)
            elif isinstance(n, Reduce):  # the tangents of the positions that attain the max, averaged
                tb = tangent[id(n.body)]
                if tb is not None:
                    share = _argmax_share(n, value_of_root if n is h.body else n, h)
                    t = self.make_sum(Sum(n.var, n.lo, n.hi, n.body), mul(share, tb))
            elif isinstance(n, Where):
                ta, tb = tangent[id(n.then)], tangent[id(n.other)]
                if ta is not None or tb is not None:
                    t = Where(n.cond, ZERO if ta is None else ta, ZERO if tb is None else tb)
            elif isinstance(n, (Unary, Binary, Select, Call)):
                value = value_of_root if n is h.body else n
                # the chain rule with reverse mode's local derivatives: called with
                # the tangent of one child as the "adjoint", the entries for that
                # child are its term of the tangent (x*x gives two of them)
                for child in dict.fromkeys(n.children()):
                    tc = tangent[id(child)]
                    if tc is None:
                        continue
                    for c, term in child_adjoints(n, tc, value):
                        if c is child:
                            t = add(t, term)
            elif isinstance(n, MatrixFn):  # pragma: no cover - the parser keeps it a whole body
                raise TccError(f"{n} must be the whole body of a definition")
            tangent[id(n)] = t
        t_root = tangent[id(h.body)]
        return ZERO if t_root is None else t_root

    def make_sum(self, node: Expr, body_tangent: Expr) -> Expr:
        """The tangent of ``sum[k](b)``: ``sum[k](tangent of b)`` over the same range.

        With delta seeds the sum is distributed over the additive terms of the
        tangent (a ``where(c, a, b)`` is the two terms ``where(c, a, 0)`` and
        ``where(not c, b, 0)``), and the conjuncts of a term's zero-guards that
        do not mention ``k`` move outside its sum, so that ``simplify`` finds
        the Kronecker deltas ``sum[k](where(k == β, ..., 0))`` it eliminates.
        """
        if not self.delta:
            return rebuild(node, (body_tangent,))
        out: Expr | None = None
        for term in trampoline(self.terms(body_tangent)):
            out = add(out, self.sum_term(node, term))
        assert out is not None
        return out

    def terms(self, e: Expr) -> Step:
        """The additive terms of ``e``, in order: a trampoline step, since a long
        sum is a deep tree.  Each step returns a new list, so a parent may
        extend its left operand's list in place (linear, not quadratic, in the
        number of terms)."""
        if isinstance(e, Binary) and e.op == "+":
            left = yield self.terms(e.lhs)
            left.extend((yield self.terms(e.rhs)))
            return left
        if isinstance(e, Binary) and e.op == "-":
            left = yield self.terms(e.lhs)
            right = yield self.terms(e.rhs)
            left.extend(_negated(t) for t in right)
            return left
        if isinstance(e, Unary) and e.op == "neg":
            inner = yield self.terms(e.operand)
            return [_negated(t) for t in inner]
        if isinstance(e, Where) and not (is_zero(e.then) and is_zero(e.other)):
            # where(c, a, b) = where(c, a, 0) + where(not c, b, 0), each guard over a's (b's) terms
            then = [] if is_zero(e.then) else (yield self.terms(e.then))
            out = [Where(e.cond, t, ZERO) for t in then]
            if not is_zero(e.other):
                other = yield self.terms(e.other)
                out += [Where(negate(e.cond), t, ZERO) for t in other]
            return out
        return [self.lift(e)]

    def sum_term(self, node: Expr, term: Expr) -> Expr:
        bound = set(bound_vars(node))
        conds: list[Cond] = []
        core = term
        while is_guard(core):
            assert isinstance(core, Where)
            conds.extend(conjuncts(core.cond))
            core = core.then
        if not conds:
            return rebuild(node, (term,))
        # nested guards become one (simplify looks for the delta among its conjuncts)
        inner = make_and([c for c in conds if bound & set(c.names())])
        outer = make_and([c for c in conds if not bound & set(c.names())])
        summed = rebuild(node, (core if inner is None else Where(inner, core, ZERO),))
        return summed if outer is None else Where(outer, summed, ZERO)

    # -- matrix functions ----------------------------------------------------
    def helper(self, fn: str, a: str) -> str:
        """The name of a definition ``fn(a)``, created (once per argument) if the program has none."""
        name = self.helpers.get((fn, a))
        if name is None:
            name = self.allocate(f"{a}_{fn}")
            self.helpers[(fn, a)] = name
            n = self.extents_of(a)[0]
            assert self.current is not None
            follow = self.after.setdefault(self.current.name, [])
            if fn == "inv":
                # a definition's indices are its own: avoid only tensor and size names
                avoid = set(self.program.tensor_names()) | set(self.program.sizes())
                avoid |= self.taken - self.program.names_in_use()
                i = fresh_name("i", avoid)
                j = fresh_name("j", avoid | {i})
                follow.append(Definition(name, (i, j), MatrixFn("inv", a), (n, n)))
            else:
                follow.append(Definition(name, (), MatrixFn("det", a), ()))
        return name

    def matmul_tangent(self, h: Definition, dname: str, access_tangent: Callable[[Access], Expr | None]) -> Expr:
        """``C = matmul(A, B)``: ``dC[i, j] = Σ_k dA[i, k] · B[k, j] + Σ_k A[i, k] · dB[k, j]``."""
        assert isinstance(h.body, MatrixFn)
        a, b = h.body.args
        ta, tb = h.body.transposed  # an argument read transposed: its last two indices swap
        ea, eb = self.extents_of(a), self.extents_of(b)
        inner = ea[-2 if ta else -1]
        k = self.allocate(f"{dname}_k")
        *batch, i, j = (Affine.var(x) for x in h.indices)  # a batch of products: the batch indices lead
        K = Affine.var(k)
        zero = (Affine.constant(0),)
        pa, pb = (tuple(batch) if len(ea) > 2 else ()), (tuple(batch) if len(eb) > 2 else ())
        a_ik, b_kj = Access(a, pa + ((K, i) if ta else (i, K))), Access(b, pb + ((j, K) if tb else (K, j)))
        da, db = access_tangent(a_ik), access_tangent(b_kj)
        out: Expr | None = None
        for body in ([] if da is None else [mul(da, b_kj)]) + ([] if db is None else [mul(a_ik, db)]):
            out = add(out, self.make_sum(Sum(k, zero, (inner - 1,), body), body))
        return ZERO if out is None else out

    def matrix_tangent(self, h: Definition, dname: str, access_tangent: Callable[[Access], Expr | None]) -> Expr:
        assert isinstance(h.body, MatrixFn)
        if h.body.fn == "matmul":
            return self.matmul_tangent(h, dname, access_tangent)
        self.current = h  # new helpers follow the first definition that needs them
        fn, a = h.body.fn, h.body.tensor
        ext = self.extents_of(a)
        if len(ext) != 2:
            raise TccError(f"{fn}({a}) needs a matrix: '{a}' has {len(ext)} indices")
        last = ext[0] - 1
        p, q = self.allocate(f"{dname}_p"), self.allocate(f"{dname}_q")
        P, Q = Affine.var(p), Affine.var(q)

        def d_a(r: Affine, s: Affine) -> Expr:
            t = access_tangent(Access(a, (r, s)))
            return ZERO if t is None else t

        def sum_pq(body: Expr) -> Expr:
            zero = (Affine.constant(0),)
            inner = self.make_sum(Sum(q, zero, (last,), body), body)
            return self.make_sum(Sum(p, zero, (last,), inner), inner)

        def inv(r: Affine, s: Affine) -> Access:
            name = h.name if fn == "inv" else self.helper("inv", a)
            return Access(name, (r, s))

        if fn == "inv" or fn == "adj":
            i, j = (Affine.var(v) for v in h.indices)
            # Σ_{p,q} inv(A)[i, p] · dA[p, q] · inv(A)[q, j]
            sandwich = sum_pq(mul(mul(inv(i, P), d_a(P, Q)), inv(Q, j)))
            if fn == "inv":
                return neg(sandwich)
        # Σ_{p,q} inv(A)[q, p] · dA[p, q]  (the trace of inv(A)·dA)
        trace = sum_pq(mul(inv(Q, P), d_a(P, Q)))
        if fn == "logdet":
            return trace
        if fn == "det":
            return mul(Access(h.name, ()), trace)
        det = Access(self.helper("det", a), ())
        return Binary("-", mul(mul(det, trace), inv(i, j)), mul(det, sandwich))
