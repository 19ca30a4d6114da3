"""Structural checks of L1 programs.

The parser only checks syntax; everything that needs the whole program — is
this tensor declared, does it have that many dimensions, is this index bound —
is checked here, once, with the location of the offending access.  ``verify``
runs on user input before any pass and, with ``--verify-each``, after every
pass, so a pass that builds ill-formed IR is caught where it happens.
"""
from __future__ import annotations

from .diagnostics import TccError

from .bounds import prove_in_bounds
from .contraction import CONTRACT, contract_result
from .gram import GRAM_RANKS, gram_result
from .expr import GRAM, INDEX_VALUE, MATMUL, MATRIX_FUNCTIONS, RANGED, Access, CSum, Expr, MatrixFn, Sum, Where, format_matrix_call, postorder
from .index import Affine, format_affine, lookups
from .index_range import cond_affines
from .program import Definition, Loc, Program, TensorDecl, derived_shape


def verify(program: Program, bounds: bool = True) -> None:
    """Structural checks; with ``bounds``, also prove every access in bounds.

    Bounds are checked for definitions whose extents and sum ranges are known
    (after ``infer-ranges``): an out-of-bounds read is then a compiler bug in
    whichever pass built it.
    """
    _Verifier(program).run()
    if bounds:
        sizes = program.sizes()
        for d in program.definitions:
            if d.extents is None or any(isinstance(n, RANGED) and not n.has_range for n in postorder(d.body)):
                continue
            prove_in_bounds(program, d, sizes)


class _Verifier:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.sizes = set(program.sizes())

    def error(self, message: str, loc: Loc | None) -> TccError:
        return TccError(message, loc, self.p.source)

    def run(self) -> None:
        p = self.p
        seen: dict[str, str] = {}
        for decl in p.inputs:
            if decl.name in seen:
                raise self.error(f"'{decl.name}' is already declared", decl.loc)
            if decl.is_derived:
                self.derived(decl, seen)
            if decl.name in self.sizes:
                raise self.error(f"'{decl.name}' is used both as a size and as a tensor name", decl.loc)
            seen[decl.name] = "input"
        for d in p.definitions:
            if d.name in seen:
                kind = seen[d.name]
                raise self.error(
                    f"'{d.name}' is already {'declared as an input' if kind == 'input' else 'defined'}", d.loc
                )
            if d.name in self.sizes:
                raise self.error(f"'{d.name}' is used both as a size and as a tensor name", d.loc)
            seen[d.name] = "definition"
        for name in p.outputs:
            if p.definition(name) is None:
                raise self.error(f"output '{name}' has no definition", None)
        defined: set[str] = {decl.name for decl in p.inputs}
        for d in p.definitions:
            self.definition(d, defined)
            defined.add(d.name)

    def definition(self, d: Definition, defined: set[str]) -> None:
        for idx in d.indices:
            if idx in self.sizes:
                raise self.error(f"index '{idx}' has the name of a size", d.loc)
            if idx in {x.name for x in self.p.inputs} or self.p.definition(idx) is not None:
                raise self.error(f"index '{idx}' has the name of a tensor", d.loc)
        if d.extents is not None:
            if len(d.extents) != len(d.indices):
                raise self.error(
                    f"'{d.name}' is declared with {len(d.extents)} dimension{'s' if len(d.extents) != 1 else ''}"
                    f" but defined with {len(d.indices)} ind{'ices' if len(d.indices) != 1 else 'ex'}",
                    d.loc,
                )
            for e in d.extents:
                for n in e.names():
                    if n not in self.sizes:
                        raise self.error(f"extent of '{d.name}' uses '{n}', which is not a size of the inputs", d.loc)
        if isinstance(d.body, MatrixFn):
            self.matrix_definition(d, defined)
            return
        self.expr(d.body, d, set(d.indices), defined, {})

    def matrix_definition(self, d: Definition, defined: set[str]) -> None:
        """``B[i, j] = inv(A)[i, j]`` / ``s = det(A)`` / ``C[i, j] = matmul(A, B)[i, j]``:
        earlier matrices of matching shapes, indices by the result's order."""
        body = d.body
        assert isinstance(body, MatrixFn)
        fn = body.fn
        call = format_matrix_call(fn, body.args, body.transposed, body.spec)
        loc = self.p.loc_of(body) or d.loc
        order = body.order
        if len(d.indices) != order and not (fn == MATMUL and len(d.indices) > order):  # a batch of products
            want = f"{d.name}[i, j] = {call}[i, j]" if order else f"{d.name} = {call}"
            raise self.error(
                f"{fn} gives a {'matrix' if order else 'scalar'}: '{d.name}' must have {order} ind"
                f"{'ices' if order != 1 else 'ex'}, not {len(d.indices)} (write '{want}')",
                d.loc,
            )
        for name in body.args:
            if name not in defined:
                if name == d.name:
                    raise self.error(f"'{name}' is used in its own definition", loc)
                if self.p.definition(name) is not None:
                    raise self.error(f"'{name}' is used before its definition", loc)
                if name in self.sizes:
                    raise self.error(f"'{name}' is a size; {fn} needs a matrix", loc)
                raise self.error(f"undeclared tensor '{name}'", loc)
        matrix_extents(self.p, d)

    def expr(self, e: Expr, d: Definition, scope: set[str], defined: set[str], memo: dict) -> None:
        """Checks each (node, scope) once, in the order a recursive walk would.

        An explicit stack, not recursion: a flat sum of many terms is a tree
        as deep as it is long.  Children are pushed in reverse so that the
        first error reported is the leftmost one, as in the source.
        """
        stack: list[tuple[Expr, frozenset[str]]] = [(e, frozenset(scope))]
        while stack:
            node, here = stack.pop()
            key = (id(node), here)
            if key in memo:
                continue
            memo[key] = True
            inner = here
            loc = self.p.loc_of(node) or d.loc
            if isinstance(node, MatrixFn):
                raise self.error(
                    f"{node} is not element-wise: it can only be the whole body of a definition", loc
                )
            if isinstance(node, Access) and node.tensor == INDEX_VALUE:  # `i`, `n` as a value
                self.names(node.indices[0].names(), here, loc, "the value " + str(node))
                continue
            if isinstance(node, Access):
                self.access(node, d, here, defined, loc)
                continue
            if isinstance(node, Where):
                self.names(node.cond.names(), here, loc, "condition of where")
                self.lookups(cond_affines(node.cond), loc)
            elif isinstance(node, RANGED):
                if node.var in here:
                    raise self.error(f"sum index '{node.var}' shadows an enclosing index", loc)
                for b in node.lo + node.hi:
                    self.names(b.names(), here, loc, f"bounds of sum[{node.var}]")
                self.lookups(node.lo + node.hi, loc)
                inner = here | {node.var}
            elif isinstance(node, CSum):
                for v in node.vars:
                    if v in here:
                        raise self.error(f"sum index '{v}' shadows an enclosing index", loc)
                inner = here | set(node.vars)
                for c in node.constraints:
                    self.names(c.names(), inner, loc, "constraints of sum")
            stack.extend((c, inner) for c in reversed(node.children()))

    def derived(self, decl: TensorDecl, earlier: dict[str, str]) -> None:
        """``index P[v + 1] <= n = inverse_ptr(tok)``: of an earlier 1-D index array, with the shape it gives."""
        fn, name = decl.derived  # type: ignore[misc]
        src = self.p.input(name)
        if src is None or not src.is_index or name not in earlier or len(src.extents) != 1:
            raise self.error(f"{fn}({name}) needs a one-dimensional index array '{name}' declared before "
                             f"'{decl.name}'", decl.loc)
        extents, bound = derived_shape(fn, src)
        if extents != decl.extents or bound != decl.bound:
            want = f"{decl.name}[{', '.join(format_affine(e) for e in extents)}] {bound[0]} {format_affine(bound[1])}"
            raise self.error(f"'{decl.name}' = {fn}({name}) must be declared as {want}", decl.loc)

    def lookups(self, affines: "tuple[Affine, ...] | list[Affine]", loc: Loc | None) -> None:
        """Each read inside an index (``tok[i]``) is of an index input, with its rank and declared bound."""
        for a in affines:
            for lk in lookups(a):
                decl = self.p.input(lk.tensor)
                if decl is None or not decl.is_index:
                    raise self.error(f"'{lk.tensor}' is read inside an index, but only arrays declared with "
                                     f"'index' can be (index {lk.tensor}[...] < BOUND)", loc)
                if len(lk.indices) != len(decl.extents):
                    rank = len(decl.extents)
                    raise self.error(f"index array '{lk.tensor}' has {rank} dimension{'s' if rank != 1 else ''} "
                                     f"but {lk} gives {len(lk.indices)}", loc)
                if lk.hi != decl.index_hi:
                    raise self.error(f"{lk} carries the bound {lk.hi} but '{lk.tensor}' is declared with entries "
                                     f"up to {decl.index_hi}", loc)

    def names(self, names: tuple[str, ...], scope: set[str] | frozenset[str], loc: Loc | None, where: str) -> None:
        for n in names:
            if n not in scope and n not in self.sizes:
                raise self.error(f"unbound index '{n}' in {where}", loc)

    def access(self, e: Access, d: Definition, scope: set[str] | frozenset[str], defined: set[str], loc: Loc | None) -> None:
        text = str(e)
        name = e.tensor
        if name not in defined:
            if name == d.name:
                raise self.error(f"'{name}' is used in its own definition", loc)
            if self.p.definition(name) is not None:
                raise self.error(f"'{name}' is used before its definition", loc)
            if name in self.sizes and not e.indices:
                raise self.error(f"'{name}' is a size; sizes can only appear inside [...]", loc)
            if name in scope and not e.indices:
                raise self.error(f"'{name}' is an index; indices can only appear inside [...]", loc)
            raise self.error(f"undeclared tensor '{name}'", loc)
        decl = self.p.input(name)
        if decl is not None and decl.is_index:
            raise self.error(f"index array '{name}' holds integers: it can only be read inside the [...] of "
                             f"another read or in a sum bound, not as a value ({text})", loc)
        self.lookups(e.indices, loc)
        extents = self.p.extents_of(name)
        if extents is None:
            other = self.p.definition(name)
            rank = len(other.indices) if other is not None else 0
        else:
            rank = len(extents)
        if len(e.indices) != rank:
            dims = f"{rank} dimension{'s' if rank != 1 else ''}"
            given = f"{len(e.indices)} ind{'ices' if len(e.indices) != 1 else 'ex'}"
            raise self.error(f"'{name}' has {dims} but {text} gives {given}", loc)
        for ix in e.indices:
            for n in ix.names():
                if n not in scope and n not in self.sizes:
                    raise self.error(f"unbound index '{n}' in {text}", loc)


def _matmul_batch(a: str, b: str, ea: tuple[Affine, ...], eb: tuple[Affine, ...], loc, program: Program) -> tuple[Affine, ...]:  # noqa: ANN001
    """The batch extents of ``matmul(A, B)``: the leading extents of ``A`` and ``B``, equal where both
    have them; a matrix (2 dimensions) is the same for every member of the other's batch."""
    ba, bb = ea[:-2], eb[:-2]
    if ba and bb and ba != bb:
        raise TccError(
            f"matmul needs '{a}' and '{b}' to have the same batch extents (all but the last two): "
            f"'{a}' is {' x '.join(map(format_affine, ea))}, '{b}' is {' x '.join(map(format_affine, eb))}",
            loc, program.source)
    return ba or bb


def matrix_extents(program: Program, d: Definition) -> tuple[Affine, ...] | None:
    """The extents of a matrix-function definition: the argument's (inv, adj), () (det,
    logdet), or (rows of A, columns of B) for ``matmul(A, B)``.

    Checks that every argument is a matrix, square for inv/adj/det/logdet and
    with equal inner extents for matmul; None while an argument's extents are
    unknown (before ``infer-ranges``).  Raises a located TccError otherwise.
    """
    body = d.body
    assert isinstance(body, MatrixFn)
    fn = body.fn
    loc = program.loc_of(body) or d.loc
    call = format_matrix_call(fn, body.args, body.transposed, body.spec)
    exts: list[tuple[Affine, ...] | None] = []
    for name in body.args:
        ext = program.extents_of(name)
        if ext is None:
            other = program.definition(name)
            rank = len(other.indices) if other is not None else 0
        else:
            rank = len(ext)
        if fn == CONTRACT:
            if rank != len(body.spec[len(exts)]):
                raise TccError(f"{call}: '{name}' has {rank} dimensions", loc, program.source)
        elif fn == GRAM:
            if rank != GRAM_RANKS[len(exts)]:
                raise TccError(f"gram needs a matrix and a vector: '{name}' has {rank} dimensions", loc, program.source)
        elif rank != 2 and not (fn == MATMUL and rank > 2):  # matmul also takes batches of matrices
            dims = f"{rank} dimension{'s' if rank != 1 else ''}"
            raise TccError(f"{fn} needs a matrix (2 dimensions): '{name}' has {dims}", loc, program.source)
        exts.append(ext)
    if any(ext is None for ext in exts):
        return None
    if fn == CONTRACT:
        result, why = contract_result(body.spec, exts[0] or (), exts[1] or ())
        if why is not None or body.spec[2] != d.indices:
            raise TccError(f"{call} is not a contraction with result {d.name}[{', '.join(d.indices)}]: "
                           f"{why or 'the indices differ'}", loc, program.source)
    elif fn == GRAM:
        result, why = gram_result(*body.args, exts[0] or (), exts[1] or ())
        if why is not None:
            raise TccError(why, loc, program.source)
    elif fn == MATMUL:
        (a, b), (ea, eb) = body.args, exts
        assert ea is not None and eb is not None
        batch = _matmul_batch(a, b, tuple(ea), tuple(eb), loc, program)
        # an argument read transposed: its columns are the rows of the product's operand
        oa, ob = (tuple(e[-2:])[::-1] if t else tuple(e[-2:]) for e, t in zip((ea, eb), body.transposed))
        if oa[1] != ob[0]:
            na, nb = (f"transpose({x})" if t else x for x, t in zip((a, b), body.transposed))
            raise TccError(
                f"matmul needs the columns of '{na}' to match the rows of '{nb}': "
                f"'{a}' is {' x '.join(map(format_affine, ea))}, '{b}' is {' x '.join(map(format_affine, eb))}",
                loc,
                program.source,
            )
        result: tuple[Affine, ...] = batch + (oa[0], ob[1])
        if len(d.indices) != len(result):
            raise TccError(
                f"{call} has {len(result)} dimensions: '{d.name}' must have {len(result)} indices, "
                f"not {len(d.indices)}", d.loc, program.source)
    else:
        (name,), (ext,) = body.args, exts
        assert ext is not None
        if ext[0] != ext[1]:
            raise TccError(
                f"{fn} needs a square matrix: '{name}' is {format_affine(ext[0])} x {format_affine(ext[1])}",
                loc,
                program.source,
            )
        result = (ext[0], ext[1]) if MATRIX_FUNCTIONS[fn] else ()
    if d.extents is not None and tuple(d.extents) != result:
        shape = " x ".join(format_affine(e) for e in d.extents) or "a scalar"
        want = " x ".join(format_affine(e) for e in result) or "a scalar"
        raise TccError(
            f"'{d.name}' is declared {shape}, but {call} is {want}", d.loc, program.source
        )
    return result
