"""``tcc.dask.compile``: a tcc program on Dask arrays, block by block.

    f = tcc.dask.compile(open("examples/correlation.tcc").read())
    out = f(x=dask_x, w=w)           # dask (or NumPy: one chunk) arrays in, {"y": lazy dask array} out
    out["y"].compute()               # any Dask scheduler; equals tcc.compile's result

How it works (docs/dask.md has the picture):

* **One Dask array per definition, one task per block.**  Definitions are
  handled in program order; each becomes a Dask array whose blocks are tasks
  reading the arrays (inputs or earlier definitions) it needs.  So
  definitions feeding definitions are a graph of blocks, never a whole
  intermediate on one worker.
* **Chunks follow the inputs.**  An output axis ``i`` is chunked where some
  read ``T[.., s*i + rest, ..]`` (``s > 0``, no other output index) hits an
  axis of ``T`` that has several chunks: ``T``'s chunk boundaries ``b`` become
  output boundaries ``ceil((b - c) / s)`` (``c`` the constant of the index).
  Other axes are one chunk.
* **Exact halos.**  The box of every tensor one block reads is
  :func:`tcc.ir.footprint.footprint` (Fourier-Motzkin over the index maps,
  the bounds machinery of ``infer-ranges``).  The block's task gets exactly
  those slices; slices that cross chunk boundaries (a halo wider than the
  neighbouring chunk, too) are assembled by Dask's own slicing, so no
  chunking is refused for being too fine.
* **One compiled kernel per definition, cached per worker process.**  The
  block program is the definition rewritten with its offsets as *sizes*:
  output index ``i`` becomes ``i + o_i``, a sliced read ``T[e]`` becomes
  ``T[e - f]`` under a guard ``0 <= e - f < L`` (always true by the
  footprint; the guard is what lets ``infer-ranges`` prove it in bounds),
  and each size is bound from a zero-element array of shape ``(0, s)``.  Its
  text is the same for every block, so each worker compiles it once
  (``_kernel``'s cache).
* **Sums over a chunked axis** (a sum on the body's linear path whose
  variable indexes a chunked axis, as in a correlation's ``dw`` or a loss
  ``sum[i](..) / m``) are split into partial sums per chunk (the range is
  clipped to ``max(lo, K0)..min(hi, K1 - 1)``) and added by Dask's tree
  reduction (``sum`` of a stack).  Sums elsewhere (under ``exp``, beside a
  ``+``) are first outlined as definitions of their own
  (:func:`_outline_sums`), where they are on the linear path.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from tcc.integrations.common import FrameworkFunction, framework, program_source
from tcc.ir.diagnostics import TccError
from tcc.ir.bounds import uses
from tcc.ir.expr import RANGED, ZERO, Access, Binary, Reduce, Sum, Unary, Where, free_names, postorder, transform
from tcc.ir.footprint import clip, footprint
from tcc.ir.index import Affine, Compare, lookups, make_and
from tcc.ir.printer import format_program
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.sizes import bind_sizes, extents_shape

__all__ = ["compile", "DaskFunction"]


def _dask() -> Any:
    """``dask.array``."""
    return framework("dask.array", "tcc.dask needs Dask: pip install 'tcc[dask]'")


# ---------------------------------------------------------------------------
# the worker side: compiled block kernels, one per (text, dtype, passes) and process
# ---------------------------------------------------------------------------
_KERNELS: dict[tuple[str, str, Any], Any] = {}
_KERNELS_LOCK = threading.Lock()


def _kernel(text: str, dtype: str, passes: Any) -> Any:
    """The compiled block program, compiled on first use in this process (workers keep it)."""
    import tcc

    key = (text, dtype, passes)
    with _KERNELS_LOCK:
        if key not in _KERNELS:
            _KERNELS[key] = tcc.compile(text, dtype=dtype, passes=passes, threads=1)
        return _KERNELS[key]


def _run_block(text: str, dtype: str, passes: Any, result: str, size_values: tuple[int, ...],
               names: tuple[str, ...], *arrays: Any) -> np.ndarray:
    """One block: the definition's kernel on the slices it reads (a Dask task)."""
    kernel = _kernel(text, dtype, passes)
    inputs = {n: np.asarray(a, order="C") for n, a in zip(names, arrays)}  # keeps 0-d arrays 0-d
    for k, v in enumerate(size_values):  # zero elements each: (0, v) binds a size and holds nothing
        inputs[f"{_SIZES}{k}"] = np.empty((0, v), dtype=dtype)
    return kernel(**inputs)[result]


_SIZES = "tcc_block_sizes"


# ---------------------------------------------------------------------------
# the plan of one definition: which axes are chunked, which sum is split, the block program
# ---------------------------------------------------------------------------
class _Plan:
    """How one definition is cut into blocks, and its block program (text with offsets as sizes)."""

    def __init__(self, program: Program, d: Definition, chunked: dict[str, tuple[int, ...]],
                 split: tuple[str, tuple[int, ...]] | None) -> None:
        self.program, self.d = program, d
        self.chunked = chunked  # output index -> interior boundaries
        self.split = split  # (sum variable, interior boundaries) or None
        vars_ = set(chunked) | ({split[0]} if split else set())
        self.sliced: dict[str, tuple[bool, ...]] = {}
        for use in uses(d.body):
            if use.lookup is not None or program.extents_of(use.access.tensor) is None:
                continue  # a size read as a value (``/ m``) is bound from the size array
            moving = set(vars_)  # chunked indices, and sum variables whose ranges move with them
            for scope in use.scopes:
                if isinstance(scope, RANGED) and {n for a in scope.lo + scope.hi for n in a.names()} & moving:
                    moving.add(scope.var)
            axes = tuple(bool(set(ix.names()) & moving) for ix in use.access.indices)
            old = self.sliced.get(use.access.tensor, (False,) * len(axes))
            self.sliced[use.access.tensor] = tuple(a or b for a, b in zip(old, axes))
        taken = program.names_in_use()  # (the size arrays are named tcc_block_sizesK: no user name clashes in practice)
        self.names: dict[tuple, str] = {}
        for key in [("o", i) for i in chunked] + [("B", i) for i in chunked] + [("K", 0), ("K", 1)] + [
                (k, t, a) for t, ax in self.sliced.items() for a, s in enumerate(ax) if s for k in ("f", "L")]:
            base = "_".join(["tb", *map(str, key)])
            name, n = base, 0
            while name in taken:
                n += 1
                name = f"{base}{n}"
            taken.add(name)
            self.names[key] = name
        self.kbase = 0
        self.text = ""

    def size_order(self) -> tuple[str, ...]:
        """The sizes bound from the zero-element ``(0, s)`` arrays ``tcc_block_sizesK``, in K order."""
        own = [v for k, v in self.names.items() if k[0] in "oBK" and (k[0] != "K" or self.split)]
        own += [v for k, v in self.names.items() if k[0] == "f"]
        return tuple(self.program.sizes()) + tuple(own)

    def build_text(self, kbase: int) -> str:
        """The block program's text (``kbase``: added to the split sum's clip sizes, which are >= 0)."""
        self.kbase = kbase
        p, d, nm = self.program, self.d, self.names
        mapping = {i: Affine.var(i) + Affine.var(nm[("o", i)]) for i in self.chunked}
        body = _substitute(d.body, mapping)
        body = transform(body, lambda e: self._guard(e) if isinstance(e, Access) else e)
        if self.split is not None:
            body = _clip_sum(body, self.split[0], Affine.var(nm[("K", 0)]) - kbase,
                             Affine.var(nm[("K", 1)]) - kbase - 1)
        assert d.extents is not None
        extents = tuple(Affine.var(nm[("B", i)]) if i in self.chunked else e for i, e in zip(d.indices, d.extents))
        inputs = [self._decl(t) for t in self.sliced]
        # one (0, s) input per size: a single (0, n, m, ...) array would hold no elements either,
        # but NumPy refuses shapes whose nonzero extents multiply past the address space
        inputs += [TensorDecl(f"{_SIZES}{k}", (Affine.constant(0), Affine.var(s)))
                   for k, s in enumerate(self.size_order())]
        block = Program(tuple(inputs), (Definition(d.name, d.indices, body, extents),), (d.name,),
                        assumptions=p.assumptions)
        self.text = format_program(block)
        return self.text

    def _decl(self, t: str) -> TensorDecl:
        ext = self.program.extents_of(t)
        assert ext is not None
        sl = self.sliced[t]
        return TensorDecl(t, tuple(Affine.var(self.names[("L", t, a)]) if sl[a] else e for a, e in enumerate(ext)))

    def _guard(self, e: Access) -> Any:
        sl = self.sliced.get(e.tensor)
        if sl is None or not any(sl):
            return e
        idx, conds = [], []
        for a, ix in enumerate(e.indices):
            if not sl[a]:
                idx.append(ix)
                continue
            shifted = ix - Affine.var(self.names[("f", e.tensor, a)])
            idx.append(shifted)
            conds += [Compare(">=", shifted, Affine.constant(0)),
                      Compare("<=", shifted, Affine.var(self.names[("L", e.tensor, a)]) - 1)]
        return Where(make_and(conds), Access(e.tensor, tuple(idx)), ZERO)


def _linear_step(e: Any) -> tuple[Any, Any] | None:
    """The child through which ``e`` is linear, and how to rebuild ``e`` around a new child, or None.

    A sum is linear in its body; ``-a``, ``a * c``, ``c * a`` and ``a / c`` in
    ``a`` (``c`` is outside any sum below, so a constant for it).  Along such a
    path a sum may be split into partial sums: the partial results add up.
    """
    if isinstance(e, Sum) and e.has_range:
        return e.body, lambda b: Sum(e.var, e.lo, e.hi, b)
    if isinstance(e, Unary) and e.op == "neg":
        return e.operand, lambda b: Unary("neg", b)
    if isinstance(e, Binary) and e.op == "/":
        return e.lhs, lambda b: Binary("/", b, e.rhs)
    if isinstance(e, Binary) and e.op == "*":
        if isinstance(e.rhs, Sum) and not isinstance(e.lhs, Sum):
            return e.rhs, lambda b: Binary("*", e.lhs, b)
        return e.lhs, lambda b: Binary("*", b, e.rhs)
    return None


def _clip_sum(body: Any, var: str, lo: Affine, hi: Affine) -> Any:
    """``body`` with the sum over ``var`` on its linear path clipped to ``max(.., lo)..min(.., hi)``."""
    if isinstance(body, Sum) and body.var == var:
        return Sum(body.var, body.lo + (lo,), body.hi + (hi,), body.body)
    if isinstance(body, Reduce) and body.var == var:  # a max/min at the root (:func:`_sum_chain`)
        return Reduce(body.op, body.var, body.lo + (lo,), body.hi + (hi,), body.body)
    step = _linear_step(body)
    assert step is not None, "the split sum lies on the body's linear path"
    child, rebuild = step
    return rebuild(_clip_sum(child, var, lo, hi))


def _substitute(body: Any, mapping: Mapping[str, Affine]) -> Any:
    from tcc.ir.substitution import substitute

    return substitute(body, mapping)


# ---------------------------------------------------------------------------
# choosing the blocks
# ---------------------------------------------------------------------------
#: a split sum: its variable and the interior boundaries of its pieces, or None
_Split = "tuple[str, tuple[int, ...]] | None"


def _cuts(chunks: Sequence[int], s: int, c: int, lo: int, hi: int) -> tuple[int, ...]:
    """Boundaries ``b`` of a tensor axis's chunks mapped to an index ``v`` read as ``s*v + c``, inside (lo, hi)."""
    out: set[int] = set()
    b = 0
    for n in chunks[:-1]:
        b += n
        v = -((c - b) // s)  # ceil((b - c) / s)
        if lo < v < hi:
            out.add(v)
    return tuple(sorted(out))


def _choose(program: Program, d: Definition, arrays: Mapping[str, Any], shape: tuple[int, ...],
            kranges: Mapping[str, tuple[int, int]]) -> tuple[dict[str, tuple[int, ...]], _Split]:
    """The chunked output axes (index -> boundaries) and the split sum (variable, boundaries), if any.

    An output axis follows the first read ``T[.., s*i + rest, ..]`` (``s > 0``,
    no other output index) of a chunked axis of ``T``; the variable ``k`` of a
    sum on the body's linear path (:func:`_linear_step`) likewise, from a
    chunked axis no output axis follows.
    """
    chunked: dict[str, tuple[int, ...]] = {}
    split: _Split = None
    used: set[tuple[str, int]] = set()
    later: list[tuple[str, int, Affine, str]] = []
    for use in uses(d.body):
        arr = arrays.get(use.access.tensor)
        if use.lookup is not None or arr is None:
            continue
        for t, ix in enumerate(use.access.indices):
            if len(arr.chunks[t]) < 2 or lookups(ix):
                continue
            outs = [i for i in d.indices if ix.coeff(i) != 0]
            if len(outs) == 1 and ix.coeff(outs[0]) > 0 and outs[0] not in chunked:
                a = d.indices.index(outs[0])
                cuts = _cuts(arr.chunks[t], ix.coeff(outs[0]), ix.const, 0, shape[a])
                if cuts:
                    chunked[outs[0]] = cuts
                    used.add((use.access.tensor, t))
            elif not outs:
                later += [(use.access.tensor, t, ix, k) for k in kranges if ix.coeff(k) > 0]
    for tensor, t, ix, k in later:
        if split is None and (tensor, t) not in used:
            cuts = _cuts(arrays[tensor].chunks[t], ix.coeff(k), ix.const, *kranges[k])
            if cuts:
                split = (k, cuts)
    return chunked, split


def _sum_chain(body: Any) -> list[Sum]:
    """The sums on the body's linear path (``sum[a](c * sum[b](...)) / m``): the ones that may be split.

    A ``max``/``min`` reduction at the root may be split too: its partial
    results combine by ``max``/``min`` (:func:`_combine`), not by adding, so
    only the root qualifies (``-max(..)`` of partials would not combine).
    """
    if isinstance(body, Reduce) and body.has_range:
        return [body]
    chain = []
    step = _linear_step(body)
    while step is not None:
        if isinstance(body, Sum):
            chain.append(body)
        body = step[0]
        step = _linear_step(body)
    return chain


def _linear_path(body: Any) -> set[Any]:
    """Every node on the body's linear path, the root included (the nodes :func:`_sum_chain` walks)."""
    path = {body}
    step = _linear_step(body)
    while step is not None:
        body = step[0]
        path.add(body)
        step = _linear_step(body)
    return path


def _outline_sums(program: Program) -> Program:
    """Each sum off a body's linear path (under ``exp``, beside a ``+``, a divisor) as a definition of its own.

    Only sums on the linear path can be split into partial sums over chunks
    (:func:`_linear_step`); a sum elsewhere, such as the ``sum[k](dp[i, k] *
    p[i, k])`` of a softmax gradient, would make every block of its
    definition read the whole summed axis.  Outlined as ``t[i] = sum[k](..)``
    (indexed by the definition's indices it uses, with their extents), the
    sum is the root of its own definition's linear path, so it is split like
    any other, and the definition reads ``t[i]``.  ``max``/``min`` reductions
    off the root are outlined the same way (at the root they are split and
    combined by max/min, :func:`_sum_chain`).  Sums that use an enclosing
    sum's variable stay (their definition would need that variable as an
    index with a range of its own), and so does any outlining the verifier
    refuses (a sum whose reads are in bounds only under an enclosing
    ``where``).  The program's results are unchanged: the new definitions are
    locals.
    """
    import tcc

    results = program.results()
    taken = set(program.names_in_use())
    out: list[Definition] = []
    work = list(program.definitions)
    while work:
        d = work.pop(0)
        path, indices = _linear_path(d.body), set(d.indices)
        found = [n for n in postorder(d.body) if isinstance(n, RANGED) and n.has_range and n not in path
                 and {v for v in free_names(n) if v not in program.sizes()} <= indices]
        if not found:
            out.append(d)
            continue
        cand = found[-1]  # the last in postorder: no other candidate encloses it
        used = set(free_names(cand))
        idx = tuple(i for i in d.indices if i in used)
        ext = tuple(e for i, e in zip(d.indices, d.extents or ()) if i in used)
        name = next(f"{d.name}_s{k}" for k in range(len(taken) + 1) if f"{d.name}_s{k}" not in taken)
        taken.add(name)
        ref = Access(name, tuple(Affine.var(i) for i in idx))
        trial = Definition(name, idx, cand, ext if d.extents is not None else None)
        work[:0] = [trial, d.with_body(transform(d.body, lambda n: ref if n is cand else n))]
    outlined = replace(program, definitions=tuple(out), outputs=results)
    try:
        return tcc.transform(outlined)
    except TccError:  # an outlined sum out of bounds without its guard: keep the program as written
        return program


def _sum_ranges(program: Program, d: Definition, sizes: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """The values each sum variable on the linear path takes over the whole definition (hi exclusive), where bounded."""
    from tcc.ir.footprint import block_facts, index_range

    facts = block_facts(program, d, sizes, {})
    out = {}
    for s in _sum_chain(d.body):
        facts = facts.with_range(s.var, s.lo, s.hi)
        r = index_range(facts, Affine.var(s.var), sizes)
        if r is not None and r[0] < r[1]:
            out[s.var] = r
    return out


def _ranges(cuts: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
    edges = [lo, *cuts, hi]
    return list(zip(edges[:-1], edges[1:]))


# ---------------------------------------------------------------------------
# the graph of one definition
# ---------------------------------------------------------------------------
def _definition_array(fn: "DaskFunction", d: Definition, arrays: Mapping[str, Any],
                      sizes: Mapping[str, int], dtype: str) -> Any:
    """Definition ``d`` as a Dask array of blocks, each a task on the slices of ``arrays`` it reads."""
    import itertools

    da = _dask()
    assert d.extents is not None
    shape = extents_shape(d.extents, sizes)
    kranges = _sum_ranges(fn.program, d, sizes)
    chunked, split = _choose(fn.program, d, arrays, shape, kranges)
    plan = _Plan(fn.program, d, chunked, split)
    krange = kranges[split[0]] if split is not None else None
    kbase = max(0, -krange[0]) if krange is not None else 0
    text = plan.build_text(kbase)
    axes = [_ranges(chunked.get(i, ()), 0, n) for i, n in zip(d.indices, shape)]
    pieces = _ranges(split[1], *krange) if split is not None and krange is not None else [None]
    blocks = {}
    for box in itertools.product(*axes):
        parts = [_block(fn, plan, text, arrays, sizes, dtype, box, piece) for piece in pieces]
        blocks[box] = parts[0] if len(parts) == 1 else _combine(d.body, da.stack(parts))
    return _assemble(da, blocks, axes)


def _combine(body: Any, parts: Any) -> Any:
    """The partial results (stacked on axis 0) of a split reduction, combined by Dask's tree reduction:
    ``max``/``min`` for a root max/min (an empty piece is -inf/+inf; NaN propagates, as in tcc), else ``sum``."""
    if isinstance(body, Reduce):
        return (parts.max if body.op == "max" else parts.min)(axis=0, split_every=4)
    return parts.sum(axis=0, split_every=4)


def _assemble(da: Any, blocks: Mapping[tuple, Any], axes: Sequence[Sequence[tuple[int, int]]]) -> Any:
    """The blocks as one array (``da.block`` of the nested lists, chunked as the blocks are)."""
    def nest(prefix: tuple, depth: int) -> Any:
        if depth == len(axes):
            return blocks[prefix]
        return [nest(prefix + (r,), depth + 1) for r in axes[depth]]

    if not axes:
        return blocks[()]
    return da.block(nest((), 0))


def _block(fn: "DaskFunction", plan: _Plan, text: str, arrays: Mapping[str, Any], sizes: Mapping[str, int],
           dtype: str, box: tuple[tuple[int, int], ...], piece: tuple[int, int] | None) -> Any:
    """One block (or one partial sum of it) as a lazy array: the kernel on exactly the slices it reads."""
    da = _dask()
    d = plan.d
    where = {i: r for i, r in zip(d.indices, box) if i in plan.chunked}
    if piece is not None and plan.split is not None:
        # the footprint of the clipped sum itself (not of every sum over a variable of that name)
        clipped = _clip_sum(d.body, plan.split[0], Affine.constant(piece[0]), Affine.constant(piece[1] - 1))
        fp = footprint(fn.program, d.with_body(clipped), sizes, where)
        where[plan.split[0]] = piece
    else:
        fp = footprint(fn.program, d, sizes, where)
    values = dict(sizes)
    for i, (lo, hi) in where.items():
        if i in plan.chunked:
            values[plan.names[("o", i)]], values[plan.names[("B", i)]] = lo, hi - lo
    if piece is not None:
        values[plan.names[("K", 0)]], values[plan.names[("K", 1)]] = piece[0] + plan.kbase, piece[1] + plan.kbase
    slices = []
    for t, sl in plan.sliced.items():
        arr = arrays[t]
        got = fp.get(t)
        ranges = clip(got, arr.shape) if got is not None else tuple((0, 0) for _ in arr.shape)
        index = []
        for a, n in enumerate(arr.shape):
            lo, hi = ranges[a] if sl[a] else (0, n)
            hi = max(hi, lo)
            if sl[a]:
                values[plan.names[("f", t, a)]] = lo
            index.append(slice(lo, hi))
        slices.append(arr[tuple(index)] if index else arr)
    size_values = tuple(int(values[s]) for s in plan.size_order())
    out_shape = tuple(hi - lo for lo, hi in box)
    # one blockwise task whose inputs are all contracted (concatenated: the slice, whatever
    # chunks it spans) and whose output axes are new: a block of out_shape, built as an
    # expression, so that no upstream graph is materialised while the graph is built
    args: list[Any] = []
    for n, s in enumerate(slices):
        args += [s, tuple(f"i{n}_{a}" for a in range(s.ndim))]
    out_ind = tuple(f"o{a}" for a in range(len(out_shape)))
    call = functools.partial(_run_block, text, dtype, fn.passes, d.name, size_values, tuple(plan.sliced))
    return da.blockwise(call, out_ind, *args, new_axes=dict(zip(out_ind, out_shape)), concatenate=True,
                        token=f"tcc-{d.name}", align_arrays=False, dtype=np.dtype(dtype),
                        meta=np.empty((0,) * len(out_shape), dtype=dtype))


# ---------------------------------------------------------------------------
# the public callable
# ---------------------------------------------------------------------------
class DaskFunction(FrameworkFunction):
    """A tcc program callable on Dask arrays by keyword; results are lazy Dask arrays.

    Made by :func:`compile`.  Calls build graphs only: nothing is computed
    until the caller computes a result (with any Dask scheduler).
    """

    api = "tcc.dask.compile"

    def __init__(self, source: Any, dtype: str | None, passes: Any) -> None:
        super().__init__(source, dtype)
        self.program = _outline_sums(_inferred(self.program))
        self.passes = passes if passes is None or isinstance(passes, str) else tuple(passes)
        index = [d.name for d in self.program.inputs if d.is_index]
        if index:
            raise TccError(f"{self.api} does not support index inputs yet ({', '.join(index)}): "
                           f"the footprint of an indirect read is not known from the index maps")

    def __call__(self, **arrays: Any) -> dict[str, Any]:
        da = _dask()
        self.check_names(arrays)
        for name, a in arrays.items():
            if not isinstance(a, (da.Array, np.ndarray)):
                raise TypeError(f"input '{name}' must be a dask.array.Array or a NumPy array, got {type(a).__name__}")
            if isinstance(a, da.Array) and any(np.isnan(c) for cs in a.chunks for c in cs):
                raise TccError(f"input '{name}' has unknown chunk sizes: call compute_chunk_sizes() on it first")
        dtype = self.dtype_from({n: str(a.dtype) for n, a in arrays.items()})
        for name, a in arrays.items():
            if np.dtype(a.dtype) != np.dtype(dtype):
                from tcc.backends.target import CallError

                raise CallError(f"input '{name}' has dtype {a.dtype}, but this program was compiled for {dtype}")
        sizes = bind_sizes(self.program, arrays)
        env: dict[str, Any] = {n: da.from_array(a, chunks=-1) if isinstance(a, np.ndarray) else a
                               for n, a in arrays.items()}
        for d in self.program.definitions:
            env[d.name] = _definition_array(self, d, env, sizes, dtype)
        return {r: env[r] for r in self.results}


def _inferred(program: Program) -> Program:
    """``program`` with its extents and sum ranges inferred (a Program may come straight from ``tcc.parse``)."""
    import tcc

    return tcc.transform(program)  # infer-ranges: a no-op on a program that already has them


def compile(source: Any, *, dtype: Any = None, passes: Any = None) -> DaskFunction:
    """A tcc program (text, a ``.tcc`` path or a Program) as a function of Dask arrays.

    ``dtype`` (``float64`` / ``float32``) fixes the element type; ``None``
    takes it from the float inputs at each call.  ``passes`` is given to
    :func:`tcc.compile` for every block kernel.
    """
    return DaskFunction(program_source(source), None if dtype is None else str(np.dtype(dtype)), passes)
