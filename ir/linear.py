"""Exact rational linear forms over opaque symbols.

Index arithmetic in the compiler (pseudo-inverse times a parameter index,
bounds produced by Fourier-Motzkin elimination, ...) is affine in a handful of
symbols.  A dedicated immutable value type keeps that arithmetic exact
(``Fraction`` coefficients, never floats) and hashable, so forms can be
deduplicated and used as dictionary keys.  Terms are kept in order of first
appearance so that printing and iteration are deterministic, while equality
and hashing ignore that order.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Hashable, Iterable, Mapping, Tuple, Union

Scalar = Union[int, Fraction]
Symbol = Hashable

__all__ = ["Linear", "Scalar", "Symbol"]


#: the Fractions of small integers, made once: index arithmetic is mostly small integer coefficients,
#: and ``Fraction(int)`` was the compile pipeline's most frequent call (infer-ranges' proofs)
_SMALL = {i: Fraction(i) for i in range(-64, 65)}


def _as_fraction(value: Any) -> Fraction:
    """Convert an exact scalar to ``Fraction``; floats are rejected on purpose
    because a silently rounded coefficient would corrupt index arithmetic."""
    kind = type(value)
    if kind is Fraction:  # immutable: shared, not copied
        return value
    if kind is int:
        small = _SMALL.get(value)
        return small if small is not None else Fraction(value)
    if isinstance(value, bool):
        return Fraction(int(value))
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    raise TypeError(f"exact scalar (int or Fraction) expected, got {type(value).__name__}: {value!r}")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, Fraction)) and not isinstance(value, float)


class Linear:
    """Immutable affine form ``const + sum(coeff * symbol)``."""

    __slots__ = ("_terms", "_const", "_key", "_hash")

    def __init__(
        self,
        terms: Mapping[Symbol, Scalar] | Iterable[tuple[Symbol, Scalar]] = (),
        const: Scalar = 0,
    ) -> None:
        # (a dict or tuple first: the ABC check of Mapping is slow, and this runs ~10^5 times per compile)
        items = terms.items() if type(terms) is dict or (type(terms) is not tuple and isinstance(terms, Mapping)) \
            else terms
        acc: dict[Symbol, Fraction] = {}
        for sym, coeff in items:
            c = _as_fraction(coeff)
            if sym in acc:
                acc[sym] += c
            else:
                acc[sym] = c
        # dicts preserve insertion order: the order of first appearance.
        self._terms: Tuple[tuple[Symbol, Fraction], ...] = tuple(
            (s, c) for s, c in acc.items() if c != 0
        )
        self._const: Fraction = _as_fraction(const)
        self._key: tuple[frozenset, Fraction] | None = None  # made when first compared or hashed
        self._hash: int | None = None

    # -- constructors -------------------------------------------------------
    @classmethod
    def const_(cls, c: Scalar) -> Linear:
        """The constant form ``c``."""
        return cls((), c)

    @classmethod
    def symbol(cls, s: Symbol, coeff: Scalar = 1) -> Linear:
        """The form ``coeff * s``."""
        return cls(((s, coeff),), 0)

    # -- accessors ----------------------------------------------------------
    @property
    def const(self) -> Fraction:
        return self._const

    @property
    def terms(self) -> tuple[tuple[Symbol, Fraction], ...]:
        return self._terms

    def coeff(self, sym: Symbol) -> Fraction:
        for s, c in self._terms:
            if s == sym:
                return c
        return Fraction(0)

    def symbols(self) -> tuple[Symbol, ...]:
        return tuple(s for s, _ in self._terms)

    def is_constant(self) -> bool:
        return not self._terms

    def without_const(self) -> Linear:
        """The symbolic part only (useful for dominance comparisons)."""
        return Linear(self._terms, 0)

    # -- arithmetic ---------------------------------------------------------
    @staticmethod
    def _coerce(other: Any) -> Linear | None:
        if isinstance(other, Linear):
            return other
        if _is_scalar(other):
            return Linear((), other)
        return None

    def __add__(self, other: Any) -> Linear:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return Linear(self._terms + o._terms, self._const + o._const)

    __radd__ = __add__

    def __neg__(self) -> Linear:
        return Linear(tuple((s, -c) for s, c in self._terms), -self._const)

    def __pos__(self) -> Linear:
        return self

    def __sub__(self, other: Any) -> Linear:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other: Any) -> Linear:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return o + (-self)

    def __mul__(self, other: Any) -> Linear:
        if not _is_scalar(other):
            return NotImplemented
        f = _as_fraction(other)
        return Linear(tuple((s, c * f) for s, c in self._terms), self._const * f)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Linear:
        if not _is_scalar(other):
            return NotImplemented
        f = _as_fraction(other)
        if f == 0:
            raise ZeroDivisionError("division of a linear form by zero")
        return self * (1 / f)

    def substitute(self, mapping: Mapping[Symbol, Linear | Scalar]) -> Linear:
        """Replace symbols by forms (or scalars); unmapped symbols stay."""
        result = Linear((), self._const)
        for s, c in self._terms:
            if s in mapping:
                result = result + Linear._coerce(mapping[s]) * c  # type: ignore[operator]
            else:
                result = result + Linear(((s, c),))
        return result

    def evaluate(self, values: Mapping[Symbol, Scalar]) -> Fraction:
        """Exact value for concrete symbol values; a missing symbol is an error
        (KeyError) rather than an implicit zero."""
        total = self._const
        for s, c in self._terms:
            total += c * _as_fraction(values[s])
        return total

    # -- protocol -----------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Linear):
            return self.key() == other.key()
        if _is_scalar(other):
            return not self._terms and self._const == other
        return NotImplemented

    def __reduce__(self) -> tuple:
        # the terms and the constant only: a hash cached here is wrong in a process with another
        # PYTHONHASHSEED (string symbols), and would break set and dict lookups after unpickling there
        return (Linear, (self._terms, self._const))

    def key(self) -> tuple[frozenset, Fraction]:
        """What equality compares: the terms in any order, and the constant (made once, on first use:
        most forms are intermediate results that are never compared)."""
        if self._key is None:
            self._key = (frozenset(self._terms), self._const)
        return self._key

    def __hash__(self) -> int:
        if self._hash is None:
            # constant forms compare equal to plain scalars, so hash like them.
            self._hash = hash(self._const) if not self._terms else hash(self.key())
        return self._hash

    def __repr__(self) -> str:
        return f"Linear({self})"

    def __str__(self) -> str:
        parts: list[str] = []
        for s, c in self._terms:
            mag = abs(c)
            body = str(s) if mag == 1 else f"{mag}*{s}"
            if not parts:
                parts.append(body if c > 0 else f"-{body}")
            else:
                parts.append(("+ " if c > 0 else "- ") + body)
        if self._const != 0 or not parts:
            if not parts:
                parts.append(str(self._const))
            else:
                parts.append(("+ " if self._const > 0 else "- ") + str(abs(self._const)))
        return " ".join(parts)
