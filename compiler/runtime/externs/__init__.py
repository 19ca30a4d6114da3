"""External kernels: the calls compiled code makes into NumPy and BLAS (``extern`` statements of
L2), one module per kernel family, dispatched by :func:`tcc.runtime.externs.dispatch.run_extern`.

To add one: write its module here, add its entry to the dispatch table
(:data:`tcc.runtime.externs.dispatch.KERNELS`) and its matching pass in ``passes/blas``
(docs/architecture.md, "Where things go").
"""
