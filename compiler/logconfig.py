"""Where tcc's log records go: nowhere, unless the command line asks.

Every pass logs to its own logger (``tcc.passes.blas``, ``tcc.passes.hoist``,
...; docs/logging.md): at DEBUG *why* it declined a rewrite, at INFO what it
did.  A library must not print unless the application configured logging, so
the ``tcc`` logger has only a :class:`logging.NullHandler`
(``compiler/__init__.py``).  The ``tcc`` command installs a stderr handler for
the length of one command when asked:

* ``tcc -v COMMAND ...`` (``--verbose``): level DEBUG, every reason;
* ``TCC_LOG=debug|info|warning|error`` (case-insensitive): that level; ``-v``
  wins over it.  Any other non-empty value is not an error -- a typo in the
  environment should not stop a build -- but a one-line warning on stderr, and
  no log output.

A line reads ``tcc.passes.blas: debug: f: ...`` (logger, level, message).
"""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

#: the environment variable the ``tcc`` command reads
ENV_VAR = "TCC_LOG"

#: ``TCC_LOG`` values and their levels
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _Formatter(logging.Formatter):
    """``logger: level: message``, the level in lower case like the compiler's ``error:``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.name}: {record.levelname.lower()}: {record.getMessage()}"


def requested_level(verbose: bool, env: str | None) -> tuple[int | None, str | None]:
    """The level asked for by ``-v`` and ``TCC_LOG`` (``None``: no log output) and a warning
    for an invalid ``TCC_LOG`` (``None`` when there is nothing to warn about)."""
    if verbose:
        return logging.DEBUG, None
    if not env:
        return None, None
    level = LEVELS.get(env.strip().lower())
    if level is None:
        return None, f"tcc: warning: ignoring {ENV_VAR}={env!r}: expected one of {', '.join(LEVELS)}"
    return level, None


@contextlib.contextmanager
def cli_logging(verbose: bool, env: str | None) -> Iterator[None]:
    """For one command: a stderr handler on the ``tcc`` logger at the requested level.

    The handler and the old level are taken away afterwards, so a second
    ``main()`` in one process (the tests) neither doubles lines nor inherits a
    level; the handler writes to ``sys.stderr`` as it is now.
    """
    level, warning = requested_level(verbose, env)
    if warning is not None:
        print(warning, file=sys.stderr)
    if level is None:
        yield
        return
    logger = logging.getLogger("tcc")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
