"""The verifier: structural errors with their exact messages, and bounds proofs after passes.

``--verify-each`` must catch a pass that builds a read outside its tensor: the
verifier proves every access in bounds once extents and ranges are known.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

import tcc
from tcc.ir.diagnostics import TccError
from tcc.instruments import VerifyEach
from tcc.ir.expr import Access, Const, Where, transform
from tcc.ir.index import Affine, Compare
from tcc.ir.program import Definition, Program, TensorDecl
from tcc.ir.verifier import verify
from tcc.passes.pass_base import Level, Pass, PassContext
from tcc.pipeline import parse_pipeline, run_pipeline


@pytest.mark.parametrize(
    "src, message, line, col",
    [
        ("input a[3]\nf[i] = a[i] * q[i]\n", "undeclared tensor 'q'", 2, 15),
        ("input a[3, 4]\nf[i] = a[i]\n", "'a' has 2 dimensions but a[i] gives 1 index", 2, 8),
        ("input a[3]\nf[i] = g[i]\ng[i] = a[i]\n", "'g' is used before its definition", 2, 8),
        ("input a[3]\nf[i] = a[i] + f[i]\n", "'f' is used in its own definition", 2, 15),
        ("input a[3]\noutput f[3, 3]\nf[i] = a[i]\n", "'f' is declared with 2 dimensions but defined with 1 index", 3, 1),
        # a whole-tensor expression reading such a tensor (found by hypothesis: an IndexError before)
        ("output f[3]\nf[i, j] = 0\ng = f\n", "'f' is declared with 1 dimension but defined with 2 indices", 3, 5),
        ("f[i, j] = 0\noutput f[3]\ng = f\n", "'f' is declared with 1 dimension but defined with 2 indices", 3, 5),
    ],
)
def test_structural_errors(src, message, line, col):
    """(An index only on the right is summed implicitly, so unbound indices come from passes: below.)"""
    with pytest.raises(TccError) as info:
        verify(tcc.parse(src))
    err = info.value
    assert err.message == message
    assert (err.loc.line, err.loc.col) == (line, col)


@pytest.mark.parametrize(
    "body, message",
    [
        (Access("a", (Affine.var("l"),)), "unbound index 'l' in a[l]"),
        (Where(Compare(">", Affine.var("j"), Affine.constant(0)), Access("a", (Affine.var("i"),)), Const(0)),
         "unbound index 'j' in condition of where"),
    ],
)
def test_unbound_indices_built_by_a_pass(body, message):
    program = Program((TensorDecl("a", (Affine.constant(3),)),), (Definition("f", ("i",), body),))
    with pytest.raises(TccError) as info:
        verify(program)
    assert info.value.message == message


@dataclass(frozen=True)
class ShiftReads(Pass):
    """A deliberately wrong pass: reads x one element further."""

    name = "shift-reads"
    level = Level.INDEX

    def run(self, program, ctx: PassContext):
        def shift(e):
            if isinstance(e, Access) and e.tensor == "x":
                return Access("x", (e.indices[0] + 1,))
            return e

        return program.with_definitions(d.with_body(transform(d.body, shift)) for d in program.definitions)


def test_verify_each_catches_an_out_of_bounds_read_built_by_a_pass():
    program = tcc.parse("input x[n]\nf[i] = x[i] * 2\n")
    passes = parse_pipeline("infer-ranges") + [ShiftReads()]
    with pytest.raises(TccError) as info:
        run_pipeline(program, passes, instruments=[VerifyEach()])
    assert info.value.message == (
        "IR verification failed after pass 'shift-reads': "
        "access x[i + 1] may be out of bounds: i + 1 ranges over 1..n, but 'x' has extent n"
    )


def test_verify_each_accepts_every_step_of_the_grad_pipeline():
    program = tcc.parse("input x[9], w[3]\noutput y[4]\ny[i] = sum[k](x[2*i + k] * w[k])\n")
    out = tcc.grad(program, of="y", wrt=["x", "w"], instruments=[VerifyEach()])
    assert out.outputs == ("dx", "dw")


def test_bounds_checked_once_extents_are_known():
    # before infer-ranges f has no extents: structural checks only
    verify(tcc.parse("input x[n]\nf[i] = x[i + 1]\n"))
    inferred = tcc.transform("input x[n]\noutput f[n]\nf[i] = x[i]\n")
    broken = inferred.with_definitions(
        d.with_body(Access("x", (Affine.var("i") + 1,))) for d in inferred.definitions
    )
    with pytest.raises(TccError, match=r"access x\[i \+ 1\] may be out of bounds"):
        verify(broken)
