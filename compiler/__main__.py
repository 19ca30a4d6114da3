"""``python -m tcc``: the command line (see :mod:`tcc.driver`)."""
import sys

from tcc.driver import main

sys.exit(main())
