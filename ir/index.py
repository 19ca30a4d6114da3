"""Quasi-affine index expressions and index conditions.

Every index inside ``[...]`` is an integer combination of *atoms* plus a
constant.  An atom is an index or size name (a ``str``) or ``e // c`` /
``e % c`` with a positive integer constant ``c``.  Floor division and modulo
only appear in derived programs: they are how the solution ``α = Iβ + Kz`` of
``Aα = β`` is written when the pseudo-inverse ``I`` is fractional.  Keeping
them as atoms (instead of allowing rational coefficients) keeps the IR
integral and closed under differentiation: a later pass can always turn an atom
back into a fresh variable with two linear inequalities.

All classes here are frozen and compare by value, and their printed form is
canonical (terms sorted), so equal expressions print identically.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping, Union

Atom = Union[str, "FloorDiv", "Mod", "Lookup"]

#: The environment key under which :meth:`Affine.evaluate` finds the array of index input
#: ``tok`` (``env["#tok"]``): ``#`` keeps it apart from every index and size name.
LOOKUP_ENV = "#"

_NATURAL = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """Sort ``dx_z2`` before ``dx_z10``: names print in the order humans expect."""
    return tuple(int(p) if p.isdigit() else p for p in _NATURAL.split(name))


def atom_key(atom: Atom) -> tuple:
    if isinstance(atom, str):
        return (0, natural_key(atom))
    return (1, str(atom))


@dataclass(frozen=True)
class Affine:
    """``sum(coeff * atom) + const`` with integer coefficients, canonical term order."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    # -- construction -------------------------------------------------
    @staticmethod
    def of(terms: Iterable[tuple[Atom, int]] = (), const: int = 0) -> "Affine":
        acc: dict[Atom, int] = {}
        for atom, c in terms:
            if c:
                acc[atom] = acc.get(atom, 0) + c
        items = sorted(((a, c) for a, c in acc.items() if c), key=lambda t: atom_key(t[0]))
        return Affine(tuple(items), int(const))

    @staticmethod
    def var(name: str, coeff: int = 1) -> "Affine":
        return Affine(((name, coeff),), 0) if coeff else Affine()

    @staticmethod
    def constant(c: int) -> "Affine":
        return Affine((), int(c))

    @staticmethod
    def atom(atom: Atom) -> "Affine":
        return Affine(((atom, 1),), 0)

    # -- arithmetic ---------------------------------------------------
    def __add__(self, other: "Affine | int") -> "Affine":
        other = _lift(other)
        return Affine.of(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __sub__(self, other: "Affine | int") -> "Affine":
        return self + (-_lift(other))

    def __rsub__(self, other: "Affine | int") -> "Affine":
        return _lift(other) - self

    def __neg__(self) -> "Affine":
        return Affine(tuple((a, -c) for a, c in self.terms), -self.const)

    def __mul__(self, k: int) -> "Affine":
        if not isinstance(k, int):
            return NotImplemented
        if k == 0:
            return Affine()
        return Affine(tuple((a, c * k) for a, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def floordiv(self, d: int) -> "Affine":
        """``self // d`` folded where exact (all coefficients divisible by d)."""
        if d <= 0:
            raise ValueError("division by a non-positive constant")
        if d == 1:
            return self
        if all(c % d == 0 for _, c in self.terms):
            return Affine(tuple((a, c // d) for a, c in self.terms), 0) + (self.const // d)
        if self.is_constant:
            return Affine.constant(self.const // d)
        return Affine.atom(FloorDiv(self, d))

    def ceildiv(self, d: int) -> "Affine":
        """``ceil(self / d)``, written ``(self + d - 1) // d`` (the form the printer shows)."""
        return self if d == 1 else (self + (d - 1)).floordiv(d)

    def mod(self, d: int) -> "Affine":
        if d <= 0:
            raise ValueError("modulo by a non-positive constant")
        if d == 1:
            return Affine()
        if all(c % d == 0 for _, c in self.terms):
            return Affine.constant(self.const % d)
        return Affine.atom(Mod(self, d))

    # -- queries ------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return not self.terms

    @property
    def is_linear(self) -> bool:
        """True when every atom is a plain name (no ``//`` or ``%``)."""
        return all(isinstance(a, str) for a, _ in self.terms)

    def coeff(self, atom: Atom) -> int:
        for a, c in self.terms:
            if a == atom:
                return c
        return 0

    def atoms(self) -> tuple[Atom, ...]:
        return tuple(a for a, _ in self.terms)

    def names(self) -> tuple[str, ...]:
        """Every name this expression mentions, including inside atoms, in first-seen order."""
        out: dict[str, None] = {}
        for a, _ in self.terms:
            if isinstance(a, str):
                out[a] = None
            else:
                for n in atom_names(a):
                    out[n] = None
        return tuple(out)

    def substitute(self, mapping: Mapping[str, "Affine"]) -> "Affine":
        """Replace names by affine expressions (atoms are rebuilt and refolded)."""
        if not mapping:
            return self
        result = Affine.constant(self.const)
        for a, c in self.terms:
            if isinstance(a, str):
                result = result + (mapping[a] * c if a in mapping else Affine.var(a, c))
            elif isinstance(a, Lookup):
                result = result + Affine.atom(a.substitute(mapping)) * c
            elif isinstance(a, FloorDiv):
                result = result + a.num.substitute(mapping).floordiv(a.den) * c
            else:
                result = result + a.num.substitute(mapping).mod(a.den) * c
        return result

    def map_atoms(self, fn: Callable[[Atom], "Affine"]) -> "Affine":
        result = Affine.constant(self.const)
        for a, c in self.terms:
            result = result + fn(a) * c
        return result

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Evaluate with ints or NumPy integer arrays (floor semantics for // and %)."""
        total: Any = self.const
        for a, c in self.terms:
            total = total + c * _eval_atom(a, env)
        return total

    def __str__(self) -> str:
        return format_affine(self)

    def __repr__(self) -> str:
        return f"Affine({format_affine(self)!r})"


def _lift(x: "Affine | int") -> Affine:
    if isinstance(x, Affine):
        return x
    if isinstance(x, int):
        return Affine.constant(x)
    raise TypeError(f"cannot use {x!r} in an index expression")


@dataclass(frozen=True)
class FloorDiv:
    num: Affine
    den: int

    def __str__(self) -> str:
        return f"{_atom_operand(self.num)} // {self.den}"


@dataclass(frozen=True)
class Mod:
    num: Affine
    den: int

    def __str__(self) -> str:
        return f"{_atom_operand(self.num)} % {self.den}"


@dataclass(frozen=True)
class Lookup:
    """``tok[i]``: an entry of an index input, used as an atom of index expressions.

    An indirect read ``emb[tok[i], j]`` is the access ``emb`` at the affine
    ``1*Lookup(tok, (i,)) + 0``: every pass that walks, substitutes or prints
    index expressions handles it as it handles ``//`` and ``%`` atoms, and
    the prover (:class:`tcc.ir.polyhedra.AtomTable`) turns it into a fresh
    variable in ``0..hi`` -- the declared bound, carried here (``hi`` is
    inclusive: ``index tok[n] < v`` gives ``v - 1``) so that no pass needs
    the declarations to reason about it.  It is never linear
    (:attr:`Affine.is_linear`), so passes that need affine maps (BLAS
    outlining, index solving) leave it alone.
    """

    tensor: str
    indices: tuple[Affine, ...]
    hi: Affine

    def names(self) -> tuple[str, ...]:
        """Index names of the read (not the sizes of the bound: they are not where it reads)."""
        return tuple(dict.fromkeys(n for ix in self.indices for n in ix.names()))

    def substitute(self, mapping: Mapping[str, Affine]) -> "Lookup":
        return Lookup(self.tensor, tuple(ix.substitute(mapping) for ix in self.indices), self.hi)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The entries at the evaluated positions: ``env["#tok"]`` is a function of the
        position list that reads them (the interpreter's, which clamps inactive lanes)."""
        return env[LOOKUP_ENV + self.tensor]([ix.evaluate(env) for ix in self.indices])

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(format_affine(i) for i in self.indices)}]"


def atom_names(atom: Atom) -> tuple[str, ...]:
    """The index names an atom depends on: itself, a ``//``/``%`` numerator's, or a lookup's position's."""
    if isinstance(atom, str):
        return (atom,)
    return atom.names() if isinstance(atom, Lookup) else atom.num.names()


def lookups(a: Affine) -> tuple["Lookup", ...]:
    """Every :class:`Lookup` in ``a``, nested ones (``x[col[perm[k]]]``) after their hosts."""
    out: list[Lookup] = []
    for atom, _ in a.terms:
        if isinstance(atom, Lookup):
            out.append(atom)
            for ix in atom.indices:
                out.extend(lookups(ix))
        elif not isinstance(atom, str):
            out.extend(lookups(atom.num))
    return tuple(out)


def of_sizes(a: Affine, sizes: "set[str] | frozenset[str]") -> bool:
    """``a`` is affine in ``sizes`` alone: no index names, and no read of an index array
    (``ptr[0]`` names nothing, yet its value is data, not a size)."""
    return set(a.names()) <= sizes and not lookups(a)


def _atom_operand(a: Affine) -> str:
    s = format_affine(a)
    if len(a.terms) == 1 and a.const == 0 and a.terms[0][1] == 1 and isinstance(a.terms[0][0], str):
        return s
    return f"({s})"


def _eval_atom(a: Atom, env: Mapping[str, Any]) -> Any:
    if isinstance(a, str):
        return env[a]
    if isinstance(a, Lookup):
        return a.evaluate(env)
    v = a.num.evaluate(env)
    return v // a.den if isinstance(a, FloorDiv) else v % a.den


def _format_term(atom: Atom, c: int) -> str:
    s = str(atom)
    if not isinstance(atom, str) and abs(c) != 1:
        s = f"({s})"
    if abs(c) == 1:
        return s
    return f"{abs(c)}*{s}"


def format_affine(a: Affine) -> str:
    """Positive terms first, then negative ones, then the constant: ``n - i - 1``."""
    pos = [(x, c) for x, c in a.terms if c > 0]
    neg = [(x, c) for x, c in a.terms if c < 0]
    parts: list[str] = []
    if not pos and neg and a.const > 0:
        parts.append(str(a.const))
        a = Affine(a.terms, 0)
    for x, c in pos:
        parts.append(("" if not parts else " + ") + _format_term(x, c))
    for x, c in neg:
        parts.append(("-" if not parts else " - ") + _format_term(x, c))
    if a.const or not parts:
        if not parts:
            parts.append(str(a.const))
        else:
            parts.append(f" + {a.const}" if a.const > 0 else f" - {-a.const}")
    return "".join(parts)


# ---------------------------------------------------------------------------
# Conditions
# ---------------------------------------------------------------------------

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


class Cond:
    """Base of index conditions (the first argument of ``where`` and sum constraints)."""

    __slots__ = ()

    def names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def substitute(self, mapping: Mapping[str, Affine]) -> "Cond":
        raise NotImplementedError

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def __str__(self) -> str:
        return format_cond(self)


@dataclass(frozen=True)
class Compare(Cond):
    op: str
    lhs: Affine
    rhs: Affine

    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.lhs.names() + self.rhs.names()))

    def substitute(self, mapping: Mapping[str, Affine]) -> "Compare":
        return Compare(self.op, self.lhs.substitute(mapping), self.rhs.substitute(mapping))

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        a, b = self.lhs.evaluate(env), self.rhs.evaluate(env)
        return {
            "==": lambda: a == b,
            "!=": lambda: a != b,
            "<": lambda: a < b,
            "<=": lambda: a <= b,
            ">": lambda: a > b,
            ">=": lambda: a >= b,
        }[self.op]()


@dataclass(frozen=True)
class _Junction(Cond):
    """``and`` / ``or`` of several parts; subclasses name the operator."""

    parts: tuple[Cond, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for p in self.parts for n in p.names()))

    def substitute(self, mapping: Mapping[str, Affine]) -> Cond:
        return type(self)(tuple(p.substitute(mapping) for p in self.parts))

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Left to right, and on scalars short-circuit: a later part may read
        through an index array only where the earlier parts hold
        (``r[d] <= n - 1 and ptr[r[d] + 1] > k``), as compiled code evaluates
        it.  Arrays (the interpreter's lanes) combine elementwise; their
        lookups clamp inactive lanes."""
        out = self.parts[0].evaluate(env)
        for p in self.parts[1:]:
            if not hasattr(out, "shape") or out.shape == ():
                if bool(out) == self._absorbing:
                    return out
            out = self._combine(out, p.evaluate(env))
        return out

    #: the value that decides the junction (``False`` for ``and``, ``True`` for ``or``)
    _absorbing: ClassVar[bool] = False

    @staticmethod
    def _combine(a: Any, b: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class And(_Junction):
    @staticmethod
    def _combine(a: Any, b: Any) -> Any:
        return a & b


@dataclass(frozen=True)
class Or(_Junction):
    _absorbing = True

    @staticmethod
    def _combine(a: Any, b: Any) -> Any:
        return a | b


@dataclass(frozen=True)
class Not(Cond):
    part: Cond

    def names(self) -> tuple[str, ...]:
        return self.part.names()

    def substitute(self, mapping: Mapping[str, Affine]) -> Cond:
        return Not(self.part.substitute(mapping))

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        v = self.part.evaluate(env)
        return ~v if hasattr(v, "dtype") else (not v)


# precedence of the condition operators, loosest first
_OR_LEVEL, _AND_LEVEL, _NOT_LEVEL, _CMP_LEVEL = 1, 2, 3, 4


def _cond_level(c: Cond) -> int:
    if isinstance(c, Or):
        return _OR_LEVEL
    if isinstance(c, And):
        return _AND_LEVEL
    if isinstance(c, Not):
        return _NOT_LEVEL
    return _CMP_LEVEL


def format_cond(c: Cond, min_level: int = 0) -> str:
    """The condition in the language, parenthesised only where ``min_level`` needs it.

    It lives beside the condition classes (as :func:`format_affine` beside
    ``Affine``) so that ``str(cond)`` needs no module above this one.
    """
    if isinstance(c, Compare):
        s = f"{format_affine(c.lhs)} {c.op} {format_affine(c.rhs)}"
    elif isinstance(c, And):
        s = " and ".join(format_conjunct(p) for p in c.parts)
    elif isinstance(c, Or):
        s = " or ".join(format_cond(p, _OR_LEVEL + 1) for p in c.parts)
    elif isinstance(c, Not):
        s = "not " + format_cond(c.part, _NOT_LEVEL)
    else:
        raise TypeError(c)
    return f"({s})" if _cond_level(c) < min_level else s


def format_conjunct(c: Cond) -> str:
    """The condition as one part of a conjunction (an ``or`` is parenthesised):
    the constraints of a constrained sum are a conjunction written with commas."""
    return format_cond(c, _AND_LEVEL + 1)


def conjuncts(c: Cond) -> tuple[Cond, ...]:
    """Flatten nested ``and``s: the parts a solver may use one by one."""
    if isinstance(c, And):
        return tuple(x for p in c.parts for x in conjuncts(p))
    return (c,)


def make_and(parts: Iterable[Cond]) -> Cond | None:
    """Conjunction of parts without duplicates; ``None`` for the empty conjunction (true)."""
    flat: dict[Cond, None] = {}
    for p in parts:
        for q in conjuncts(p):
            flat[q] = None
    items = tuple(flat)
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return And(items)


_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def negate(c: Cond) -> Cond:
    """Push ``not`` inward so that inequalities stay usable by the solvers."""
    if isinstance(c, Compare):
        return Compare(_NEGATED[c.op], c.lhs, c.rhs)
    if isinstance(c, Not):
        return c.part
    if isinstance(c, And):
        return Or(tuple(negate(p) for p in c.parts))
    if isinstance(c, Or):
        return And(tuple(negate(p) for p in c.parts))
    raise TypeError(c)


def compare(op: str, diff: Affine) -> Compare:
    """``diff op 0`` printed readably: positive terms left, negative terms right."""
    if op in ("==", "!=") and diff.terms and diff.terms[0][1] < 0:
        diff = -diff
    pos = Affine.of([(a, c) for a, c in diff.terms if c > 0])
    neg = Affine.of([(a, -c) for a, c in diff.terms if c < 0])
    k = diff.const
    if not pos.terms and neg.terms:
        # -x + k op 0  ->  x flip(op) k
        flip = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
        return Compare(flip, neg, Affine.constant(k))
    if not neg.terms:
        return Compare(op, pos, Affine.constant(-k))
    if k >= 0:
        return Compare(op, pos + k, neg)
    return Compare(op, pos, neg + (-k))
