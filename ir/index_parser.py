"""Index inputs: the part of the recursive-descent parser that reads ``index`` lines and indirect reads (issue 15).

    stmt       := 'index' idecl (',' idecl)*
    idecl      := NAME ('[' index (',' index)* ']')? ('<' | '<=') index ('=' DERIVED '(' NAME ')')?
    ifactor    := ... | NAME '[' index (',' index)* ']'      # NAME declared by 'index'

``index tok[n] < v`` declares an integer input whose entries lie in
``0..v - 1`` (``<= nnz``: ``0..nnz``).  A read of it is an index expression:
it may stand inside the brackets of another read (``emb[tok[i], j]``,
``x[perm[i] + 1]``) or in a sum bound (``sum[k: ptr[i]..ptr[i + 1] - 1]``),
and is a :class:`~tcc.ir.index.Lookup` atom carrying the declared bound.
An index array must be declared before its first read: the atom needs its
bound.  A mixin of :class:`tcc.ir.parser.Parser`, kept apart because the
parser module is at its size limit.
"""
from __future__ import annotations

from typing import Any

from .expr import INDEX_VALUE, Access, Binary, Const, Expr, Unary, is_index_value
from .index import Affine, Lookup, format_affine
from .program import DERIVED_INDEX, TensorDecl

__all__ = ["IndexDeclarations", "index_affine"]


class IndexDeclarations:
    """``index`` declarations and ``tok[...]`` inside index expressions, over the host parser's cursor."""

    # provided by the parser this is mixed into
    peek: Any
    expect: Any
    advance: Any
    name: Any
    error: Any
    unexpected: Any
    index: Any
    index_list: Any
    record: Any
    unary: Any
    i: int
    size_names: set[str]
    index_arrays: dict[str, tuple[Affine, TensorDecl, Any]]  # name -> (largest entry, declaration, bound token)

    def index_declarations(self, st: Any, _word: Any = None) -> None:
        """The declarations after ``index``: inputs like ``input``'s, each with its bound."""
        while True:
            ntok, decl = self.index_declaration(set(st.declared) | set(st.defs))
            st.declared[ntok.value] = ntok
            st.inputs.append(decl)
            st.shapes[ntok.value] = decl.extents
            if not self.peek().is_op(","):
                break
            self.advance()

    def index_declaration(self, taken: "set[str]") -> tuple[Any, TensorDecl]:
        """One ``NAME[extents] < BOUND`` (``<=``), remembered so that later index expressions may read it."""
        ntok = self.name("an index array name")
        if ntok.value in taken:
            raise self.error(f"'{ntok.value}' is already declared", ntok)
        if not self.peek().is_op("["):  # inside brackets a bare name is an index variable, so a scalar could never be read
            raise self.unexpected(f"the extents of index array '{ntok.value}' ('{ntok.value}[1] < ...' for one integer, "
                                  f"read as {ntok.value}[0])", self.peek())
        extents: tuple[Affine, ...] = self.index_list()
        op = self.peek()
        if not op.is_op("<", "<="):
            raise self.unexpected(f"'<' or '<=' and the bound of index array '{ntok.value}'", op)
        self.advance()
        btok = self.peek()
        bound = self.index()
        if any(not isinstance(a, str) for a in bound.atoms()):
            raise self.error(f"the bound of index array '{ntok.value}' must be affine in sizes", btok)
        derived = self.derivation() if self.peek().is_op("=") else None
        decl = TensorDecl(ntok.value, extents, ntok.loc, (op.value, bound), derived)
        self.size_names.update(n for e in extents for n in e.names())
        self.index_arrays[ntok.value] = (decl.index_hi, decl, btok)
        return ntok, decl

    def derivation(self) -> tuple[str, str]:
        """``= inverse_ptr(tok)``: an index array the call computes from the earlier index array ``tok``."""
        self.advance()
        ftok = self.peek()
        if ftok.kind != "NAME" or ftok.value not in DERIVED_INDEX:
            raise self.unexpected(f"one of {', '.join(DERIVED_INDEX)}", ftok)
        self.advance()
        self.expect("(")
        stok = self.name("an index array name")
        if stok.value not in self.index_arrays:
            raise self.error(f"'{stok.value}' is not an index array declared before this line", stok)
        self.expect(")")
        return ftok.value, stok.value

    def lookup(self, tok: Any) -> Affine:
        """``tok[i]`` in an index expression: a :class:`Lookup` atom; any other read there is an error."""
        hi = self.index_arrays.get(tok.value, (None,))[0]
        if hi is None or not self.peek(1).is_op("["):
            raise self.error(f"'{tok.value}{self.peek(1).value}...' is a value, but index expressions (bounds, "
                             "extents, index conditions) are integers: compare values in where(...)"
                             + ("" if hi is not None else "; an array read inside an index must be declared with "
                                "'index' before it is read"), tok)
        self.advance()
        atom = Lookup(tok.value, self.index_list(), hi)
        self.record(atom, tok)  # where the read is, for out-of-bounds reports (ir/bounds.py)
        return Affine.atom(atom)

    def index_array_value(self, tok: Any) -> Expr:
        """``tok[i]`` read as a value (the cursor just past the name): its integer entry, an index value."""
        self.i -= 1  # back to the name: lookup reads `tok[...]` whole
        node = Access(INDEX_VALUE, (self.lookup(tok),))
        self.record(node, tok)
        return node

    def index_division(self, lhs: Expr, optok: Any) -> Expr:
        """``k // 2`` or ``(i + j) % 3`` as a value: the integer quotient or remainder of an index
        expression, as in an index map.

        Derivatives of strided reads carry such quotients into values (``cos(k)``
        of ``x[2*k]`` differentiates to ``cos((dx_0 // 2))``), and every printed
        program must parse back, so a value may hold them too.  Both operands
        must be integers: indices, sizes, index-array reads and integer literals
        combined by ``+``, ``-`` and ``*`` on the left, a positive literal on the right.
        """
        dtok = self.peek()
        rhs = self.unary()
        numerator = index_affine(lhs)
        if numerator is None:
            raise self.error(f"'{optok.value}' takes integers (indices, sizes, integer literals): "
                             "use '/' to divide values", optok)
        divisor = index_affine(rhs)
        if divisor is None or not divisor.is_constant or divisor.const <= 0:
            raise self.error(f"the divisor of '{optok.value}' must be a positive integer constant", dtok)
        a = numerator.floordiv(divisor.const) if optok.value == "//" else numerator.mod(divisor.const)
        return Access(INDEX_VALUE, (a,)) if not a.is_constant else Const(a.const)

    def index_fold(self, e: Expr) -> Expr:
        """``e`` (``2 * i - j + 1``, ``-i``, ``n + 1``) as the one value ``#index[2*i - j + 1]`` where it
        is an integer combination of indices and sizes, else ``e`` itself.

        One node for one integer quantity, whoever builds it: a pass substituting
        ``i -> n - 1 - j`` into the value ``i`` gets ``#index[n - 1 - j]``, which
        prints as ``n - 1 - j`` (:func:`index_value`), so the parser must read
        that text back as the same node for ``parse(print(p)) == p``.  An
        expression whose combination is a constant (``i - i``) stays as written.
        """
        if is_index_value(e) or not _integer_shaped(e):
            return e
        a = index_affine(e)
        return Access(INDEX_VALUE, (a,)) if a is not None and not a.is_constant else e

    def check_index_bounds(self, st: Any, sizes: set[str]) -> None:
        """Every name in an index array's bound is a size (bound from some input's shape)."""
        for _, decl, btok in self.index_arrays.values():
            for n in decl.bound[1].names():
                if n not in sizes:
                    raise self.error(
                        f"the bound {format_affine(decl.bound[1])} of index array '{decl.name}' uses '{n}', "
                        f"which is not a size of any input (sizes: {', '.join(sorted(sizes)) or 'none'})", btok)


#: the most nodes :func:`_integer_shaped` looks at: the parser folds at every ``+``/``*`` of a
#: chain, so a long sum of values (20 000 terms) must be refused in constant time, not walked
_FOLD_NODES = 64


def _integer_shaped(e: Expr) -> bool:
    """``e`` has at most :data:`_FOLD_NODES` nodes, each an index value, an integer literal,
    a negation or ``+``/``-``/``*``: the only trees :func:`index_affine` can fold."""
    stack, seen = [e], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > _FOLD_NODES:
            return False
        if is_index_value(node):
            continue
        if isinstance(node, Const):
            if not isinstance(node.value, int) or isinstance(node.value, bool):
                return False
        elif isinstance(node, Unary) and node.op == "neg":
            stack.append(node.operand)
        elif isinstance(node, Binary) and node.op in ("+", "-", "*"):
            stack += (node.lhs, node.rhs)
        else:
            return False
    return True


def index_affine(e: Expr) -> Affine | None:
    """The index expression an integer-valued ``e`` computes (the inverse of :func:`index_value`),
    or None when ``e`` is not built of index values and integer literals by ``+``, ``-`` and
    integer scaling; the parser uses it to read ``k // 2`` in a value."""
    if is_index_value(e):
        return e.indices[0]
    if isinstance(e, Const):
        v = e.value
        return Affine.constant(v) if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(e, Unary) and e.op == "neg":
        a = index_affine(e.operand)
        return None if a is None else -a
    if isinstance(e, Binary) and e.op in ("+", "-", "*"):
        lhs, rhs = index_affine(e.lhs), index_affine(e.rhs)
        if lhs is None or rhs is None:
            return None
        if e.op == "+":
            return lhs + rhs
        if e.op == "-":
            return lhs - rhs
        if lhs.is_constant:
            return rhs * lhs.const
        return lhs * rhs.const if rhs.is_constant else None
    return None
