"""L1 (index) and L2 (loop) IR: node types, printer, parser, verifier, integer linear algebra."""
