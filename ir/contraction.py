"""The contraction spec: ``contract(A[z, a, y], B[z, b, y])``.

A ``contract`` call is the product of two whole tensors summed over the
indices they share and that the result does not have, written with the
language's own index names instead of einsum letters:

    D[a, b] = contract(A[z, a, y], B[z, b, y])[a, b]      # L1
    extern contract(A[z, a, y], B[z, b, y]) -> D[a, b]    # L2

is ``D[a, b] = sum[z, y](A[z, a, y] * B[z, b, y])``.  Its *spec* is the
triple of index tuples ``(A's, B's, D's)``; each names every axis of its
tensor once (no repeats, no diagonals).  The indices fall into four
*groups*:

* batch -- in ``A``, ``B`` and ``D``;
* left -- in ``A`` and ``D`` only; right -- in ``B`` and ``D`` only;
* contracted -- in ``A`` and ``B`` only, summed.

An index in one argument only and not in ``D`` (a sum over one factor) or in
``D`` only (a broadcast) is not a contraction: :func:`check_spec` refuses
it.

**Windows** (stride-1 convolutions).  An index of the *first* argument may
be a window ``u + v`` or ``u - v`` of two index names, exactly one of them
summed (not in the result):

    y[b, o, i, j] = contract(x[b, c, i + p, j + q], w[o, c, p, q])[b, o, i, j]

is ``sum[c, p, q](x[b, c, i + p, j + q] * w[o, c, p, q])``; a term whose
read of ``A`` falls outside it is left out (so ``contract(dy[b, o, h - p,
w - q], w[o, c, p, q])[b, c, h, w]``, a convolution's input gradient, is
the sum over the clipped window).  Each name of a window is in no other window
and is not a plain index of ``A``.  An index's extent comes from its plain
occurrences; the first name ``u`` of a window may have none (it is then in
the result), and its extent is that of the convolution: ``E - N + 1`` for
``u + v`` (the valid positions, every read in range), ``E + N - 1`` for
``u - v`` (every position some read reaches), with ``E`` the extent of
``A``'s axis and ``N`` that of ``v``.  The runtime runs it as a sequence of
GEMMs over shifted views (``tcc.runtime.externs.window_kernel``).  Any storage order is allowed; the runtime turns each operand into a
(batch, rows, columns) matrix stack -- a reshape where each group is
contiguous and in the same order, else one transposing copy -- and makes one
``np.matmul`` call (see ``tcc.compiler.contraction_kernel``).  The module
has no dependency on the rest of the IR: the expression, printer, parsers
and verifiers all use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["CONTRACT", "Groups", "Spec", "groups", "check_spec", "contract_result", "format_contract", "has_window", "index_names",
           "parse_contract_args", "parse_index_names", "spec_extents", "window", "window_entry"]

#: The name of the contraction extern.
CONTRACT = "contract"

#: ``(indices of A, indices of B, indices of the result)``
Spec = tuple[tuple[str, ...], ...]


def window(entry: str) -> tuple[str, int, str] | None:
    """``(u, sign, v)`` of a window entry ``"u + v"`` (sign 1) or ``"u - v"`` (sign -1), else ``None``."""
    for op, sign in ((" + ", 1), (" - ", -1)):
        if op in entry:
            u, v = entry.split(op)
            return u, sign, v
    return None


def window_entry(u: str, sign: int, v: str) -> str:
    """The spec entry of the window ``u + v`` (``sign`` 1) or ``u - v`` (-1): how it prints."""
    return f"{u} {'+' if sign > 0 else '-'} {v}"


def has_window(spec: Spec) -> bool:
    """Whether the first argument reads a window (a convolution, not a plain contraction)."""
    return bool(spec) and any(window(x) is not None for x in spec[0])


def index_names(ix: tuple[str, ...]) -> tuple[str, ...]:
    """Every index name of an argument's entries, a window's two included."""
    out: list[str] = []
    for x in ix:
        w = window(x)
        out.extend((w[0], w[2]) if w else (x,))
    return tuple(out)


@dataclass(frozen=True)
class Groups:
    """The indices of a spec by group, each in the order of the result (batch, left, right) or
    of the first argument (contracted)."""

    batch: tuple[str, ...]
    left: tuple[str, ...]
    right: tuple[str, ...]
    contracted: tuple[str, ...]


def groups(spec: Spec) -> Groups:
    """Split ``spec``'s indices into its groups (the spec is assumed valid: :func:`check_spec`)."""
    ia, ib, io = spec
    return Groups(
        tuple(x for x in io if x in ia and x in ib),
        tuple(x for x in io if x in ia and x not in ib),
        tuple(x for x in io if x in ib and x not in ia),
        tuple(x for x in ia if x in ib and x not in io),
    )


def check_spec(spec: Spec) -> str | None:
    """Why ``spec`` is not a contraction of two tensors, or ``None`` when it is one."""
    if len(spec) != 3:
        return "a contraction has two arguments"
    if any(window(x) for x in spec[1] + spec[2]):
        return "only the first argument may read a window (u + v, u - v)"
    if has_window(spec):
        return _check_windows(spec)
    ia, ib, io = spec
    for what, ix in (("first argument", ia), ("second argument", ib), ("result", io)):
        if len(set(ix)) != len(ix):
            return f"the {what} repeats an index ({', '.join(ix)})"
    for x in ia + ib:
        if x not in io and (x not in ia or x not in ib):
            return f"index '{x}' is in one argument only and not in the result: a sum over one factor"
    for x in io:
        if x not in ia and x not in ib:
            return f"index '{x}' of the result is in neither argument"
    return None


def _check_windows(spec: Spec) -> str | None:
    """:func:`check_spec` for a spec whose first argument reads windows (see the module docstring)."""
    ia, ib, io = spec
    plain_a = tuple(x for x in ia if window(x) is None)
    for what, ix in (("first argument", index_names(ia)), ("second argument", ib), ("result", io)):
        if len(set(ix)) != len(ix):
            return f"the {what} repeats an index ({', '.join(ix)})"
    for x in ia:
        w = window(x)
        if w is None:
            continue
        u, _, v = w
        if u == v:
            return f"the window {x} names one index twice"
        if (u in io) == (v in io):
            return f"the window {x} needs exactly one summed index (one of {u}, {v} not in the result)"
        if v not in ib and v not in plain_a:
            return f"index '{v}' of the window {x} has no extent: it is in no other read"
        if u not in io and u not in ib:
            return f"index '{u}' of the window {x} is summed but not in the second argument"
    for x in plain_a + ib:
        if x not in io and (x not in index_names(ia) or x not in ib):
            return f"index '{x}' is in one argument only and not in the result: a sum over one factor"
    for x in io:
        if x not in index_names(ia) and x not in ib:
            return f"index '{x}' of the result is in neither argument"
    return None


def spec_extents(spec: Spec, ea: Sequence[Any], eb: Sequence[Any]) -> tuple[dict[str, Any], str | None]:
    """The extent of each index from the arguments' extents, and the first disagreement (or ``None``).

    A window's first name without a plain occurrence gets the convolution's
    extent (module docstring) after every plain one is known."""
    ext: dict[str, Any] = {}
    windows = []
    for ix, es in zip(spec[:2], (ea, eb)):
        if len(ix) != len(es):
            return ext, f"{len(ix)} indices for a tensor of order {len(es)}"
        for x, e in zip(ix, es):
            w = window(x)
            if w is not None:
                windows.append((w, e))
                continue
            if x in ext and ext[x] != e:
                return ext, f"index '{x}' has extents {ext[x]} and {e}"
            ext[x] = e
    for (u, sign, v), e in windows:
        if u not in ext:
            ext[u] = e - ext[v] + 1 if sign > 0 else e + ext[v] - 1
    return ext, None


def contract_result(spec: Spec, ea: Sequence[Any], eb: Sequence[Any]) -> tuple[tuple[Any, ...], str | None]:
    """The result's extents from the arguments', and why the call is invalid (or ``None``)."""
    why = check_spec(spec)
    ext, bad = spec_extents(spec, ea, eb) if why is None else ({}, why)
    return (tuple(ext[x] for x in spec[2]) if bad is None else ()), bad


def format_contract(args: Sequence[str], spec: Spec) -> str:
    """``contract(A[z, a], B[z, b])``: the call as L1 and L2 print it (the result's indices follow it)."""
    calls = (f"{n}[{', '.join(ix)}]" for n, ix in zip(args, spec))
    return f"{CONTRACT}({', '.join(calls)})"


def parse_index_names(p: Any, windows: bool = False) -> list[str]:
    """Read ``[a, b]`` (index names; with ``windows``, also ``u + v`` and ``u - v``) with the L1 or L2 parser ``p``."""
    names: list[str] = []
    p.expect("[")
    while not p.peek().is_op("]"):
        names.append(p.name("an index name").value)
        if windows and (p.peek().is_op("+") or p.peek().is_op("-")):
            sign = 1 if p.advance().is_op("+") else -1
            names[-1] = window_entry(names[-1], sign, p.name("an index name").value)
        if not p.peek().is_op(","):
            break
        p.advance()
    p.expect("]")
    return names


def parse_contract_args(p: Any) -> tuple[list[str], list[tuple[str, ...]]]:
    """Read ``(A[z, a], B[z, b])`` after the word ``contract`` with the L1 or L2 parser ``p``
    (its ``expect``, ``name``, ``peek`` and ``advance``); returns the names and their indices."""
    p.expect("(")
    args: list[str] = []
    idx: list[tuple[str, ...]] = []
    while True:
        args.append(p.name("a tensor name").value)
        idx.append(tuple(parse_index_names(p, windows=True)))  # check_spec refuses them past the first
        if not p.peek().is_op(","):
            break
        p.advance()
    p.expect(")")
    return args, idx

