"""tcc: a staged tensor-algebra compiler with exact symbolic derivatives."""
