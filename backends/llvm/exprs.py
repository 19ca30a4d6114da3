"""The arithmetic half of the kernel lowering: index expressions and scalar expressions to LLVM values.

:class:`ExprLowering` is the part of a kernel's lowering that turns one
expression into instructions at the builder's position -- ``i64`` index
arithmetic (floor division, non-negative remainder, bounds), conditions,
element addresses, and the floating-point expressions of the language with
their exact semantics (see "Semantics that matter for correctness" in
:mod:`tcc.backends.llvm`).  The statement half (:mod:`.lower`) sets up the
state it reads and decides where each expression goes.
"""
from __future__ import annotations

from typing import Mapping

from llvmlite import ir

from tcc.ir.diagnostics import TccError
from tcc.ir.expr import INDEX_VALUE, Access, Binary, Select, Const, CSum, Expr, Sum, Unary, Where, postorder
from tcc.ir.index import Affine, And, Compare, Cond, FloorDiv, Lookup, Mod, Not, Or, lookups
from tcc.ir.index_range import check_index_range, cond_affines

from ..vector_math import emit_exp, emit_tanh
from .machines import CodegenTarget

__all__ = ["ExprLowering", "POW_UNROLL_LIMIT", "Scalars"]

#: ``x ** c`` with an integer constant ``|c| <= POW_UNROLL_LIMIT`` is multiplied out.
POW_UNROLL_LIMIT = 16

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

# libm/libdevice names of the language's functions where they differ
_MATH_NAMES = {"abs": "fabs"}


class _Memo:
    """Values already computed for the statement being lowered.

    A stack of scopes: a ``where`` branch pushes one, so nothing computed in
    a branch is reused after the merge, where it would not dominate.  The
    memo never outlives a statement, because a later statement may see
    different memory (a store or accumulation in between).
    """

    def __init__(self) -> None:
        self.scopes: list[dict] = [{}]

    def get(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def put(self, key, value) -> None:
        self.scopes[-1][key] = value


# how a scalar name is bound: ("let", value) or ("local", alloca)
Scalars = Mapping[str, tuple[str, ir.Value]]


class ExprLowering:
    """Expressions of one kernel to LLVM values; mixed into the kernel lowering, whose state it reads.

    It uses ``b`` (the builder), ``fn`` and ``module`` (where blocks and
    declarations go), ``memo`` (values of the statement being lowered),
    ``sizes`` and ``bufs``/``dims`` (the body's size and buffer parameters,
    and each buffer's inner extents), ``elt``/``dtype``, ``target`` (a
    :class:`~tcc.backends.llvm.machines.CodegenTarget`), ``arith_flags`` and
    ``where`` (the kernel, for error messages).
    """

    b: ir.IRBuilder
    fn: ir.Function
    module: ir.Module
    memo: _Memo
    sizes: dict[str, ir.Value]
    bufs: dict[str, tuple[ir.Value, int]]
    dims: dict[str, list[ir.Value]]
    elt: ir.Type
    dtype: str
    target: CodegenTarget
    arith_flags: tuple[str, ...]
    where: str

    # -- index arithmetic -------------------------------------------------
    def iadd(self, x: ir.Value, y: ir.Value | int, name: str = "") -> ir.Value:
        """``x + y`` in i64, folding constants so the unoptimised dumps stay readable."""
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
            return ir.Constant(I64, x.constant + y.constant)
        if isinstance(y, ir.Constant) and y.constant == 0:
            return x
        if isinstance(x, ir.Constant) and x.constant == 0:
            return y
        return self.b.add(x, y, name=name, flags=("nsw",))

    def isub(self, x: ir.Value, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(y, ir.Constant):
            return self.iadd(x, ir.Constant(I64, -y.constant))
        return self.b.sub(x, y, flags=("nsw",))

    def imul(self, x: ir.Value, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int):
            y = ir.Constant(I64, y)
        if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
            return ir.Constant(I64, x.constant * y.constant)
        if isinstance(y, ir.Constant) and y.constant == 1:
            return x
        if isinstance(x, ir.Constant) and x.constant == 1:
            return y
        return self.b.mul(x, y, flags=("nsw",))


    def bound(self, items: tuple[Affine, ...], idx: dict, fn: str) -> ir.Value:
        value = self.affine(items[0], idx)
        for a in items[1:]:
            value = self.intrinsic_call(f"llvm.{fn}", value, self.affine(a, idx))
        return value

    def intrinsic_call(self, intrinsic: str, *args: ir.Value, name: str = "") -> ir.Value:
        ty = args[0].type
        fn = self.module.declare_intrinsic(intrinsic, [ty], ir.FunctionType(ty, [ty] * len(args)))
        return self.b.call(fn, list(args), name=name)

    def affine(self, a: Affine, idx: Mapping[str, ir.Value]) -> ir.Value:
        key = ("affine", a)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        # The i64 arithmetic below is `nsw`: an overflow would be undefined,
        # so an expression that could overflow is refused, as the interpreter
        # refuses it (tcc.sizes: the range of index arithmetic).
        check_index_range(a, self.where)
        total: ir.Value = ir.Constant(I64, 0)
        for atom, coeff in a.terms:
            v = self.atom(atom, idx)
            if coeff == -1 and not (isinstance(total, ir.Constant) and total.constant == 0):
                total = self.isub(total, v)
            else:
                total = self.iadd(total, self.imul(v, coeff))
        total = self.iadd(total, a.const)
        self.memo.put(key, total)
        return total

    def atom(self, atom, idx: Mapping[str, ir.Value]) -> ir.Value:
        if isinstance(atom, str):
            v = idx.get(atom)
            if v is None:
                v = self.sizes.get(atom)
            if v is None:
                raise TccError(f"index name '{atom}' is not bound in {self.where}")
            return v
        if isinstance(atom, Lookup):  # an entry of an index input: an i64 load (validated on entry, never written)
            return self.b.load(self.address(atom.tensor, atom.indices, idx, I64), typ=I64)
        b = self.b
        num = self.affine(atom.num, idx)
        d = atom.den
        if d <= 0:  # pragma: no cover - Affine.floordiv/mod refuse these
            raise TccError(f"division by the non-positive constant {d} in {self.where}")
        pow2 = d & (d - 1) == 0
        if isinstance(atom, FloorDiv):
            if pow2:  # an arithmetic shift rounds toward -inf, as floor division must
                return b.ashr(num, ir.Constant(I64, d.bit_length() - 1))
            q = b.sdiv(num, ir.Constant(I64, d))
            r = b.srem(num, ir.Constant(I64, d))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.sub(q, b.zext(neg, I64))
        if isinstance(atom, Mod):
            if pow2:  # two's complement: the low bits are the non-negative remainder
                return b.and_(num, ir.Constant(I64, d - 1))
            r = b.srem(num, ir.Constant(I64, d))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.select(neg, b.add(r, ir.Constant(I64, d)), r)
        raise TccError(f"not an index atom in {self.where}: {atom!r}")  # pragma: no cover

    def cond(self, c: Cond, idx: Mapping[str, ir.Value]) -> ir.Value:
        b = self.b
        if isinstance(c, Compare):
            return b.icmp_signed(c.op, self.affine(c.lhs, idx), self.affine(c.rhs, idx))
        if isinstance(c, (And, Or)):
            out = self.cond(c.parts[0], idx)
            for part in c.parts[1:]:
                if any(lookups(a) for a in cond_affines(part)):  # it loads an entry of an index input
                    out = self.short_circuit(out, part, isinstance(c, And), idx)
                else:  # integer compares only: evaluating them eagerly is harmless
                    v = self.cond(part, idx)
                    out = b.and_(out, v) if isinstance(c, And) else b.or_(out, v)
            return out
        if isinstance(c, Not):
            return b.not_(self.cond(c.part, idx))
        raise TccError(f"not an index condition in {self.where}: {c!r}")

    def short_circuit(self, left: ir.Value, part: Cond, conj: bool, idx: Mapping[str, ir.Value]) -> ir.Value:
        """``left and part`` (``or`` unless ``conj``) evaluating ``part`` only where
        ``left`` does not decide: its index-array read may be in bounds only
        there (``r[d] <= n - 1 and ptr[r[d] + 1] > k``, as ``lower-loops``
        merges nested guards), and compiled code does not check indices."""
        b = self.b
        start = b.block
        rhs = self.fn.append_basic_block("cond.rhs")
        end = self.fn.append_basic_block("cond.end")
        b.cbranch(left, rhs, end) if conj else b.cbranch(left, end, rhs)
        b.position_at_end(rhs)
        self.memo.scopes.append({})  # what the branch computes does not dominate the merge
        right = self.cond(part, idx)
        self.memo.scopes.pop()
        rhs_end = b.block
        b.branch(end)
        b.position_at_end(end)
        phi = b.phi(I1)
        phi.add_incoming(ir.Constant(I1, 0 if conj else 1), start)
        phi.add_incoming(right, rhs_end)
        return phi

    def address(self, name: str, indices: tuple[Affine, ...], idx: Mapping[str, ir.Value], etype: ir.Type | None = None) -> ir.Value:
        """Row-major element address (of ``etype`` elements: the float type, or i64 for an index input);
        a 0-d buffer is its one element."""
        entry = self.bufs.get(name)
        if entry is None:
            raise TccError(f"'{name}' is not a buffer of the program ({self.where})")
        ptr, rank = entry
        if len(indices) != rank:
            raise TccError(f"{self.where} indexes '{name}' with {len(indices)} indices but it has {rank} dimensions")
        if not indices:
            return ptr
        lin = self.affine(indices[0], idx)
        for dim, ix in zip(self.dims[name], indices[1:]):
            lin = self.iadd(self.imul(lin, dim), self.affine(ix, idx))
        return self.b.gep(ptr, [lin], inbounds=True, source_etype=etype or self.elt)

    # -- scalar expressions -----------------------------------------------
    def expr(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        hit = self.memo.get(("expr", id(e)))
        if hit is not None:
            return hit
        self.operands_first(e, idx, scalars)
        value = self._expr(e, idx, scalars)
        self.memo.put(("expr", id(e)), value)
        return value

    def operands_first(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> None:
        """Lower the arithmetic below ``e`` bottom-up, with an explicit stack.

        A flat sum of many terms is a tree as deep as it is long, too deep for
        the recursive lowering of ``_expr``.  Lowering the operands of ``+``,
        ``*``, functions, ... first, in the order the recursion would take
        (left to right, children before parents, each shared node once),
        leaves ``_expr`` only memo hits one level down, so the instructions
        are the same and recursion stays shallow.  A ``where`` is lowered as a
        whole at its place: its branches may have to go in blocks of their own.
        """
        seen: set[int] = set()
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if ready:
                if node is not e:
                    self.expr(node, idx, scalars)
                continue
            if id(node) in seen or (node is not e and self.memo.get(("expr", id(node))) is not None):
                continue
            seen.add(id(node))
            stack.append((node, True))
            if isinstance(node, Unary):
                stack.append((node.operand, False))
            elif isinstance(node, Binary):
                if not (node.op == "**" and _small_int(node.rhs) is not None):  # x**n never lowers n
                    stack.append((node.rhs, False))
                stack.append((node.lhs, False))

    def const(self, v: float) -> ir.Constant:
        return ir.Constant(self.elt, float(v))

    def _expr(self, e: Expr, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            return self.const(e.value)
        if isinstance(e, Access) and e.tensor == INDEX_VALUE:  # an index or size as a value
            return b.sitofp(self.affine(e.indices[0], idx), self.elt)
        if isinstance(e, Access):
            if not e.indices and e.tensor in scalars:
                kind, v = scalars[e.tensor]
                return v if kind == "let" else b.load(v, typ=self.elt)
            return b.load(self.address(e.tensor, e.indices, idx), typ=self.elt)
        if isinstance(e, Unary):
            return self.unary(e.op, self.expr(e.operand, idx, scalars))
        if isinstance(e, Binary):
            return self.binary(e, idx, scalars)
        if isinstance(e, Where):
            return self.where_(e, idx, scalars)
        if isinstance(e, Select):  # eager: every operand is in bounds
            lhs, rhs, then, other = (self.expr(c, idx, scalars) for c in e.children())
            cond = b.fcmp_unordered("!=", lhs, rhs) if e.op == "!=" else b.fcmp_ordered(e.op, lhs, rhs)
            return b.select(cond, then, other)
        if isinstance(e, (Sum, CSum)):
            raise TccError(f"{self.where} still holds a sum; L2 expressions have none (run lower-loops)")
        raise TccError(f"cannot lower {type(e).__name__} in {self.where}")

    def binary(self, e: Binary, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        lhs = self.expr(e.lhs, idx, scalars)
        if e.op == "**":
            n = _small_int(e.rhs)
            if n is not None:
                return self.int_power(lhs, n)
            return self.math("pow", lhs, self.expr(e.rhs, idx, scalars))
        rhs = self.expr(e.rhs, idx, scalars)
        if e.op in ("max", "min"):
            return self.extreme(e.op, lhs, rhs)
        op = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}.get(e.op)
        if op is None:
            raise TccError(f"unknown operator '{e.op}' in {self.where}")
        return op(lhs, rhs, flags=self.arith_flags)

    def extreme(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """``max``/``min`` as NumPy's ``maximum``/``minimum``: NaN if either is NaN, else the larger (smaller),
        the second at a tie (``max(-0, +0)`` is ``+0``, ``max(+0, -0)`` is ``-0``): selects, which vectorise."""
        b = self.b
        wins = b.fcmp_ordered(">" if op == "max" else "<", x, y)
        pick = b.select(wins, x, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, pick)  # x NaN: x; y NaN: the compare fails, y

    def int_power(self, x: ir.Value, n: int) -> ir.Value:
        """``x ** n`` by squaring and multiplying; ``1 / x ** -n`` for negative n."""
        b = self.b
        k = abs(n)
        result: ir.Value | None = None
        base = x
        while k:
            if k & 1:
                result = base if result is None else b.fmul(result, base)
            k >>= 1
            if k:
                base = b.fmul(base, base)
        if result is None:
            return self.const(1.0)
        return b.fdiv(self.const(1.0), result) if n < 0 else result

    def unary(self, op: str, x: ir.Value) -> ir.Value:
        b = self.b
        zero, one = self.const(0.0), self.const(1.0)
        if op == "neg":
            return b.fneg(x)
        if op == "abs":
            return self.math("fabs", x)
        if op == "sign":
            # sign(-0) is +0, as in the interpreter (np.sign): a zero of either
            # sign compares equal to 0 and is replaced by the constant; NaN
            # compares false everywhere and passes through.
            rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)
            neg = b.select(b.fcmp_ordered("<", x, zero), self.const(-1.0), rest)
            return b.select(b.fcmp_ordered(">", x, zero), one, neg)
        if op == "relu":
            # relu(-0) is +0 (np.maximum(-0., 0.) is +0): `<=` catches -0 as well;
            # NaN stays NaN, as np.maximum(x, 0) keeps it.
            return b.select(b.fcmp_ordered("<=", x, zero), zero, x)
        if op == "sigmoid":  # exp(-|x|) never overflows; the interpreter's form
            e = self.math("exp", b.fneg(self.math("fabs", x)))
            d = b.fadd(one, e)
            return b.select(b.fcmp_ordered(">=", x, zero), b.fdiv(one, d), b.fdiv(e, d))
        if op in ("exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh"):
            return self.math(op, x)
        raise TccError(f"unknown function '{op}' in {self.where}")

    def math(self, fn: str, *args: ir.Value) -> ir.Value:
        """A math function: an LLVM intrinsic where the target has one, else the library's."""
        fn = _MATH_NAMES.get(fn, fn)
        if fn == "exp" and self.target.inline_exp:
            return emit_exp(self.b, self.module, args[0], self.dtype)
        if fn == "tanh" and self.target.inline_exp:
            return emit_tanh(self.b, self.module, args[0], self.dtype)
        fnty = ir.FunctionType(self.elt, [self.elt] * len(args))
        if fn in self.target.intrinsics:
            callee = self.module.declare_intrinsic(f"llvm.{fn}", [self.elt], fnty)
        else:
            symbol = self.target.math_symbol(fn, self.dtype)
            callee = self.module.globals.get(symbol)
            if callee is None:
                callee = ir.Function(self.module, fnty, symbol)
        return self.b.call(callee, list(args))

    def where_(self, e: Where, idx: Mapping[str, ir.Value], scalars: Scalars) -> ir.Value:
        b = self.b
        cond = self.cond(e.cond, idx)
        if _speculatable(e.then, scalars) and _speculatable(e.other, scalars):
            return b.select(cond, self.expr(e.then, idx, scalars), self.expr(e.other, idx, scalars))
        then = self.fn.append_basic_block("where.then")
        other = self.fn.append_basic_block("where.else")
        merge = self.fn.append_basic_block("where.end")
        b.cbranch(cond, then, other)
        values = []
        for block, branch in ((then, e.then), (other, e.other)):
            b.position_at_end(block)
            self.memo.scopes.append({})
            values.append((self.expr(branch, idx, scalars), b.block))
            self.memo.scopes.pop()
            b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(self.elt)
        for value, block in values:
            phi.add_incoming(value, block)
        return phi


# Unary operations that lower to plain instructions (or intrinsics that are
# instructions on every target), so evaluating them speculatively is harmless.
_CHEAP_UNARY = frozenset({"neg", "abs", "sign", "relu"})


def _small_int(e: Expr) -> int | None:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float):
            if not v.is_integer():
                return None
            v = int(v)
        if abs(v) <= POW_UNROLL_LIMIT:
            return v
    return None


def _speculatable(e: Expr, scalars: Scalars) -> bool:
    """True when ``e`` has no buffer load and no call, so a select may evaluate it unconditionally."""
    for node in postorder(e):
        if isinstance(node, Access) and node.tensor == INDEX_VALUE:
            continue  # integer arithmetic: always safe to evaluate
        if isinstance(node, Access):
            if node.indices or node.tensor not in scalars:
                return False
        elif isinstance(node, Unary):
            if node.op not in _CHEAP_UNARY:
                return False
        elif isinstance(node, Binary):
            if node.op == "**" and _small_int(node.rhs) is None:
                return False
        elif not isinstance(node, (Const, Where)):
            return False
    return True
