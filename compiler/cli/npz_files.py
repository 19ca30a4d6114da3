"""The .npz archives of ``tcc run``: inputs read without unpickling, results written under any name.

Kept apart from the command line (:mod:`tcc.cli.driver`) because reading an
archive that may come from anyone is its own concern: every way NumPy can
fail on a damaged or hostile file maps to one error line, and values convert
to the element type only where the conversion is faithful.
"""
from __future__ import annotations

from typing import IO, Any, Mapping

from tcc.ir.diagnostics import TccError

__all__ = ["input_array", "load_npz", "npz_error", "write_npz"]


def write_npz(fh: IO[bytes], arrays: Mapping[str, Any]) -> None:
    """The .npz format, written from a dict.

    ``np.savez(fh, **arrays)`` takes definition names as keywords, so one
    named ``file`` raises and one named ``allow_pickle`` is taken as the option
    and lost; this writes the same archive (uncompressed ``NAME.npy`` members,
    what ``np.load`` reads) with any name.
    """
    import zipfile

    import numpy as np

    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def npz_error(exc: BaseException, path: str, member: str | None = None) -> TccError | None:
    """The error line for what ``np.load`` (``member`` None) or reading a member raised, or None
    for an exception that is no sign of a damaged or unsafe archive."""
    import zipfile
    import zlib

    if isinstance(exc, ValueError) and "pickle" in str(exc):  # allow_pickle=False refused it
        if member is None:
            return TccError(f"cannot read '{path}' as .npz: it holds pickled Python objects, which tcc does not load")
        return TccError(f"input '{member}' in '{path}' is an array of Python objects, which tcc does not load")
    if isinstance(exc, (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)):
        return TccError(f"cannot read '{path}' as .npz: " + (f"member '{member}': " if member else "") + str(exc))
    return None


def load_npz(path: str, names: set[str]) -> dict[str, Any]:
    """The arrays ``names`` of the archive ``path``; never unpickles (the file may come from anyone)."""
    import numpy as np

    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError as exc:
        raise TccError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - mapped to an error line, or re-raised
        error = npz_error(exc, path)
        if error is None:
            raise
        raise error from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise TccError(f"cannot read '{path}' as .npz: it holds a single array, not an archive")
    arrays: dict[str, Any] = {}
    with data:
        for name in data.files:
            if name not in names:
                continue
            try:
                arrays[name] = data[name]
            except Exception as exc:  # noqa: BLE001 - mapped to an error line, or re-raised
                error = npz_error(exc, path, name)
                if error is None:
                    raise
                raise error from None
    return arrays


def input_array(name: str, value: Any, path: str, dtype: str) -> Any:
    """``value`` as a C-contiguous array of ``dtype``, refusing what would not convert faithfully.

    float64 and float32 convert (rounding to float32 under ``--dtype
    float32``), and so do integers that the element type holds exactly.
    Anything else (complex, bool, float16, strings, dates, records) would
    lose its meaning in the cast NumPy merely warns about, so it is an error,
    as a compiled program's call refuses a wrong dtype.
    """
    import numpy as np

    where = f"input '{name}' in '{path}'"
    if not isinstance(value, np.ndarray):
        raise TccError(f"{where} is not a .npy array")
    kind = value.dtype.kind
    if value.dtype not in (np.float64, np.float32) and kind not in "iu":
        raise TccError(
            f"{where} has dtype {value.dtype}: tcc run takes float64, float32 or integer arrays, "
            f"converted to {dtype} (--dtype)"
        )
    with np.errstate(over="ignore"):
        converted = np.asarray(value, dtype=dtype, order="C")  # ascontiguousarray would make 0-d arrays 1-d
    if kind in "iu" and value.size:
        # past 2**digits the element type skips integers: refuse rather than round
        limit = 2 ** (np.finfo(dtype).nmant + 1)
        if np.iinfo(value.dtype).max > limit:
            big = (value > limit) | (value < -limit) if kind == "i" else value > limit
            if big.any():
                raise TccError(
                    f"{where} holds the integer {int(value[big].flat[0])}, beyond the {dtype} range of exact "
                    f"integers (up to {limit} in magnitude); convert it to floating point yourself"
                )
    elif value.dtype != converted.dtype:
        overflow = np.isinf(converted) & np.isfinite(value)
        if overflow.any():
            raise TccError(f"{where} holds {float(value[overflow].flat[0]):g}, out of the range of {dtype}")
    return converted
