"""``python -m tcc``: the command line (see :mod:`tcc.cli.driver`)."""
import sys

from tcc.cli.driver import main

sys.exit(main())
