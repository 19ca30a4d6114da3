"""Built-in passes of tcc, one module per pass, named after the pass.

How a pass name is found (see :mod:`tcc.registry`):

1. Passes registered programmatically with :func:`tcc.registry.register_pass`
   (tests, notebooks).
2. The built-in table :data:`BUILTIN_PASSES` below: pass name ->
   ``"tcc.passes.<module>:<ClassName>"`` (``tcc.backends.<module>`` for the
   L3 passes ``lower-llvm``, ``llvm-opt`` and ``emit-ptx``, which drive a
   backend and so live in that layer).  The module is imported only when the
   pass is asked for, so ``import tcc`` and the command line stay cheap.  The
   module file is the pass name with dashes turned into underscores
   (``sum-liberation`` -> ``passes/sum_liberation.py``) and the class's
   ``name`` equals the key; ``tests/test_pipeline.py`` keeps both true.
3. Out-of-tree passes: the entry-point group ``tcc.passes``.  A package
   declares, e.g. in its ``pyproject.toml``::

       [project.entry-points."tcc.passes"]
       my-pass = "my_package.my_module:MyPass"

   The entry point's name must equal the class's ``name``; a name that clashes
   with a built-in pass (or with another package's pass) is an error.

Keep this module free of imports: it is read on every pipeline parse.
"""

BUILTIN_PASSES: dict[str, str] = {
    "infer-ranges": "tcc.passes.infer_ranges:InferRanges",
    "autodiff": "tcc.passes.autodiff:AutoDiff",
    "sum-liberation": "tcc.passes.sum_liberation:SumLiberation",
    "index-solve": "tcc.passes.index_solve:IndexSolve",
    "range-bound": "tcc.passes.range_bound:RangeBound",
    "simplify": "tcc.passes.simplify:Simplify",
    "inverse-index": "tcc.passes.inverse_index:InverseIndex",
    "cse": "tcc.passes.cse:CSE",
    "inline-guards": "tcc.passes.inline_guards:InlineGuards",
    "factor-linear": "tcc.passes.factor_linear:FactorLinear",
    "rematerialize": "tcc.passes.rematerialize:Rematerialize",
    "blas": "tcc.passes.blas:Blas",
    "contract-order": "tcc.passes.contract_order:ContractOrder",
    "col2im": "tcc.passes.col2im:Col2im",
    "im2col": "tcc.passes.im2col:Im2col",
    "lower-llvm": "tcc.backends.lower_llvm:LowerLLVM",
    "llvm-opt": "tcc.backends.llvm_opt:LLVMOpt",
    "emit-ptx": "tcc.backends.emit_ptx:EmitPTX",
    "lower-loops": "tcc.passes.lower_loops:LowerLoops",
    "interchange": "tcc.passes.interchange:Interchange",
    "hoist": "tcc.passes.hoist:Hoist",
    "peel": "tcc.passes.peel:Peel",
    "reduce-in-place": "tcc.passes.reduce_in_place:ReduceInPlace",
    "unroll-jam": "tcc.passes.unroll_jam:UnrollJam",
    "fuse-rows": "tcc.passes.fuse_rows:FuseRows",
    "privatize": "tcc.passes.privatize:Privatize",
    "matvec-pair": "tcc.passes.matvec_pair:MatvecPair",
    "shrink-locals": "tcc.passes.shrink_locals:ShrinkLocals",
    "fuse-inner": "tcc.passes.fuse_inner:FuseInner",
    "tile": "tcc.passes.tile:Tile",
    "fuse": "tcc.passes.fuse:Fuse",
    "reuse-buffers": "tcc.passes.reuse_buffers:ReuseBuffers",
    "parallel": "tcc.passes.parallel:Parallel",
    "split-reduction": "tcc.passes.split_reduction:SplitReduction",
}
