"""Golden text tests (FileCheck style): a package, so that its conftest is the module
``golden.conftest`` and does not shadow ``tests/conftest.py`` for ``from conftest import``."""
