"""The contraction spec: ``contract(A[z, a, y], B[z, b, y])`` (issue 13 item 1).

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
it.  Any storage order is allowed; the runtime turns each operand into a
(batch, rows, columns) matrix stack -- a reshape where each group is
contiguous and in the same order, else one transposing copy -- and makes one
``np.matmul`` call (see ``tcc.compiler.contraction_kernel``).  The module
has no dependency on the rest of the IR: the expression, printer, parsers
and verifiers all use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["CONTRACT", "Groups", "Spec", "groups", "check_spec", "contract_result", "format_contract", "parse_contract_args", "parse_index_names", "spec_extents"]

#: The name of the contraction extern.
CONTRACT = "contract"

#: ``(indices of A, indices of B, indices of the result)``
Spec = tuple[tuple[str, ...], ...]


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


def spec_extents(spec: Spec, ea: Sequence[Any], eb: Sequence[Any]) -> tuple[dict[str, Any], str | None]:
    """The extent of each index from the arguments' extents, and the first disagreement (or ``None``)."""
    ext: dict[str, Any] = {}
    for ix, es in zip(spec[:2], (ea, eb)):
        if len(ix) != len(es):
            return ext, f"{len(ix)} indices for a tensor of order {len(es)}"
        for x, e in zip(ix, es):
            if x in ext and ext[x] != e:
                return ext, f"index '{x}' has extents {ext[x]} and {e}"
            ext[x] = e
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


def parse_index_names(p: Any) -> list[str]:
    """Read ``[a, b]`` (index names) with the L1 or L2 parser ``p``."""
    names: list[str] = []
    p.expect("[")
    while not p.peek().is_op("]"):
        names.append(p.name("an index name").value)
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
        idx.append(tuple(parse_index_names(p)))
        if not p.peek().is_op(","):
            break
        p.advance()
    p.expect(")")
    return args, idx

