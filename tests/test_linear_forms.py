"""Affine forms (ir/linear.py): equality, hashing and pickling across processes."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from fractions import Fraction

from tcc.ir.linear import Linear


def test_equal_forms_hash_alike_whatever_the_term_order_and_coefficient_type() -> None:
    a = Linear({"i": 1, "j": Fraction(2)}, 3)
    b = Linear((("j", 2), ("i", Fraction(1))), Fraction(3))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Linear((), 5) == 5 and hash(Linear((), 5)) == hash(5)
    assert Linear({"i": 1, "j": -1}) + Linear({"j": 1}) == Linear({"i": 1})
    assert Linear((("i", 2), ("i", -2)), 0).is_constant()
    assert str(Linear((("j", 1), ("i", 1)))) == str(Linear((("j", 1), ("i", 1))))


def test_a_form_pickled_after_hashing_hashes_right_in_a_process_with_another_hash_seed(tmp_path) -> None:
    form = Linear({"i": 1, "jj": 2}, 3)
    {form}  # noqa: B018 - computes and caches the hash before pickling
    path = tmp_path / "form.pkl"
    path.write_bytes(pickle.dumps(form))
    script = (
        "import pickle, sys\n"
        "from tcc.ir.linear import Linear\n"
        f"form = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        "fresh = Linear({'i': 1, 'jj': 2}, 3)\n"
        "print(form == fresh, hash(form) == hash(fresh), form in {fresh}, fresh in {form})\n"
    )
    for seed in ("1", "2", "12345"):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.split() == ["True"] * 4, (seed, out.stdout, out.stderr)
