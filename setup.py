"""Package discovery for the four directories of the one package ``tcc``.

pyproject.toml's ``package-dir`` maps ``tcc`` to compiler/, ``tcc.ir`` to ir/, ``tcc.passes`` to
passes/ and ``tcc.backends`` to backends/; setuptools' declarative ``packages.find`` cannot
rename a directory, so the subpackages under each are found here, and a new subpackage is in
every wheel without a list to update (tests/test_packaging.py checks it).
"""
from setuptools import find_packages, setup

ROOTS = {"tcc": "compiler", "tcc.ir": "ir", "tcc.passes": "passes", "tcc.backends": "backends"}


def packages() -> list[str]:
    out = []
    for package, directory in ROOTS.items():
        out.append(package)
        out += [f"{package}.{sub}" for sub in find_packages(directory)]
    return sorted(out)


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import packages() alone
    setup(packages=packages())
