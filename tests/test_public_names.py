"""Public names that stand for modules elsewhere: ``tcc.runtime``'s re-exports of
:mod:`tcc.runtime.compiled`, and ``tcc.torch`` / ``tcc.jax`` / ``tcc.dask`` for the
:mod:`tcc.integrations` modules (one module object under two names)."""
from __future__ import annotations

import importlib


def test_the_runtime_package_re_exports_the_compiled_module_lazily() -> None:
    import tcc.runtime
    import tcc.runtime.compiled as compiled

    assert all(getattr(tcc.runtime, name) is getattr(compiled, name) for name in compiled.__all__)
    assert set(compiled.__all__) <= set(dir(tcc.runtime))
    try:
        tcc.runtime.no_such_name
    except AttributeError as exc:
        assert str(exc) == "module 'tcc.runtime' has no attribute 'no_such_name'"
    else:
        raise AssertionError("no AttributeError")



def test_framework_aliases_are_the_integration_modules_themselves() -> None:
    import tcc

    for name in ("torch", "jax", "dask"):
        real = importlib.import_module(f"tcc.integrations.{name}")
        assert importlib.import_module(f"tcc.{name}") is real
        assert getattr(tcc, name) is real
