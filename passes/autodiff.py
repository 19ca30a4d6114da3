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

from dataclasses import dataclass
from typing import Sequence

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import (
    ONE,
    ZERO,
    Access,
    Binary,
    Const,
    CSum,
    Expr,
    MatrixFn,
    Sum,
    Unary,
    Where,
    accessed_tensors,
    fresh_name,
    is_one,
    is_zero,
    neg,
    postorder,
    substitute,
)
from tcc.ir.index import Affine, And, Compare, negate
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.passes.pass_base import Level, Pass, PassContext


@dataclass(frozen=True)
class AutoDiff(Pass):
    name = "autodiff"
    level = Level.INDEX
    summary = "reverse-mode derivative of one definition w.r.t. inputs, in delta form (eq. 40)"

    of: str = ""
    wrt: tuple[str, ...] = ()
    #: ``reverse`` (adjoints ``dx`` from a seed ``df``) or ``forward`` (the
    #: tangent ``df`` of f from tangents ``dx`` of the inputs: a Jacobian-vector product)
    mode: str = "reverse"
    #: ``input``: the seed is a new input; ``delta``: it is the Kronecker delta, so
    #: the result is the full Jacobian (seed 000, sec. 5.3), with f's indices first
    seed: str = "input"

    def run(self, program: Program, ctx: PassContext) -> Program:
        if self.mode not in ("reverse", "forward"):
            raise TccError(f"autodiff: mode must be 'reverse' or 'forward', not '{self.mode}'")
        if self.seed not in ("input", "delta"):
            raise TccError(f"autodiff: seed must be 'input' or 'delta', not '{self.seed}'")
        if self.mode == "forward":
            from tcc.forward_mode import differentiate_forward

            return differentiate_forward(program, self.of, self.wrt, delta=self.seed == "delta")
        return differentiate(program, self.of, self.wrt, delta=self.seed == "delta")


# ---------------------------------------------------------------------------
# construction helpers that skip neutral elements (no other folding)
# ---------------------------------------------------------------------------


def _mul(a: Expr, b: Expr) -> Expr:
    """Product that keeps guards outermost: ``where(c, x, 0) * y`` is ``where(c, x * y, 0)``.

    A guard at the top of an adjoint is what sum-liberation can turn into
    range constraints, so it must not get buried inside products.
    """
    if is_one(a):
        return b
    if is_one(b):
        return a
    if isinstance(a, Where) and is_zero(a.other):
        return Where(a.cond, _mul(a.then, b), ZERO)
    if isinstance(b, Where) and is_zero(b.other):
        return Where(b.cond, _mul(a, b.then), ZERO)
    return Binary("*", a, b)


def _add(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else Binary("+", a, b)


def _div(a: Expr, b: Expr) -> Expr:
    return Binary("/", a, b)


def _pow(a: Expr, b: Expr) -> Expr:
    return Binary("**", a, b)


def _fn(name: str, a: Expr) -> Expr:
    return Unary(name, a)


# ---------------------------------------------------------------------------
# local derivatives: adjoint of a child given the adjoint ``a`` of its parent
# ---------------------------------------------------------------------------


def _one_at_zero(e: Expr) -> Expr:
    """``e + (1 - abs(sign(e)))``: ``e`` itself, except 1 where ``e`` is (+-)0.

    ``where`` decides on indices only, never on values, so the substitution
    is arithmetic: ``abs(sign(e))`` is 1 for every nonzero ``e`` (adding the
    exact 0 leaves ``e`` unchanged), 0 at a zero, and NaN stays NaN.
    """
    return Binary("+", e, Binary("-", ONE, _fn("abs", _fn("sign", e))))


def _pow_adjoints(x: Expr, y: Expr, a: Expr, value: Expr) -> list[tuple[Expr, Expr]]:
    """The adjoints of ``x ** y``, exact where the textbook rules give 0 * inf.

    ``d/dx = y * x**(y - 1)``: at ``y = 0`` (``x**0`` is the constant 1) the
    derivative is 0, but ``0 * 0**-1`` is NaN at ``x = 0``; the exponent is
    therefore written ``y - abs(sign(y))``, which is ``y - 1`` for every
    nonzero ``y`` and 0 at ``y = 0``, where ``0 * x**0 = 0``.  ``d/dy = x**y * log(x)``: at ``x = 0``, ``y > 0`` the
    power is constantly 0 and so is the derivative, but ``0 * log(0)`` is
    ``0 * -inf = NaN``; the logarithm is taken of ``_one_at_zero(x)``
    (``log(1) = 0``), as JAX does.  A constant exponent needs neither
    guard: ``simplify`` folds ``x**0`` to 1 and there is no ``d/dy``.
    """
    if isinstance(y, Const):
        return [(x, _mul(_mul(a, y), _pow(x, Binary("-", y, ONE))))]
    return [
        (x, _mul(_mul(a, y), _pow(x, Binary("-", y, _fn("abs", _fn("sign", y)))))),
        (y, _mul(_mul(a, value), _fn("log", _one_at_zero(x)))),
    ]


def child_adjoints(node: Expr, a: Expr, value: Expr) -> list[tuple[Expr, Expr]]:
    """``[(child, contribution)]``; ``value`` is the node's own value (maybe ``h[α]``)."""
    if isinstance(node, Unary):
        u = node.operand
        op = node.op
        if op == "neg":
            d = neg(a)
        elif op == "exp":
            d = _mul(a, value)
        elif op == "log":
            d = _div(a, u)
        elif op == "sqrt":
            d = _div(a, _mul(Const(2), value))
        elif op == "sin":
            d = _mul(a, _fn("cos", u))
        elif op == "cos":
            d = neg(_mul(a, _fn("sin", u)))
        elif op == "tan":
            d = _mul(a, Binary("+", ONE, _pow(value, Const(2))))
        elif op == "asin":
            d = _div(a, _fn("sqrt", Binary("-", ONE, _pow(u, Const(2)))))
        elif op == "acos":
            d = neg(_div(a, _fn("sqrt", Binary("-", ONE, _pow(u, Const(2))))))
        elif op == "atan":
            d = _div(a, Binary("+", ONE, _pow(u, Const(2))))
        elif op == "sinh":
            d = _mul(a, _fn("cosh", u))
        elif op == "cosh":
            d = _mul(a, _fn("sinh", u))
        elif op == "tanh":
            d = _mul(a, Binary("-", ONE, _pow(value, Const(2))))
        elif op == "abs":
            d = _mul(a, _fn("sign", u))
        elif op == "sign":
            return []  # piecewise constant: zero derivative
        elif op == "relu":
            # relu(u) >= 0, so sign(relu(u)) is the step function 1[u > 0]
            d = _mul(a, _fn("sign", value))
        elif op == "sigmoid":
            d = _mul(_mul(a, value), Binary("-", ONE, value))
        else:  # pragma: no cover - the parser admits no other function
            raise TccError(f"no derivative rule for '{op}'")
        return [(u, d)]
    if isinstance(node, Binary):
        x, y = node.lhs, node.rhs
        if node.op == "+":
            return [(x, a), (y, a)]
        if node.op == "-":
            return [(x, a), (y, neg(a))]
        if node.op == "*":
            return [(x, _mul(a, y)), (y, _mul(a, x))]
        if node.op == "/":
            return [(x, _div(a, y)), (y, neg(_div(_mul(a, x), _pow(y, Const(2)))))]
        if node.op == "**":
            return _pow_adjoints(x, y, a, value)
    if isinstance(node, Where):
        return [(node.then, Where(node.cond, a, ZERO)), (node.other, Where(negate(node.cond), a, ZERO))]
    return []


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
        if isinstance(n, (Sum, CSum)):
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
        value = root_value if (n is root and root_value is not None) else n
        for child, contribution in child_adjoints(n, a, value):
            if not relevant.get(id(child)):
                continue
            adj[id(child)] = _add(adj.get(id(child)), contribution)
    return accesses, sums


def _relevance(body: Expr, targets: set[str]) -> dict[int, bool]:
    rel: dict[int, bool] = {}
    for n in postorder(body):
        if isinstance(n, Access):
            rel[id(n)] = n.tensor in targets
        else:
            rel[id(n)] = any(rel[id(c)] for c in n.children())
    return rel


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
            expr = _mul(a, Sum(s.var, s.lo, s.hi, expr))
        else:
            expr = _mul(a, CSum(s.vars, s.constraints, expr))
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
        own = inv_t if fn == "logdet" else _mul(Access(h.name, ()), inv_t)
        return _mul(seed, own)
    p, q = h.indices
    P, Q = Affine.var(p), Affine.var(q)
    if at is not None:
        g0, g1 = (Affine.var(g) for g in at)
        if fn == "inv":
            return neg(_mul(read(h.name, g0, r), read(h.name, c, g1)))
        return Binary("-", _mul(inv_t, read(h.name, g0, g1)), _mul(read(inverse, g0, r), read(h.name, c, g1)))
    zero, last = Affine.constant(0), h.extents[0] - 1

    def total(var: str, e: Expr) -> Expr:
        return Sum(var, (zero,), (last,), e)

    if fn == "inv":
        return neg(total(p, _mul(read(h.name, P, r), total(q, _mul(seed, read(h.name, c, Q))))))
    assert fn == "adj"
    whole = total(p, total(q, _mul(seed, read(h.name, P, Q))))
    rows = total(p, _mul(read(inverse, P, r), total(q, _mul(seed, read(h.name, c, Q)))))
    return Binary("-", _mul(inv_t, whole), rows)


def matmul_term(h: Definition, seed: Expr, beta: Sequence[str], at: Sequence[str] | None, position: int) -> Expr:
    """The contribution of ``h = matmul(A, B)`` to ``dA[β]`` (``position`` 0) or ``dB[β]`` (1).

    ``seed`` is ``h``'s adjoint at ``h``'s own indices ``(i, j)``; the rule
    sums it over the index of ``h`` that ``β`` does not fix, reusing that
    index as the summation variable.  With ``at`` the seed is the delta
    δ((i, j), at): the sum collapses to a guard.
    """
    body = h.body
    assert isinstance(body, MatrixFn) and body.fn == "matmul" and h.extents is not None
    a, b = body.args
    r, c = (Affine.var(x) for x in beta)
    i, j = h.indices
    zero = Affine.constant(0)
    if position == 0:  # dA[r, c] = sum[j](S[r, j] * B[c, j])
        if at is not None:
            g0, g1 = (Affine.var(g) for g in at)
            return Where(Compare("==", r, g0), Access(b, (c, g1)), ZERO)
        term = _mul(substitute(seed, {i: r}), Access(b, (c, Affine.var(j))))
        return Sum(j, (zero,), (h.extents[1] - 1,), term)
    # dB[r, c] = sum[i](A[i, r] * S[i, c])
    if at is not None:
        g0, g1 = (Affine.var(g) for g in at)
        return Where(Compare("==", c, g1), Access(a, (g0, r)), ZERO)
    term = _mul(Access(a, (Affine.var(i), r)), substitute(seed, {j: c}))
    return Sum(i, (zero,), (h.extents[0] - 1,), term)


def differentiate(program: Program, of: str, wrt: Sequence[str], delta: bool = False) -> Program:
    """Reverse mode; ``delta`` seeds with Kronecker deltas: the full Jacobian, f's indices first."""
    try:
        return _differentiate(program, of, wrt, delta)
    except TccError as exc:
        raise exc.located(None, program.source)


def check_arguments(program: Program, of: str, wrt: Sequence[str]) -> Definition:
    """The definition ``of``, after the checks both modes make (same words in both)."""
    if not of:
        raise TccError("autodiff needs the definition to differentiate: autodiff{of=NAME wrt=X,Y}")
    if not wrt:
        raise TccError("autodiff needs at least one input to differentiate with respect to (wrt=...)")
    f = program.definition(of)
    if f is None:
        if program.input(of) is not None:
            raise TccError(f"'{of}' is an input; --of must name a definition")
        raise TccError(f"no definition named '{of}'")
    for x in wrt:
        if program.input(x) is None:
            if program.definition(x) is not None:
                raise TccError(f"'{x}' is a definition; --wrt takes inputs of the program")
            raise TccError(f"no input named '{x}'")
    if len(set(wrt)) != len(wrt):
        raise TccError("--wrt names an input twice")
    for d in program.definitions:
        if d.extents is None:
            raise TccError(f"autodiff needs the extents of '{d.name}': run infer-ranges first")
    return f


def relevant_definitions(program: Program, of: str, wrt: Sequence[str]) -> list[Definition]:
    """Definitions on a path from some ``wrt`` input to ``of`` (``of`` included), in program order."""
    reads = {d.name: set(accessed_tensors(d.body)) for d in program.definitions}
    # definitions f depends on (including f)
    needed: set[str] = {of}
    for d in reversed(program.definitions):
        if d.name in needed:
            needed |= reads[d.name]
    # definitions that depend on some wrt input
    influenced: set[str] = set(wrt)
    for d in program.definitions:
        if reads[d.name] & influenced:
            influenced.add(d.name)
    return [d for d in program.definitions if d.name in needed and d.name in influenced]


def _differentiate(program: Program, of: str, wrt: Sequence[str], delta: bool) -> Program:
    f = check_arguments(program, of, wrt)
    relevant = relevant_definitions(program, of, wrt)

    # one namespace: a new tensor must not take the name of an index either
    taken = program.names_in_use()

    def allocate(base: str) -> str:
        name = fresh_name(base, taken)
        taken.add(name)
        return name

    adjoint: dict[str, str] = {of: allocate("d" + of)}
    for x in wrt:
        adjoint[x] = allocate("d" + x)
    for d in reversed(relevant):
        if d.name != of:
            adjoint[d.name] = allocate("d" + d.name)

    f_ext = f.extents
    assert f_ext is not None
    # with delta seeds every adjoint is a Jacobian: f's indices (gamma) come first
    gamma = [allocate(f"{adjoint[of]}_{k}") for k in range(len(f_ext))] if delta else []
    lead = tuple(Affine.var(g) for g in gamma)
    lead_ext = tuple(f_ext) if delta else ()

    targets = {d.name for d in relevant if d.name != of} | set(wrt)
    # (h, access, chain, inner) of an element-wise term; (h, k, [], seed) of a matrix
    # function's k-th argument (matmul(A, A) gives A two terms)
    terms: dict[str, list[tuple[Definition, Access | int, list, Expr]]] = {t: [] for t in targets}
    for h in reversed(relevant):
        if delta and h.name == of:
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

    # inv(A) for the rules of det, logdet and adj: an existing definition, or a new
    # one per argument, placed right after the first matrix function that needs it
    inverses: dict[str, str] = {}
    for d in program.definitions:
        if isinstance(d.body, MatrixFn) and d.body.fn == "inv":
            inverses.setdefault(d.body.tensor, d.name)
    helpers: dict[str, Definition] = {}  # keyed by the definition they follow
    for h in relevant:
        if not isinstance(h.body, MatrixFn) or h.body.fn in ("inv", "matmul") or h.body.tensor in inverses:
            continue
        a = h.body.tensor
        name = allocate(f"{a}_inv")
        inverses[a] = name
        # index names need only avoid tensors and sizes (each definition binds its own)
        avoid = set(program.tensor_names()) | set(program.sizes()) | set(inverses.values())
        i = fresh_name("i", avoid)
        j = fresh_name("j", avoid | {i})
        n = program.extents_of(a)
        assert n is not None
        helpers[h.name] = Definition(name, (i, j), MatrixFn("inv", a), (n[0], n[0]))

    def extents_of(name: str) -> tuple[Affine, ...]:
        ext = program.extents_of(name)
        assert ext is not None
        return ext

    new_defs: list[Definition] = []
    order = [d.name for d in reversed(relevant) if d.name != of] + list(wrt)
    for t in order:
        name = adjoint[t]
        ext = extents_of(t)
        beta = []
        for k in range(len(ext)):
            beta.append(allocate(f"{name}_{k}"))
        body: Expr | None = None
        for h, acc, chain, inner in terms[t]:
            at = gamma if delta and h.name == of else None
            if isinstance(acc, int):  # argument acc of a matrix function; inner is h's seed
                assert isinstance(h.body, MatrixFn)
                if h.body.fn == "matmul":
                    body = _add(body, matmul_term(h, inner, beta, at, acc))
                    continue
                inverse = h.name if h.body.fn == "inv" else inverses[t]
                body = _add(body, matrix_term(h, inner, beta, at, inverse))
            else:
                body = _add(body, delta_term(h, acc, chain, inner, beta, at))
        new_defs.append(
            Definition(name, tuple(gamma) + tuple(beta), body if body is not None else ZERO, lead_ext + tuple(ext))
        )

    forward: list[Definition] = []
    for d in program.definitions:
        forward.append(d)
        if d.name in helpers:
            forward.append(helpers[d.name])
    inputs = program.inputs if delta else program.inputs + (TensorDecl(adjoint[of], f_ext),)
    outputs = tuple(adjoint[x] for x in wrt)
    return Program(inputs, tuple(forward) + tuple(new_defs), outputs, program.source)
