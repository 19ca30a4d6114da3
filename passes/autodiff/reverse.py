"""``autodiff``: reverse accumulation on element-wise definitions (seed 000, sec. 2–5).

For ``--of f --wrt x`` the pass walks the tensor-level graph backwards (sec. 3):
every definition ``h`` on a path from ``x`` to ``f`` gets an adjoint ``dh``,
and each consumer contributes to the adjoints of what it reads, one term per
occurrence (distinct access node) of the argument (Algorithm 4).

A term is emitted in *delta form*, the paper's eq. (40), which is itself an
executable program::

    dx[β] = sum[α: box(h)](L0 * sum[k: range](L1 * where(A·(α, k) == β, L2, 0)))

``L0`` is the sensitivity of ``h``'s body (seeded with ``dh[α]``) w.r.t. the
sum that encloses the access, ``L1`` that of the sum's body w.r.t. the next
level, and so on: reverse accumulation runs once per sum level, so the
structure of ``h`` survives and nothing is recomputed inside a loop that did
not contain it.  ``sum-liberation`` flattens this into one constrained sum,
``index-solve`` and ``range-bound`` turn the delta into a gather (eq. 47).

The value of ``h``'s body is ``h[α]`` itself, so rules that reuse a node's
value (``exp``, ``tanh``, ``sigmoid``...) read the forward result instead of
recomputing it at the root.

A definition whose body is a matrix function (``B[i, j] = inv(A)[i, j]``,
``s = det(A)``) has no element-wise body to accumulate through; its
contribution to ``dA[r, c]`` is written directly (:func:`matrix_term`), as an
ordinary sum with no delta, from the seed ``S`` of ``h``, ``h`` itself and
``inv(A)`` (a new definition ``A_inv = inv(A)`` where the program has none)::

    inv     B = inv(A)      dA[r, c] += -sum[p](B[p, r] * sum[q](S[p, q] * B[c, q]))
    det     s = det(A)      dA[r, c] += S * s * A_inv[c, r]
    logdet  s = logdet(A)   dA[r, c] += S * A_inv[c, r]
    adj     C = adj(A)      dA[r, c] += A_inv[c, r] * sum[p, q](S[p, q] * C[p, q])
                                        - sum[p](A_inv[p, r] * sum[q](S[p, q] * C[c, q]))

The matrix product ``C[i, j] = matmul(A, B)[i, j]`` (:func:`matmul_term`)
contributes ``dC·Bᵀ`` to ``A`` and ``Aᵀ·dC`` to ``B``, ordinary sums too::

    matmul  C = A @ B       dA[r, c] += sum[j](S[r, j] * B[c, j])
                            dB[r, c] += sum[i](A[i, r] * S[i, c])
"""
from __future__ import annotations

from typing import Sequence

from tcc.ir.contraction_sum import expand_contractions
from tcc.ir.diagnostics import TccError
from tcc.ir.expr import (
    ONE,
    ZERO,
    Access,
    Binary,
    CSum,
    Expr,
    MatrixFn,
    Reduce,
    Select,
    Sum,
    Where,
    all_names,
    fresh_name,
    neg,
    postorder,
)
from tcc.ir.substitution import substitute
from tcc.ir.index import Affine, And, Compare
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.passes.autodiff.rules import Derivation, add, check_arguments, child_adjoints, mul, relevant_definitions


def level_adjoints(
    root: Expr, seed: Expr, relevant: dict[int, bool], root_value: Expr | None
) -> tuple[dict[Access, Expr], dict[Expr, Expr]]:
    """Reverse accumulation over one sum level of a body.

    Returns the adjoints of the relevant accesses at this level and of the
    relevant sums (whose bodies form the next level).  Sum bodies are not
    entered: their variables are bound, and their adjoint is the same for
    every value of the summation index.
    """
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        if isinstance(n, (Sum, CSum, Reduce)):
            continue
        for c in reversed(n.children()):
            if relevant.get(id(c)) and id(c) not in seen:
                stack.append((c, False))
    adj: dict[int, Expr] = {id(root): seed}
    accesses: dict[Access, Expr] = {}
    sums: dict[Expr, Expr] = {}
    for n in reversed(order):
        a = adj.get(id(n))
        if a is None:
            continue
        if isinstance(n, Access):
            accesses[n] = a
            continue
        if isinstance(n, (Sum, CSum)):
            sums[n] = a
            continue
        if isinstance(n, Reduce):  # its next level compares the body with the result: the root's stored value
            sums[n] = (a, root_value if (n is root and root_value is not None) else n)
            continue
        value = root_value if (n is root and root_value is not None) else n
        for child, contribution in child_adjoints(n, a, value):
            if not relevant.get(id(child)):
                continue
            adj[id(child)] = add(adj.get(id(child)), contribution)
    return accesses, sums


def _relevance(body: Expr, targets: set[str]) -> dict[int, bool]:
    rel: dict[int, bool] = {}
    for n in postorder(body):
        if isinstance(n, Access):
            rel[id(n)] = n.tensor in targets
        else:
            rel[id(n)] = any(rel[id(c)] for c in n.children())
    return rel


def _argmax_share(r: Reduce, value: Expr, h: Definition) -> Expr:
    """The share of ``max[k](b)``'s adjoint that position ``k`` gets: ``where(b == value, 1, 0) / ties``.

    A gather, as for ``max(a, b)``: each position compares its value with
    the result (``value``: the definition's stored element at its root,
    else the reduction itself), and the positions that tie split the
    adjoint equally (JAX's and PyTorch's convention); ``ties`` sums the same
    comparison over the range, under a fresh variable.
    """
    taken = set(all_names(h.body)) | set(h.indices) | {r.var}
    if value is r:  # the reduction itself, under a sum over its own variable: rename its binder
        own = fresh_name(f"{r.var}_m", taken)
        taken.add(own)
        value = Reduce(r.op, own, r.lo, r.hi, substitute(r.body, {r.var: Affine.var(own)}))
    hit = Select("==", r.body, value, ONE, ZERO)
    fresh = fresh_name(f"{r.var}_t", taken)
    ties = Sum(fresh, r.lo, r.hi, substitute(hit, {r.var: Affine.var(fresh)}))
    return Binary("/", hit, ties)


def definition_terms(h: Definition, seed: Expr, targets: set[str]) -> list[tuple[Access, list[tuple[Expr, Expr]], Expr]]:
    """All (access, chain of (enclosing sum, its sensitivity), innermost adjoint) of ``h``."""
    relevant = _relevance(h.body, targets)
    out: list[tuple[Access, list[tuple[Expr, Expr]], Expr]] = []
    self_value = Access(h.name, tuple(Affine.var(i) for i in h.indices))

    def level(root: Expr, level_seed: Expr, chain: list[tuple[Expr, Expr]], root_value: Expr | None) -> None:
        if not relevant.get(id(root)):
            return
        accesses, sums = level_adjoints(root, level_seed, relevant, root_value)
        for acc, a in accesses.items():
            out.append((acc, chain, a))
        for s, a in sums.items():
            if isinstance(s, Reduce):
                (a, value) = a
                level(s.body, _argmax_share(s, value, h), chain + [(Sum(s.var, s.lo, s.hi, s.body), a)], None)
            else:
                level(s.children()[0], ONE, chain + [(s, a)], None)

    level(h.body, seed, [], self_value)
    return out


def delta_term(
    h: Definition,
    access: Access,
    chain: list[tuple[Expr, Expr]],
    inner: Expr,
    beta: Sequence[str],
    at: Sequence[str] | None = None,
) -> Expr:
    """Eq. (40): the sum over ``h``'s domain of the adjoint, masked by ``access == β``.

    With ``at``, the seed of ``h`` is the delta δ(α, at): the sum over α
    collapses to the one point α = at, which is substituted instead.
    """
    eqs = [Compare("==", ix, Affine.var(b)) for ix, b in zip(access.indices, beta)]
    expr: Expr = inner
    if eqs:
        expr = Where(eqs[0] if len(eqs) == 1 else And(tuple(eqs)), inner, ZERO)
    for s, a in reversed(chain):
        if isinstance(s, Sum):
            expr = mul(a, Sum(s.var, s.lo, s.hi, expr))
        else:
            expr = mul(a, CSum(s.vars, s.constraints, expr))
    assert h.extents is not None
    if at is not None:
        return substitute(expr, {i: Affine.var(g) for i, g in zip(h.indices, at)})
    for i, ext in reversed(list(zip(h.indices, h.extents))):
        expr = Sum(i, (Affine.constant(0),), (ext - 1,), expr)
    return expr


def matrix_term(h: Definition, seed: Expr, beta: Sequence[str], at: Sequence[str] | None, inverse: str) -> Expr:
    """The contribution of ``h = fn(A)`` to ``dA[β]`` (the table in the module docstring).

    ``seed`` is ``h``'s adjoint at ``h``'s own indices ``α`` (as for every
    other term); the rules sum it over ``α`` as ordinary sums.  With ``at``
    the seed is the delta δ(α, at) (a Jacobian of ``h`` itself): the sums
    collapse to the point ``α = at``.  ``inverse`` names a definition of
    ``inv(A)`` (``h`` itself for ``inv``).
    """
    body = h.body
    assert isinstance(body, MatrixFn) and h.extents is not None
    fn = body.fn
    r, c = (Affine.var(b) for b in beta)

    def read(name: str, *ix: Affine) -> Access:
        return Access(name, tuple(ix))

    inv_t = read(inverse, c, r)  # inv(A) transposed at (r, c)
    if fn in ("det", "logdet"):
        own = inv_t if fn == "logdet" else mul(Access(h.name, ()), inv_t)
        return mul(seed, own)
    p, q = h.indices
    P, Q = Affine.var(p), Affine.var(q)
    if at is not None:
        g0, g1 = (Affine.var(g) for g in at)
        if fn == "inv":
            return neg(mul(read(h.name, g0, r), read(h.name, c, g1)))
        return Binary("-", mul(inv_t, read(h.name, g0, g1)), mul(read(inverse, g0, r), read(h.name, c, g1)))
    zero, last = Affine.constant(0), h.extents[0] - 1

    def total(var: str, e: Expr) -> Expr:
        return Sum(var, (zero,), (last,), e)

    if fn == "inv":
        return neg(total(p, mul(read(h.name, P, r), total(q, mul(seed, read(h.name, c, Q))))))
    assert fn == "adj"
    whole = total(p, total(q, mul(seed, read(h.name, P, Q))))
    rows = total(p, mul(read(inverse, P, r), total(q, mul(seed, read(h.name, c, Q)))))
    return Binary("-", mul(inv_t, whole), rows)


def matmul_term(h: Definition, seed: Expr, beta: Sequence[str], at: Sequence[str] | None, position: int,
                other_rank: int = 2) -> Expr:
    """The contribution of ``h = matmul(A, B)`` to ``dA[β]`` (``position`` 0) or ``dB[β]`` (1).

    ``seed`` is ``h``'s adjoint at ``h``'s own indices ``(batch..., i, j)``;
    the rule sums it over the index of ``h`` that ``β`` does not fix, reusing
    that index as the summation variable -- and over ``h``'s batch indices
    when the argument is one matrix for the whole batch.  An argument read
    transposed swaps its last two indices; ``other_rank`` is the other
    argument's number of indices.  With ``at`` the seed is the delta
    δ(h's indices, at): the sums collapse to a guard.
    """
    body = h.body
    assert isinstance(body, MatrixFn) and body.fn == "matmul" and h.extents is not None
    nb = len(h.indices) - 2
    batch, (i, j) = [Affine.var(x) for x in h.indices[:nb]], h.indices[nb:]
    mine = (len(beta) > 2) if nb else False  # the differentiated argument has the batch indices
    fixed = [Affine.var(x) for x in beta[:-2]] if mine else batch  # the batch of this term's reads
    r, c = (Affine.var(x) for x in beta[-2:])
    swap = body.transposed[position]
    row, col = (c, r) if swap else (r, c)
    g = [Affine.var(x) for x in at] if at is not None else []
    other, other_t, other_batched = body.args[1 - position], body.transposed[1 - position], other_rank > 2

    def op_other(x: Affine, y: Affine, b: list[Affine]) -> Access:  # element (x, y) of the other operand
        return Access(other, (tuple(b) if other_batched else ()) + ((y, x) if other_t else (x, y)))

    zero = Affine.constant(0)
    if at is not None:
        conds = [Compare("==", row, g[nb])] if position == 0 else [Compare("==", col, g[nb + 1])]
        conds += [Compare("==", f, x) for f, x in zip(fixed, g[:nb])] if mine else []
        pick = op_other(col, g[nb + 1], g[:nb]) if position == 0 else op_other(g[nb], row, g[:nb])
        return Where(conds[0] if len(conds) == 1 else And(tuple(conds)), pick, ZERO)
    rename = {x: f for x, f in zip(h.indices[:nb], fixed)} if mine else {}
    if position == 0:  # dA[r, c] = sum[j](S[r, j] * B[c, j]) (r, c swapped when A is read transposed)
        term = mul(substitute(seed, {**rename, i: row}), op_other(col, Affine.var(j), fixed))
        out: Expr = Sum(j, (zero,), (h.extents[-1] - 1,), term)
    else:  # dB[r, c] = sum[i](A[i, r] * S[i, c]) (r, c swapped when B is read transposed)
        term = mul(op_other(Affine.var(i), row, fixed), substitute(seed, {**rename, j: col}))
        out = Sum(i, (zero,), (h.extents[-2] - 1,), term)
    if nb and not mine:  # one matrix for the whole batch: its adjoint sums over the batch
        for x, e in reversed(list(zip(h.indices[:nb], h.extents[:nb]))):
            out = Sum(x, (zero,), (e - 1,), out)
    return out


def differentiate(program: Program, of: str, wrt: Sequence[str], delta: bool = False) -> Program:
    """Reverse mode; ``delta`` seeds with Kronecker deltas: the full Jacobian, f's indices first."""
    try:
        return _Reverse(expand_contractions(program), of, tuple(wrt), delta).run()  # contract: its sum
    except TccError as exc:
        raise exc.located(None, program.source)


#: One term of an adjoint: ``(h, access, chain, inner)`` of an element-wise term;
#: ``(h, k, [], seed)`` of a matrix function's k-th argument (matmul(A, A) gives A two terms).
_Term = tuple[Definition, Access | int, list, Expr]


class _Reverse(Derivation):
    """One reverse-mode derivative: the names it takes, in the order that fixes them, and its terms."""

    def __init__(self, program: Program, of: str, wrt: tuple[str, ...], delta: bool) -> None:
        super().__init__(program)
        self.of = of
        self.wrt = wrt
        self.delta = delta

    def run(self) -> Program:
        program, of, wrt, delta = self.program, self.of, self.wrt, self.delta
        f = check_arguments(program, of, wrt)
        relevant = relevant_definitions(program, of, wrt)
        adjoint = self.adjoint_names(relevant)
        f_ext = f.extents
        assert f_ext is not None
        # with delta seeds every adjoint is a Jacobian: f's indices (gamma) come first
        gamma = [self.allocate(f"{adjoint[of]}_{k}") for k in range(len(f_ext))] if delta else []
        lead_ext = tuple(f_ext) if delta else ()
        targets = {d.name for d in relevant if d.name != of} | set(wrt)
        terms = self.collect_terms(relevant, adjoint, gamma, targets)
        inverses, helpers = self.inverse_helpers(relevant)
        order = [d.name for d in reversed(relevant) if d.name != of] + list(wrt)
        new_defs = [self.adjoint_definition(t, adjoint[t], terms[t], gamma, lead_ext, inverses) for t in order]
        forward: list[Definition] = []
        for d in program.definitions:
            forward.append(d)
            if d.name in helpers:
                forward.append(helpers[d.name])
        inputs = program.inputs if delta else program.inputs + (TensorDecl(adjoint[of], f_ext),)
        outputs = tuple(adjoint[x] for x in wrt)
        return Program(inputs, tuple(forward) + tuple(new_defs), outputs, program.source, program.assumptions)

    def adjoint_names(self, relevant: list[Definition]) -> dict[str, str]:
        """``d<of>``, then ``d<x>`` for every x, then the intermediates backwards (forward mode
        takes the same order, so both modes name a Jacobian alike)."""
        adjoint: dict[str, str] = {self.of: self.allocate("d" + self.of)}
        for x in self.wrt:
            adjoint[x] = self.allocate("d" + x)
        for d in reversed(relevant):
            if d.name != self.of:
                adjoint[d.name] = self.allocate("d" + d.name)
        return adjoint

    def collect_terms(
        self, relevant: list[Definition], adjoint: dict[str, str], gamma: list[str], targets: set[str]
    ) -> dict[str, list[_Term]]:
        """Every consumer's terms, by the tensor whose adjoint they contribute to (consumers backwards)."""
        lead = tuple(Affine.var(g) for g in gamma)
        terms: dict[str, list[_Term]] = {t: [] for t in targets}
        for h in reversed(relevant):
            if self.delta and h.name == self.of:
                seed: Expr = ONE
            else:
                seed = Access(adjoint[h.name], lead + tuple(Affine.var(i) for i in h.indices))
            if isinstance(h.body, MatrixFn):
                for k, arg in enumerate(h.body.args):
                    if arg in targets:
                        terms[arg].append((h, k, [], seed))
                continue
            for acc, chain, inner in definition_terms(h, seed, targets):
                terms[acc.tensor].append((h, acc, chain, inner))
        return terms

    def inverse_helpers(self, relevant: list[Definition]) -> tuple[dict[str, str], dict[str, Definition]]:
        """inv(A) for the rules of det, logdet and adj: an existing definition, or a new one per
        argument, placed right after the first matrix function that needs it.

        Returns the name of inv(A) by A, and the new definitions by the definition they follow.
        """
        program = self.program
        inverses: dict[str, str] = {}
        for d in program.definitions:
            if isinstance(d.body, MatrixFn) and d.body.fn == "inv":
                inverses.setdefault(d.body.tensor, d.name)
        helpers: dict[str, Definition] = {}
        for h in relevant:
            if not isinstance(h.body, MatrixFn) or h.body.fn in ("inv", "matmul") or h.body.tensor in inverses:
                continue
            a = h.body.tensor
            name = self.allocate(f"{a}_inv")
            inverses[a] = name
            # index names need only avoid tensors and sizes (each definition binds its own)
            avoid = set(program.tensor_names()) | set(program.sizes()) | set(inverses.values())
            i = fresh_name("i", avoid)
            j = fresh_name("j", avoid | {i})
            n = program.extents_of(a)
            assert n is not None
            helpers[h.name] = Definition(name, (i, j), MatrixFn("inv", a), (n[0], n[0]))
        return inverses, helpers

    def adjoint_definition(
        self,
        t: str,
        name: str,
        terms: list[_Term],
        gamma: list[str],
        lead_ext: tuple[Affine, ...],
        inverses: dict[str, str],
    ) -> Definition:
        """``name`` = the adjoint of ``t``: the sum of its terms over fresh indices ``β`` (after ``gamma``)."""
        ext = self.extents_of(t)
        beta = [self.allocate(f"{name}_{k}") for k in range(len(ext))]
        body: Expr | None = None
        for h, acc, chain, inner in terms:
            at = gamma if self.delta and h.name == self.of else None
            if isinstance(acc, int):  # argument acc of a matrix function; inner is h's seed
                assert isinstance(h.body, MatrixFn)
                if h.body.fn == "matmul":
                    other = self.program.extents_of(h.body.args[1 - acc])
                    body = add(body, matmul_term(h, inner, beta, at, acc, len(other) if other is not None else 2))
                    continue
                inverse = h.name if h.body.fn == "inv" else inverses[t]
                body = add(body, matrix_term(h, inner, beta, at, inverse))
            else:
                body = add(body, delta_term(h, acc, chain, inner, beta, at))
        return Definition(name, tuple(gamma) + tuple(beta), body if body is not None else ZERO, lead_ext + tuple(ext))
