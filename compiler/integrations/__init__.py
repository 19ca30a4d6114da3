"""tcc inside other frameworks: :mod:`tcc.integrations.torch`, :mod:`tcc.integrations.jax` and
:mod:`tcc.integrations.dask`, with what they share (:mod:`tcc.integrations.common`).

Users reach them as ``tcc.torch``, ``tcc.jax`` and ``tcc.dask`` (``import tcc.torch`` works
too): those public names are aliases that ``tcc/__init__.py`` resolves to these modules.
Each imports its framework only when called.
"""
