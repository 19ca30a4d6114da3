"""A generator of random, valid tcc programs over the whole language, and their input data.

Used by tests/test_fuzz_differential.py (compiled code against the reference
interpreter, derivative programs compiled and interpreted, derivatives against
central finite differences, printed derivatives parsing back, the ``cuda-sim``
target); any other test may import :func:`generate` and the data helpers.

A program is built from one integer seed (:func:`generate`), so a failure is
reproduced by that seed alone: ``TCC_FUZZ_SEED=S TCC_FUZZ_COUNT=1 pytest
tests/test_fuzz_differential.py``.  It covers (docs/language.md):

- inputs with constant and symbolic extents (``x[2*n + 3]``), scalars, ``assume``;
- affine index maps: plain, strided (``x[2*i + k]``), flipped (``x[n - 1 - i]``),
  diagonal (``c[i, i]``), constant and size offsets (``x[i + n]``), shifts
  guarded by index conditions (``where(i >= 1, x[i - 1], 0)``);
- sums with explicit ranges (full, triangular, possibly empty, with
  ``max``/``min`` bounds) and inferred ones, constrained sums, nested sums,
  ``max``/``min`` reductions;
- ``where`` on index conditions (``==``, ``%``, ``and``/``or``/``not``) and on
  value conditions, ``max``/``min`` of values, every one-argument math
  function, powers (constant, scalar-input and tensor exponents), division,
  sizes and indices as values;
- user functions (``def``) with and without custom derivatives, chained;
- chains of definitions (locals), ``output``/``local`` declarations or none;
- ``index`` inputs: gathers (``emb[tok[i], j]``), index conditions on them,
  CSR sums (``sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]])``).

Every program is valid by construction: each read is in bounds for every size
(input extents are derived from the reads), every inferred range and extent
is orderable.  The generator also tracks an interval for every value on the
smooth data (inputs in [0.25, 0.75), tcc.check's and tests/compare.py's), so
that ``log``, ``sqrt``, ``asin``, ``/`` and real powers stay in their domains
and magnitudes stay moderate there: finite differences are meaningful.

Known defects of tcc (being fixed elsewhere) are generated only when their
flag in :class:`Exclusions` is off; :data:`CI_EXCLUSIONS` keeps CI green
meanwhile, and removing a flag from it re-enables the case once fixed.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from typing import Mapping

import numpy as np

from tcc.index_inputs import random_index_inputs, sum_bound_arrays
from tcc.sizes import extents_shape

# ---------------------------------------------------------------------------
# known defects: one flag per kind of program tcc gets wrong today


@dataclass(frozen=True)
class Exclusions:
    """Program features left out of generation because tcc mishandles them today (each flag says how).

    ``True`` leaves the feature out.  Each flag names the defect in words; when
    it is fixed, set the flag to ``False`` in :data:`CI_EXCLUSIONS` and the
    CI mode generates the case again.
    """

    #: ``max``/``min`` with exact ties (a reduction whose body does not depend on its index,
    #: ``max(a, a)``): the interpreter's blocked evaluation counts the tied positions differently
    #: from compiled code, so the derivative program interpreted and compiled disagree (the
    #: adjoint's split share); excluded, every reduction's body depends on its index
    max_min_gradient_ties: bool = False
    #: the derivative of a gather that reads the index array's own argument on another axis
    #: (``emb[tok[i], i]``, that axis wider than ``tok``) guards ``tok[demb_1]`` only by a sibling
    #: conjunct (``where(demb_1 + 1 <= n and tok[demb_1] == demb_0, ...)``): tcc refuses its own
    #: derivative program ("access tok[demb_1] may be out of bounds")
    gather_index_on_another_axis: bool = False
    #: a value comparison whose left side reads as an index expression (``n``, ``i - i``, ``1``) and
    #: whose right side starts like one (``3 / s``, ``1 / 2``, ``3 ** 2``) does not parse
    #: ("expected ',' but found '/'"), and the printer writes it so from ``where(n < (3 / s), ...)``
    value_comparison_after_index_lhs: bool = False
    #: a floor division of an index-array read in a read (``x[2*(tok[i] // 2) + 1]``) differentiated
    #: w.r.t. another read: ``range-bound`` (ir/constrained_sums.py, Fourier-Motzkin) orders the
    #: nested sums of ``sum[z0, z1 | 2*z1 <= tok[z0] <= 2*z1 + 1]`` with ``z0`` innermost, so the
    #: outer ``z1``'s bound ``(tok[z0]) // 2`` reads the inner variable: the derivative holds a free
    #: name (``dx_z0``), which the printed text sums implicitly (another program); not the printer's
    #: (seed 12 of the long mode; ``f[i] = w[i] * max(min[k](w[k] * x[k]), x[2*(tok[i] // 2) + 1])``)
    floor_division_of_index_array: bool = False
    #: floor division and remainder in reads (``x[2*(i // 2) + 1]``, ``y[i % 3]``): the derivative
    #: program is refused by the bounds prover (``c[0, 2*(dt1_0 // 2)]`` "may be out of bounds"), or
    #: at sizes 0 its compiled code has NaN where the interpreter has 0
    floor_division_reads: bool = False

    #: second order only (tests/test_fuzz_differential.py's ``check_second_order``): the bounds prover
    #: refuses the second derivative of a valid program: a read the first derivative guards by an index
    #: condition leaves the guard in the second (``where(dx_0 + 1 <= m, where(x[0] >= 0.5, 0, dt2[dx_0]
    #: * x[0]), 0)`` differentiated w.r.t. ``x`` reads ``dt2[dx2_0]`` over ``0..m``), or a strided or
    #: CSR read loses its range (``dt1[(ddx_t4_0 - 1) // 3]``, ``ptr[ptr_row[k] + 1]``): autodiff's
    #: guards and the bounds prover (CI seed 9; long seeds 1005 1030 1035 1051 1067); on, such a
    #: refusal ends the case's second-order check after its printing is checked
    second_order_bounds_refusal: bool = False
    #: second order only: the second derivative through a ``max``/``min`` reduction of a CSR sum
    #: disagrees with finite differences of the first (``f = sum[k](w[k] / (1 + max[l: 0..n - 1](
    #: sum[p: ptr[k]..ptr[k + 1] - 1](val[p] * x[col[p]] * (0.1 * l)))**2))``: relative error 1.0; CI
    #: seed 27); on, programs with both features skip the second-order finite differences
    second_order_csr_reduction: bool = False

    def names(self) -> list[str]:
        """The flags that are on (features left out)."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


#: nothing excluded: the long mode's default (every finding shows)
NO_EXCLUSIONS = Exclusions()
#: what CI leaves out until the defects are fixed (see each flag's comment)
CI_EXCLUSIONS = Exclusions(gather_index_on_another_axis=True, value_comparison_after_index_lhs=False,
                           max_min_gradient_ties=True, floor_division_of_index_array=True,
                           floor_division_reads=True, second_order_bounds_refusal=True,
                           second_order_csr_reduction=True)

# ---------------------------------------------------------------------------
# affine forms over sizes and index variables

Aff = dict  # name -> coefficient; the key "" holds the constant


def aff(const: int = 0, **terms: int) -> Aff:
    out: Aff = {k: v for k, v in terms.items() if v}
    if const:
        out[""] = const
    return out


def add(a: Aff, b: Aff, k: int = 1) -> Aff:
    out = dict(a)
    for name, c in b.items():
        out[name] = out.get(name, 0) + k * c
        if out[name] == 0:
            del out[name]
    return out


def fmt(a: Aff) -> str:
    """``2*n + i - 1``: terms in insertion order, the constant last."""
    parts: list[str] = []
    for name, c in a.items():
        if name == "" or c == 0:
            continue
        mag = "" if abs(c) == 1 else f"{abs(c)}*"
        if not parts:
            parts.append(("-" if c < 0 else "") + mag + name)
        else:
            parts.append((" - " if c < 0 else " + ") + mag + name)
    const = a.get("", 0)
    if not parts:
        return str(const)
    if const:
        parts.append((" - " if const < 0 else " + ") + str(abs(const)))
    return "".join(parts)


def evaluate(a: Aff, values: Mapping[str, int]) -> int:
    return sum(c * (1 if name == "" else values[name]) for name, c in a.items())


def provably_le(a: Aff, b: Aff) -> bool:
    """``a <= b`` for every size >= 0 (both over sizes only): each coefficient of ``b - a`` is >= 0."""
    return all(c >= 0 for c in add(b, a, -1).values())


def upper(a: Aff, b: Aff) -> Aff:
    """An affine form >= both ``a`` and ``b`` for every size >= 0 (coefficient-wise maximum)."""
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in {**a, **b} if max(a.get(k, 0), b.get(k, 0))}


# ---------------------------------------------------------------------------
# intervals of values on the smooth data


@dataclass(frozen=True)
class Iv:
    """Bounds of a value on the smooth data (inputs in [0.25, 0.75)), at the case's sizes."""

    lo: float
    hi: float

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def __add__(self, o: "Iv") -> "Iv":
        return Iv(self.lo + o.lo, self.hi + o.hi)

    def __sub__(self, o: "Iv") -> "Iv":
        return Iv(self.lo - o.hi, self.hi - o.lo)

    def __mul__(self, o: "Iv") -> "Iv":
        p = [self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi]
        return Iv(min(p), max(p))

    def hull(self, o: "Iv") -> "Iv":
        return Iv(min(self.lo, o.lo), max(self.hi, o.hi))

    def mono(self, fn) -> "Iv":  # noqa: ANN001 - a monotone float function
        a, b = fn(self.lo), fn(self.hi)
        return Iv(min(a, b), max(a, b))


DATA = Iv(0.25, 0.75)
UNIT = Iv(-1.0, 1.0)
#: largest magnitude a value may reach on the smooth data (finite-difference round-off stays small)
MAX_MAG = 6.0


@dataclass
class Var:
    """An index variable in scope: its symbolic upper bound over sizes, and its range at the case's sizes."""

    name: str
    hi: Aff            # an upper bound for every size (over sizes only)
    lo_val: int
    hi_val: int


@dataclass
class Atom:
    """A term of an index expression: a variable or a read of an index array, with bounds."""

    text: str
    hi: Aff            # symbolic upper bound (over sizes); the lower bound is always 0
    hi_val: int
    lo_val: int = 0


# ---------------------------------------------------------------------------
# user functions

@dataclass(frozen=True)
class UserFn:
    name: str
    params: tuple[str, ...]
    line: str
    needs: tuple[str, ...]
    custom: bool


USER_FNS = {
    "sp": UserFn("sp", ("t",), "def sp(t) = log(1 + exp(t)) with d(t) = sigmoid(t)", (), True),
    "th": UserFn("th", ("a", "b"), "def th(a, b) = a * tanh(b) with d(a) = tanh(b), d(b) = a * (1 - tanh(b)**2)", (), True),
    "cube": UserFn("cube", ("t",), "def cube(t) = t * t * t with d(t) = 3 * t**2", (), True),
    "sq2": UserFn("sq2", ("a", "b"), "def sq2(a, b) = a * a + sin(b) * a", (), False),
    "hub": UserFn("hub", ("r",), "def hub(r) = where(abs(r) <= 1, 0.5 * r**2, abs(r) - 0.5)", (), False),
    "sp2": UserFn("sp2", ("u", "v"), "def sp2(u, v) = sp(u) * cos(v) + u", ("sp",), False),
}


def _fn_interval(name: str, args: list[Iv]) -> Iv:
    """Bounds of a user function's value given its arguments' (conservative)."""
    if name == "sp":
        return args[0].mono(lambda t: math.log1p(math.exp(t)))
    if name == "th":
        return args[0] * args[1].mono(math.tanh)
    if name == "cube":
        return args[0].mono(lambda t: t**3)
    if name == "sq2":
        return args[0] * args[0] + args[0] * UNIT
    if name == "hub":
        m = args[0].mag
        return Iv(0.0, 0.5 * m * m + m)
    if name == "sp2":
        return args[0].mono(lambda t: math.log1p(math.exp(t))) * UNIT + args[0]
    raise KeyError(name)


# ---------------------------------------------------------------------------
# one generated program


@dataclass
class Case:
    """A generated program and how to check it."""

    seed: int
    text: str
    of: str                       # the definition to differentiate (the last one)
    wrt: list[str]                # its float inputs
    sizes: dict[str, int]         # the sizes of the smooth check (every size >= 1)
    edge_sizes: list[dict[str, int]]   # sizes 0 and 1 (where the assumptions allow)
    features: set[str] = field(default_factory=set)

    def describe(self) -> str:
        """What a failure prints: how to reproduce it, and the program."""
        return (f"fuzz program of seed {self.seed} (TCC_FUZZ_SEED={self.seed} TCC_FUZZ_COUNT=1), sizes {self.sizes}, "
                f"features {sorted(self.features)}:\n{self.text}")


class Generator:
    """Builds one program from a seeded random stream (see the module docstring)."""

    def __init__(self, seed: int, exclude: Exclusions) -> None:
        self.seed = seed
        self.r = random.Random(seed)
        self.ex = exclude
        r = self.r
        self.sizes: dict[str, int] = {"n": r.randint(1, 5), "m": r.randint(1, 4)}
        self.features: set[str] = set()
        self.need: dict[str, list[Aff]] = {}     # derived input -> per-dimension need (max index + 1)
        self.ranks = {"x": 1, "y": 1, "c": 2}
        self.used_inputs: set[str] = set()
        self.fns: list[str] = []
        self.defs: list[tuple[str, list[Aff], Iv]] = []   # earlier definitions: name, extents, interval
        self.index_decls: dict[str, str] = {}
        self.assume_n1 = r.random() < 0.4
        self.csr = r.random() < 0.3
        self.gather = r.random() < 0.3
        if self.csr:
            self.sizes["nnz"] = r.randint(0, 7)
        self.sum_names = ["k", "l", "p", "q", "r"]
        self.floordiv = False                 # a read of the current definition uses // or %
        self.reserved: set[str] = set()   # sum indices of enclosing CSR sums (not in scope as variables)

    # ---- helpers -----------------------------------------------------------------------

    def pick(self, seq):  # noqa: ANN001, ANN201
        return self.r.choice(list(seq))

    def size_extent(self) -> Aff:
        """The extent of a left-hand index: a size, a size plus one, or a small constant."""
        r = self.r.random()
        if r < 0.45:
            return aff(n=1)
        if r < 0.7:
            return aff(m=1)
        if r < 0.8:
            return aff(1, n=1)
        return aff(self.r.randint(1, 3))

    def var(self, name: str, extent: Aff) -> Var:
        return Var(name, add(extent, aff(-1)), 0, evaluate(extent, self.sizes) - 1)

    def mark_input(self, name: str) -> None:
        self.used_inputs.add(name)

    # ---- index expressions ---------------------------------------------------------------

    def atoms(self, scope: list[Var], gather: bool = True) -> list[Atom]:
        out = [Atom(v.name, v.hi, v.hi_val, v.lo_val) for v in scope]
        if self.gather and gather:
            for v in scope:
                if provably_le(v.hi, aff(-1, n=1)):  # tok[n] < m, declared once read (index_expr)
                    out.append(Atom(f"tok[{v.name}]", aff(-1, m=1), self.sizes["m"] - 1))
                    break
        return out

    def index_expr(self, scope: list[Var], gather: bool = True) -> tuple[str, Aff, int]:
        """An index expression that is >= 0 for every size: text, symbolic max, max at the sizes
        (``gather``: reads of the index array ``tok`` may be terms)."""
        got = self._index_expr(scope, gather)
        if "tok[" in got[0]:
            self.index_decls["tok"] = "tok[n] < m"
            self.features.add("gather")
        return got

    def _index_expr(self, scope: list[Var], gather: bool) -> tuple[str, Aff, int]:
        r = self.r
        atoms = self.atoms(scope, gather)
        kinds = ["plain", "plain", "stride", "combo", "flip", "const", "size_offset"]
        if not self.ex.floor_division_reads:
            kinds.append("floordiv")
        kind = self.pick(kinds) if atoms else "const"
        if kind == "const":
            c = r.randint(0, 2)
            return str(c), aff(c), c
        a = self.pick(atoms)
        if a.text.startswith("tok"):
            self.index_decls["tok"] = "tok[n] < m"
        if kind == "plain":
            if a.text.startswith("tok"):
                self.features.add("gather")
            return a.text, a.hi, a.hi_val
        if kind == "stride":
            s, o = r.choice([2, 3]), r.randint(0, 2)
            self.features.add("stride")
            return fmt({a.text: s, "": o}), add({k: s * v for k, v in a.hi.items()}, aff(o)), s * a.hi_val + o
        if kind == "combo":
            b = self.pick(atoms)
            o = r.randint(0, 1)
            if b.text == a.text:
                return fmt({a.text: 2, "": o}), add({k: 2 * v for k, v in a.hi.items()}, aff(o)), 2 * a.hi_val + o
            self.features.add("combination")
            return fmt({a.text: 1, b.text: 1, "": o}), add(add(a.hi, b.hi), aff(o)), a.hi_val + b.hi_val + o
        if kind == "flip":
            self.features.add("flip")
            return f"{fmt(a.hi)} - {a.text}" if a.hi else f"{fmt(a.hi)} - {a.text}", a.hi, a.hi_val - a.lo_val
        if kind == "floordiv" and self.ex.floor_division_of_index_array and a.text.startswith("tok"):
            kind = "plain"
        if kind == "floordiv":
            # x[2*(i // 2) + 1] or x[i % 3]: at most i + 1 (at most 2)
            self.features.add("floor_division")
            self.floordiv = True
            if r.random() < 0.7:
                o = r.randint(0, 1)
                return fmt({f"({a.text} // 2)": 2, "": o}).replace("2*(", "2*(", 1), add(a.hi, aff(o)), a.hi_val + o
            return f"{a.text} % 3", aff(2), 2
        # size_offset: x[i + n]
        self.features.add("size_offset")
        return f"{a.text} + n", add(a.hi, aff(n=1)), a.hi_val + self.sizes["n"]

    def derived_read(self, scope: list[Var], name: str | None = None) -> tuple[str, Iv]:
        """A read of an input whose extents follow from its reads (x, y: 1-D; c: 2-D; emb: gathers)."""
        r = self.r
        if name is None:
            name = self.pick(["x", "x", "y", "c"])
        rank = self.ranks[name]
        if name == "c" and r.random() < 0.3 and scope:
            # a diagonal: c[i, i]
            text, hi, _ = self.index_expr(scope)
            rows = [(text, hi)] * 2
            self.features.add("diagonal")
        else:
            rows = []
            for _ in range(rank):
                # excluded: an index array's argument on another axis of the same read
                gather = not (self.ex.gather_index_on_another_axis and (rank > 1 or rows))
                rows.append(self.index_expr(scope, gather)[:2])
        need = self.need.setdefault(name, [aff() for _ in range(rank)])
        for d, (_, hi) in enumerate(rows):
            need[d] = upper(need[d], add(hi, aff(1)))
        self.mark_input(name)
        return f"{name}[{', '.join(t for t, _ in rows)}]", DATA

    def gather_read(self, scope: list[Var]) -> tuple[str, Iv] | None:
        """``emb[tok[i], j]``."""
        toks = [v for v in scope if provably_le(v.hi, aff(-1, n=1))]
        if not toks:
            return None
        v = self.pick(toks)
        self.index_decls["tok"] = "tok[n] < m"
        self.features.add("gather")
        others = [u for u in scope if u is not v] if self.ex.gather_index_on_another_axis else scope
        second, hi, _ = self.index_expr(others, gather=not self.ex.gather_index_on_another_axis)
        need = self.need.setdefault("emb", [aff(), aff()])
        need[0] = upper(need[0], aff(m=1))
        need[1] = upper(need[1], add(hi, aff(1)))
        self.mark_input("emb")
        return f"emb[tok[{v.name}], {second}]", DATA

    def anchored_read(self, scope: list[Var], var: Var) -> str | None:
        """A read in which ``var`` appears alone on an axis whose extent is exactly ``var``'s
        (so that inference, which takes the tightest read, finds ``var``'s range)."""
        options: list[str] = []
        if var.hi == aff(-1, n=1):
            options.append(f"w[{var.name}]")
        if var.hi == aff(-1, m=1):
            others = [v for v in scope if v is not var and provably_le(v.hi, aff(-1, n=1))]
            if others:
                options.append(f"A[{self.pick(others).name}, {var.name}]")
        for name, ext, _ in self.defs:
            if len(ext) == 1 and var.hi == add(ext[0], aff(-1)):
                options.append(f"{name}[{var.name}]")
        if not options:
            return None
        text = self.pick(options)
        self.mark_input(text.split("[")[0])
        return text

    def def_read(self, scope: list[Var]) -> tuple[str, Iv] | None:
        """A read of an earlier definition with in-bounds indices (plain or flipped), if any fits."""
        r = self.r
        cands = []
        for name, ext, iv in self.defs:
            rows = []
            for e in ext:
                fit = [v for v in scope if provably_le(v.hi, add(e, aff(-1)))]
                if not fit:
                    break
                v = self.pick(fit)
                if r.random() < 0.2:
                    rows.append(f"{fmt(add(e, aff(-1)))} - {v.name}")
                else:
                    rows.append(v.name)
            else:
                cands.append((f"{name}[{', '.join(rows)}]" if ext else name, iv))
        if not cands:
            return None
        self.features.add("local_read")
        return self.pick(cands)

    def leaf(self, scope: list[Var]) -> tuple[str, Iv]:
        r = self.r
        kind = r.random()
        if kind < 0.25 and self.defs:
            got = self.def_read(scope)
            if got:
                return got
        if 0.25 <= kind < 0.35 and self.gather:
            got = self.gather_read(scope)
            if got:
                return got
        if 0.35 <= kind < 0.47:
            for v in r.sample(scope, len(scope)):
                text = self.anchored_read(scope, v)
                if text:
                    return text, DATA
        if 0.47 <= kind < 0.51:
            self.mark_input("s")
            return "s", DATA
        if 0.51 <= kind < 0.55:
            c = r.choice([0.5, 2, 3, 1e-3, 0.25])
            return str(c), Iv(c, c)
        if 0.55 <= kind < 0.6 and scope:
            # an index or a size as a value
            self.features.add("index_value")
            if r.random() < 0.5:
                v = self.pick(scope)
                return f"0.1 * {v.name}", Iv(0.1 * min(v.lo_val, 0), 0.1 * max(v.hi_val, 0))
            return "n", Iv(self.sizes["n"], self.sizes["n"])
        if 0.6 <= kind < 0.68 and self.assume_n1:
            self.features.add("assume")
            self.mark_input("w")
            return self.pick(["w[0]", "w[n - 1]"]), DATA
        return self.derived_read(scope)

    def chain_read(self, scope: list[Var]) -> tuple[str, Iv] | None:
        """A read of the previous definition (so that a chain of definitions is one computation):
        with the enclosing indices where they fit, else summed over its extents."""
        name, ext, iv = self.defs[-1]
        rows, sums, count = [], [], 1
        names = [k for k in self.sum_names if k not in {v.name for v in scope} | self.reserved]
        for e in ext:
            fit = [v for v in scope if provably_le(v.hi, add(e, aff(-1)))]
            if fit and self.r.random() < 0.8:
                rows.append(self.pick(fit).name)
            elif names:
                k = names.pop(0)
                sums.append(f"{k}: 0..{fmt(add(e, aff(-1)))}")
                rows.append(k)
                count *= max(evaluate(e, self.sizes), 1)
            else:
                return None
        text = f"{name}[{', '.join(rows)}]" if ext else name
        self.features.add("local_read")
        if sums:
            return f"sum[{', '.join(sums)}]({text}) / {count}", Iv(min(iv.lo, 0), max(iv.hi, 0))
        return text, iv

    # ---- conditions ----------------------------------------------------------------------

    def index_cond(self, scope: list[Var]) -> str:
        r = self.r
        a = self.pick(scope)
        kind = r.random()
        if kind < 0.15:
            return f"{a.name} % 2 == 0"
        if kind < 0.25 and self.gather and provably_le(a.hi, aff(-1, n=1)):
            self.index_decls["tok"] = "tok[n] < m"
            return f"tok[{a.name}] == 0"
        b = self.pick(scope)
        op = self.pick(["<=", "<", "==", "!=", ">="])
        rhs = fmt({b.name: 1, "": r.randint(-1, 1)}) if b is not a else str(r.randint(0, 2))
        c = f"{a.name} {op} {rhs}"
        if r.random() < 0.3:
            c = f"{c} {self.pick(['and', 'or'])} {self.pick(scope).name} >= {r.randint(0, 1)}"
        if r.random() < 0.1:
            c = f"not ({c})"
        return c

    # ---- expressions ---------------------------------------------------------------------

    def expr(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        text, iv = self._expr(scope, depth)
        if iv.mag > MAX_MAG:
            return f"tanh({text})", iv.mono(math.tanh)
        return text, iv

    def _expr(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        r = self.r
        if depth <= 0:
            return self.leaf(scope)
        kind = self.pick(["leaf", "unary", "unary", "binary", "binary", "pow", "sum", "sum", "reduce",
                          "where_i", "where_v", "maxmin", "call"] + ["csr"] * (3 if self.csr else 0))
        if not scope and kind in ("leaf", "where_i", "maxmin", "binary"):
            kind = self.pick(["sum", "sum", "reduce"])  # a scalar: reduce over something
        if kind == "leaf":
            return self.leaf(scope)
        if kind == "unary":
            return self.unary(*self.expr(scope, depth - 1))
        if kind == "binary":
            a, ia = self.expr(scope, depth - 1)
            b, ib = self.expr(scope, depth - 1)
            op = self.pick("+-*/")
            if op == "/":
                self.features.add("division")
                if ib.lo > 0.1 or ib.hi < -0.1:
                    return f"{a} / ({b})", ia * Iv(1 / ib.hi, 1 / ib.lo)
                return f"{a} / (1 + ({b})**2)", ia.hull(Iv(0, 0))
            if op == "*":
                return f"{a} * ({b})", ia * ib
            return (f"{a} + ({b})", ia + ib) if op == "+" else (f"{a} - ({b})", ia - ib)
        if kind == "pow":
            return self.power(scope, depth)
        if kind == "sum":
            return self.sum(scope, depth, "sum")
        if kind == "reduce":
            return self.sum(scope, depth, self.pick(["max", "min"]))
        if kind == "where_i" and scope:
            return self.where_index(scope, depth)
        if kind == "where_v":
            return self.where_value(scope, depth)
        if kind == "maxmin":
            args = [self.expr(scope, depth - 1) for _ in range(r.choice([2, 2, 3]))]
            if self.ex.max_min_gradient_ties and len({t for t, _ in args}) < len(args):
                return args[0]  # max(a, a) ties
            fn = self.pick(["max", "min"])
            self.features.add("max_min_values")
            ivs = [iv for _, iv in args]
            lo = (max if fn == "max" else min)(iv.lo for iv in ivs)
            hi = (max if fn == "max" else min)(iv.hi for iv in ivs)
            return f"{fn}({', '.join(t for t, _ in args)})", Iv(lo, hi)
        if kind == "call":
            return self.call(scope, depth)
        if kind == "csr" and self.csr:
            got = self.csr_sum(scope, depth)
            if got:
                return got
        return self.leaf(scope)

    in_sum = False

    def unary(self, e: str, iv: Iv) -> tuple[str, Iv]:
        ok = ["sin", "cos", "tanh", "sigmoid", "atan", "abs", "relu", "sign"]
        if iv.hi < 1.5:
            ok.append("exp")
        if iv.lo > 0.05:
            ok += ["log", "sqrt"]
        if iv.mag < 0.9:
            ok += ["asin", "acos", "tan"]
        if iv.mag < 2.5:
            ok += ["sinh", "cosh"]
        fn = self.pick(ok)
        self.features.add(f"fn_{fn}")
        bounds = {
            "sin": lambda: UNIT, "cos": lambda: UNIT, "tanh": lambda: iv.mono(math.tanh),
            "atan": lambda: iv.mono(math.atan), "sigmoid": lambda: iv.mono(lambda t: 1 / (1 + math.exp(-t))),
            "abs": lambda: Iv(0, iv.mag), "relu": lambda: Iv(max(iv.lo, 0), max(iv.hi, 0)), "sign": lambda: UNIT,
            "exp": lambda: iv.mono(math.exp), "log": lambda: iv.mono(math.log), "sqrt": lambda: iv.mono(math.sqrt),
            "asin": lambda: iv.mono(math.asin), "acos": lambda: iv.mono(math.acos), "tan": lambda: iv.mono(math.tan),
            "sinh": lambda: iv.mono(math.sinh), "cosh": lambda: Iv(1, math.cosh(iv.mag)),
        }
        return f"{fn}({e})", bounds[fn]()

    def power(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        e, iv = self.expr(scope, depth - 1)
        self.features.add("power")
        if iv.lo > 0.1 and iv.hi < 3:
            k = self.r.random()
            if k < 0.3:
                self.mark_input("s")
                return f"({e})**s", Iv(min(iv.lo**0.25, iv.lo**0.75), max(iv.hi**0.25, iv.hi**0.75))
            if k < 0.5:
                b, ib = self.leaf(scope)
                if ib.lo >= 0 and ib.hi <= 1:
                    corners = [x**y for x in (iv.lo, iv.hi) for y in (ib.lo, ib.hi)]
                    return f"({e})**{b}" if b.replace("_", "").isalnum() else f"({e})**({b})", Iv(min(corners), max(corners))
            p = self.r.choice([0.5, -1, 1.5, -0.5])
            return f"({e})**{p}", iv.mono(lambda t: t**p)
        p = self.r.choice([2, 3])
        return f"({e})**{p}", (iv * iv) if p == 2 else iv.mono(lambda t: t**3)

    def call(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        name = self.pick(sorted(USER_FNS))
        fn = USER_FNS[name]
        args = [self.expr(scope, depth - 1) for _ in fn.params]
        if name in ("sp", "sp2") and args[0][1].hi > 20:
            return args[0]
        for need in fn.needs + (name,):
            if need not in self.fns:
                self.fns.append(need)
        self.features.add("def_custom" if fn.custom else "def_plain")
        return f"{name}({', '.join(t for t, _ in args)})", _fn_interval(name, [iv for _, iv in args])

    def where_index(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        r = self.r
        self.features.add("where_index")
        a, ia = self.expr(scope, depth - 1)
        if r.random() < 0.35:
            # a shifted read guarded by the condition: where(v >= 1, x[v - 1], ...)
            v = self.pick(scope)
            name = self.pick(["x", "y"])
            need = self.need.setdefault(name, [aff()])
            need[0] = upper(need[0], v.hi)
            self.mark_input(name)
            self.features.add("guarded_shift")
            b, ib = self.expr(scope, depth - 1)
            return f"where({v.name} >= 1, {name}[{v.name} - 1] * ({a}), {b})", (ia * DATA).hull(ib)
        b, ib = self.expr(scope, depth - 1) if r.random() < 0.6 else ("0", Iv(0, 0))
        return f"where({self.index_cond(scope)}, {a}, {b})", ia.hull(ib)

    def where_value(self, scope: list[Var], depth: int) -> tuple[str, Iv]:
        r = self.r
        self.features.add("where_value")
        l, _ = self.expr(scope, depth - 1)
        if self.ex.value_comparison_after_index_lhs:
            l = f"1.0 * ({l})"  # a value on the left whatever it is
        rhs = self.expr(scope, depth - 1)[0] if r.random() < 0.5 else str(r.choice([0.5, 0, 0.3]))
        cond = f"{l} {self.pick(['<', '<=', '>', '>=', '!='])} {rhs}"
        if scope and r.random() < 0.3:
            cond = f"{cond} {self.pick(['and', 'or'])} {self.index_cond(scope)}"
        if r.random() < 0.1:
            cond = f"not ({cond})"
        a, ia = self.expr(scope, depth - 1)
        b, ib = self.expr(scope, depth - 1)
        return f"where({cond}, {a}, {b})", ia.hull(ib)

    def sum(self, scope: list[Var], depth: int, op: str) -> tuple[str, Iv]:
        """``sum``/``max``/``min`` over a new index: explicit, triangular, empty-able, max/min bounds,
        inferred or constrained ranges."""
        r = self.r
        free = [k for k in self.sum_names if k not in {v.name for v in scope} | self.reserved]
        if not free:
            return self.leaf(scope)
        k = free[0]
        reduce = op != "sum"
        if reduce:
            self.features.add("max_min_reduction")
        kinds = ["full", "full", "tri", "inferred", "inferred"]
        if not reduce:
            kinds += ["upper", "clamped", "constrained"]  # ranges that may be empty (a reduction's -inf)
        kind = self.pick(kinds) if scope else self.pick(["full", "inferred"])
        anchor = None
        if kind == "full":
            ext = aff(self.pick(["n", "m"])) if False else self.pick([aff(n=1), aff(m=1), aff(r.randint(1, 3))])
            var = self.var(k, ext)
            head = f"{k}: 0..{fmt(var.hi)}"
        elif kind == "tri":
            v = self.pick(scope)
            var = Var(k, v.hi, 0, max(v.hi_val, 0))
            head = f"{k}: 0..{v.name}"
            self.features.add("triangular_sum")
        elif kind == "upper":
            v = self.pick([v for v in scope if provably_le(v.hi, aff(-1, n=1))] or [None])
            if v is None:
                return self.leaf(scope)
            var = Var(k, aff(-1, n=1), 0, self.sizes["n"] - 1)
            head = f"{k}: {v.name} + 1..n - 1"
            self.features.add("possibly_empty_sum")
        elif kind == "clamped":
            v = self.pick([v for v in scope if provably_le(v.hi, aff(-1, n=1))] or [None])
            if v is None:
                return self.leaf(scope)
            var = Var(k, aff(-1, n=1), 0, self.sizes["n"] - 1)
            head = f"{k}: max({v.name} - 1, 0)..min({v.name} + 1, n - 1)"
            self.features.add("clamped_bounds")
        elif kind == "constrained":
            ext = self.pick([aff(n=1), aff(m=1)])
            var = self.var(k, ext)
            anchor = self.anchored_read(scope + [var], var)
            if anchor is None:
                return self.leaf(scope)
            v = self.pick(scope)
            head = f"{k} | {k} <= {v.name}" if r.random() < 0.5 else f"{k} | {k} != {v.name}"
            self.features.add("constrained_sum")
        else:  # inferred: an anchored read fixes the range
            ext = self.pick([aff(n=1), aff(m=1)] + [e[0] for _, e, _ in self.defs if len(e) == 1])
            var = self.var(k, ext)
            anchor = self.anchored_read(scope + [var], var)
            if anchor is None:
                return self.leaf(scope)
            head = k
            self.features.add("inferred_range")
        saved, self.in_sum = self.in_sum, True
        body, ib = self.expr(scope + [var], depth - 1)
        self.in_sum = saved
        if anchor is not None:
            body, ib = f"{anchor} * ({body})", DATA * ib
        if reduce and self.ex.max_min_gradient_ties and not _mentions(body, k):
            # a body constant along k ties at every position: make it depend on k (x[k] is in [0.25, 0.75))
            read = self.derived_read(scope + [var], "x")[0]
            while not _mentions(read, k):
                read = self.derived_read(scope + [var], "x")[0]
            body, ib = f"{read} * ({body})", DATA * ib
        count = max(var.hi_val - var.lo_val + 1, 0)
        if reduce:
            self.features.add(f"{op}_reduction")
            return f"{op}[{head}]({body})", ib
        if k in body or r.random() < 0.3:
            self.features.add("nested_sum" if self.in_sum else "sum")
        total = Iv(min(0, ib.lo * count), max(0, ib.hi * count))
        if total.mag > MAX_MAG:
            return f"sum[{head}]({body}) / {max(count, 1)}", Iv(total.lo / max(count, 1), total.hi / max(count, 1))
        return f"sum[{head}]({body})", total

    def csr_sum(self, scope: list[Var], depth: int) -> tuple[str, Iv] | None:
        """``sum[k: ptr[i]..ptr[i + 1] - 1](val[k] * x[col[k]] ...)`` over a row index of extent n."""
        rows = [v for v in scope if provably_le(v.hi, aff(-1, n=1))]
        free = [k for k in self.sum_names if k not in {v.name for v in scope} | self.reserved]
        if not rows or not free:
            return None
        v, k = self.pick(rows), free[0]
        self.index_decls["ptr"] = "ptr[n + 1] <= nnz"
        self.index_decls["col"] = "col[nnz] < n"
        self.features.add("csr")
        self.mark_input("val")
        kv = Var(k, aff(-1, nnz=1), 0, self.sizes["nnz"] - 1)
        need = self.need.setdefault("x", [aff()])
        need[0] = upper(need[0], aff(n=1))
        self.mark_input("x")
        saved, self.in_sum = self.in_sum, True
        self.reserved.add(k)
        extra, ie = self.expr(scope, depth - 1) if self.r.random() < 0.5 else ("1", Iv(1, 1))
        self.reserved.discard(k)
        self.in_sum = saved
        body = f"val[{k}] * x[col[{k}]] * ({extra})"
        count = self.sizes["nnz"]
        total = DATA * DATA * ie
        total = Iv(min(0, total.lo * count), max(0, total.hi * count))
        del kv
        if total.mag > MAX_MAG:
            return f"sum[{k}: ptr[{v.name}]..ptr[{v.name} + 1] - 1]({body}) / {max(count, 1)}", Iv(total.lo / max(count, 1), total.hi / max(count, 1))
        return f"sum[{k}: ptr[{v.name}]..ptr[{v.name} + 1] - 1]({body})", total

    # ---- the whole program ---------------------------------------------------------------

    def program(self) -> Case:
        r = self.r
        n_defs = r.choice([1, 2, 2, 3])
        lines: list[str] = []
        decls: list[tuple[str, str]] = []   # (output|local, declaration)
        outputs_all = r.random() < 0.3
        for d in range(n_defs):
            last = d == n_defs - 1
            name = "f" if last else f"t{d + 1}"
            rank = r.choice([0, 1, 1, 2]) if not last else r.choice([0, 0, 1, 1, 2])
            exts = [self.size_extent() for _ in range(rank)]
            scope = [self.var(v, e) for v, e in zip(["i", "j"], exts)]
            self.floordiv = False
            body, iv = self.expr(scope, r.choice([2, 3, 3, 4]))
            if self.defs and r.random() < 0.85:
                got = self.chain_read(scope)
                if got:
                    op = self.pick(["+", "*"])
                    body, iv = f"{got[0]} {op} ({body})", (got[1] + iv) if op == "+" else (got[1] * iv)
            infer = False
            if rank and r.random() < 0.5:
                # a read that bounds every left-hand index by a fixed extent: inference can find them
                anchors = [self.anchored_read(scope, v) for v in scope]
                if all(anchors):
                    body, iv = f"{' * '.join(a for a in anchors if a)} * ({body})", DATA * iv
                    infer = r.random() < 0.4 and not self.floordiv  # inference does not look through //
            if iv.mag > MAX_MAG:
                body, iv = f"tanh({body})", iv.mono(math.tanh)
            lhs = f"{name}[{', '.join(v.name for v in scope)}]" if rank else name
            lines.append(f"{lhs} = {body}")
            decl = f"{name}[{', '.join(fmt(e) for e in exts)}]" if rank else name
            if infer:
                self.features.add("inferred_extent")  # no declaration: inferred from the anchors
            else:
                decls.append(("output" if last or outputs_all else "local", decl))
            self.defs.append((name, exts, iv))
        return self.assemble(lines, decls)

    def assemble(self, lines: list[str], decls: list[tuple[str, str]]) -> Case:
        r = self.r
        head: list[str] = [USER_FNS[f].line for f in self.fns]
        if self.index_decls:
            head.append("index " + ", ".join(self.index_decls[k] for k in ("ptr", "col", "tok") if k in self.index_decls))
        inputs: list[str] = []
        for name in ("x", "y", "c", "emb"):
            if name in self.need:
                exts = [upper(e, aff()) for e in self.need[name]]
                exts = [add(e, aff(r.randint(0, 1))) for e in exts]
                inputs.append(f"{name}[{', '.join(fmt(e) or '0' for e in exts)}]")
        fixed = {"w": "w[n]", "A": "A[n, m]", "val": "val[nnz]", "s": "s"}
        for name, decl in fixed.items():
            if name in self.used_inputs:
                inputs.append(decl)
        if not inputs:
            inputs.append("s")
        text_so_far = "\n".join(head + inputs + lines)
        sizes_used = [s for s in ("n", "m", "nnz") if _mentions(text_so_far, s) or any(_mentions(d, s) for _, d in decls)]
        # every size must be the whole extent of some input axis to be bound at a call
        for s in sizes_used:
            if not any(f"[{s}]" in i or f"[{s}," in i or f", {s}]" in i or f", {s}," in i for i in inputs):
                inputs.append({"n": "w[n]", "m": "u[m]", "nnz": "val[nnz]"}[s])
        head.append("input " + ", ".join(dict.fromkeys(inputs)))
        if self.assume_n1 and "assume" in self.features:
            head.append("assume n >= 1")
        outs = [d for kind, d in decls if kind == "output"]
        locs = [d for kind, d in decls if kind == "local"]
        if outs:
            head.append("output " + ", ".join(outs))
        if locs:
            head.append("local " + ", ".join(locs))
        text = "\n".join(head + lines) + "\n"
        sizes = {s: v for s, v in self.sizes.items() if s in sizes_used}
        sizes = {s: max(v, 1) if s != "nnz" else v for s, v in sizes.items()}
        edge: list[dict[str, int]] = []
        for small in (0, 1):
            e = {s: small for s in sizes}
            if "assume" in self.features and "n" in e:
                e["n"] = max(e["n"], 1)
            edge.append(e)
        if sizes:
            mixed = dict(sizes)
            mixed[self.pick(sorted(sizes))] = 0 if not ("assume" in self.features) else 1
            edge.append(mixed)
        wrt = [d.split("[")[0] for d in dict.fromkeys(inputs)]
        return Case(self.seed, text, "f", wrt, sizes, edge, self.features)


def _mentions(text: str, name: str) -> bool:
    import re
    return re.search(rf"(?<!\w){name}(?!\w)", text) is not None


def generate(seed: int, exclude: Exclusions = CI_EXCLUSIONS) -> Case:
    """The program of ``seed`` (deterministic), without the features ``exclude`` turns off."""
    return Generator(seed, exclude).program()


# ---------------------------------------------------------------------------
# input data


def smooth_inputs(program, sizes: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Float inputs in [0.25, 0.75) (the generator's intervals hold there), valid index inputs."""
    from compare import random_inputs

    return random_inputs(program, sizes, seed)


#: special values mixed into the edge data
SPECIALS = (0.0, -0.0, np.inf, -np.inf, np.nan)


def edge_inputs(program, sizes: Mapping[str, int], seed: int, special: float = 0.2) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Inputs with negatives, zeros of both signs, infinities and NaN, and index inputs at their edges:
    row pointers starting above 0, empty rows (repeated entries), all rows empty, indices at both
    ends of their range."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for d in program.caller_inputs():
        if d.is_index:
            continue
        shape = extents_shape(d.extents, sizes)
        values = rng.uniform(-2.0, 2.0, shape)
        picks = rng.integers(0, len(SPECIALS), shape)
        out[d.name] = np.where(rng.random(shape) < special, np.asarray(SPECIALS)[picks], values)
    monotone = sum_bound_arrays(program)
    for d in program.index_inputs():
        shape = tuple(int(e.evaluate(sizes)) for e in d.extents)
        hi = int(d.index_hi.evaluate(sizes))
        if hi < 0 and int(np.prod(shape)):
            raise ValueError(f"no valid entries for index input '{d.name}' at sizes {dict(sizes)}")
        mode = rng.integers(0, 3)
        if mode == 0:
            arr = rng.integers(0, max(hi, 0) + 1, size=shape)        # uniform
        elif mode == 1:
            arr = np.full(shape, rng.integers(0, max(hi, 0) + 1))    # one value: all rows empty
        else:
            arr = rng.choice([0, max(hi, 0)], size=shape)            # both ends
        arr = arr.astype(np.int64)
        out[d.name] = np.sort(arr, axis=None).reshape(shape) if monotone.get(d.name) else arr
    return out


__all__ = ["CI_EXCLUSIONS", "Case", "Exclusions", "NO_EXCLUSIONS", "SPECIALS", "edge_inputs", "generate",
           "random_index_inputs", "smooth_inputs"]
