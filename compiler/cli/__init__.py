"""The ``tcc`` command: argument parsing and subcommands (:mod:`tcc.cli.driver`), and the
``.npz`` files it reads and writes (:mod:`tcc.cli.npz_files`)."""
