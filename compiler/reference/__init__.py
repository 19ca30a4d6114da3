"""The oracles: the NumPy reference interpreter (:mod:`tcc.reference.interpreter`), which every
compiled result is checked against, and the finite-difference check of derivatives
(:mod:`tcc.reference.fdcheck`).

The interpreter imports the IR, NumPy and the argument checks that a compiled call shares
(:mod:`tcc.sizes`, :mod:`tcc.index_inputs`), never the runtime or a backend's code generation:
an oracle must not share the machinery it checks (tests/test_layers.py enforces it).
"""
