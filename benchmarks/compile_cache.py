"""Cold vs warm compile time with the on-disk compile cache (tcc.build.disk_cache), each in a fresh process.

    python benchmarks/compile_cache.py [--repeat N] [--case NAME[,NAME]] [--keep-bytecode-env]

For every case a fresh interpreter parses the program (and derives it with
``tcc.grad`` for the gradient cases: the derivative is not cached, only its
compile) and times ``tcc.compile``: *cold* with an empty ``TCC_CACHE_DIR``,
*warm* with the entry the cold run stored, *off* with ``TCC_CACHE_DIR=`` (no
cache: what a compile cost before the cache, without its store).  Each is
the median of ``--repeat`` processes (default 5), CPU seconds of the process
around the call (``time.process_time``: other jobs on a shared machine do not
inflate it; the imports the compile triggers count -- llvmlite, tcc's passes,
the runtime -- interpreter start-up does not).  The *primed* columns do the same in processes that compiled
another (tiny, uncached) program first, so those imports are done: the cost
of the compile itself.  *process* is the whole process's wall time (start-up,
imports, parsing and ``tcc.grad`` included), unprimed; *parse+grad* the wall
time before the compile.  The table is markdown.

Python's bytecode cache is on for the children (``PYTHONDONTWRITEBYTECODE``
removed, ``PYTHONPYCACHEPREFIX`` a temporary directory, filled by a first
unmeasured run), as in an installed tcc; ``--keep-bytecode-env`` leaves the
environment as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from chain import matvec  # noqa: E402 - the benchmarks directory is not a package

#: name -> (program text, grad spec "of:wrt,wrt" or "")
CASES: dict[str, tuple[str, str]] = {
    "urban": ((ROOT / "examples/urban.tcc").read_text(), ""),
    "layer_norm": ((ROOT / "examples/layer_norm.tcc").read_text(), ""),
    "softmax_matmul": ((ROOT / "examples/softmax_matmul.tcc").read_text(), ""),
    "max_pool": ((ROOT / "examples/max_pool.tcc").read_text(), ""),
    "grad-urban": ((ROOT / "examples/urban.tcc").read_text(), "f:a,b,c,d"),
    "grad-layer_norm": ((ROOT / "examples/layer_norm.tcc").read_text(), "Y:X,g,b"),
    "grad-chain40": (matvec(40), "f:x,A"),
}

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import tcc
from tcc.build import disk_cache
text, spec = json.loads(sys.argv[1])
program = tcc.parse(text)
if spec:
    of, wrt = spec.split(":")
    program = tcc.grad(program, of=of, wrt=wrt.split(","))
if len(sys.argv) > 2:  # a process that has compiled before: tcc's passes, llvmlite and the runtime imported
    from tcc.instruments import BaseInstrument  # an instrument: this compile neither reads nor writes a cache
    tcc.compile("input x[n]\\ny[i] = x[i] * 0.5\\n", instruments=[BaseInstrument()])
t1, c1 = time.perf_counter(), time.process_time()
tcc.compile(program)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"front": t1 - t0, "wall": t2 - t1, "compile": c2 - c1, "stats": disk_cache.STATS}))
"""


def child(case: tuple[str, str], cache: str, env: dict[str, str], primed: bool = False) -> dict:
    """One fresh process compiling ``case`` (after another program when ``primed``); its timings and cache counts."""
    start = time.perf_counter()
    argv = [sys.executable, "-c", CHILD, json.dumps(case)] + (["primed"] if primed else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env={**env, "TCC_CACHE_DIR": cache}, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


def measure(case: tuple[str, str], repeat: int, env: dict[str, str], scratch: Path) -> dict[str, float]:
    """Medians over ``repeat`` rounds of fresh processes; checks each got the hit or miss it should."""
    runs: dict[str, list[dict]] = {}
    for k in range(repeat):
        for primed in (False, True):
            cache = str(scratch / f"cache-{k}-{int(primed)}")
            tag = "primed " if primed else ""
            runs.setdefault(tag + "off", []).append(child(case, "", env, primed))
            runs.setdefault(tag + "cold", []).append(child(case, cache, env, primed))
            runs.setdefault(tag + "warm", []).append(child(case, cache, env, primed))
    for kind, rows in runs.items():
        want = {"off": (0, 0), "cold": (0, 1), "warm": (1, 0)}[kind.split()[-1]]
        assert all((r["stats"]["hits"], r["stats"]["stores"]) == want for r in rows), (kind, rows)
    medians = {kind: statistics.median(r["compile"] for r in rows) for kind, rows in runs.items()}
    medians["front"] = statistics.median(r["front"] for r in runs["cold"])
    medians["process cold"] = statistics.median(r["process"] for r in runs["cold"])
    medians["process warm"] = statistics.median(r["process"] for r in runs["warm"])
    return medians


HEADER = (
    "| program | parse+grad | off | cold | warm | warm/cold | primed: off | cold | warm | warm/cold "
    "| process: cold | warm |"
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--keep-bytecode-env", action="store_true")
    args = parser.parse_args(argv)
    names = [n for n in CASES if not args.case or n in args.case.split(",")]
    with tempfile.TemporaryDirectory(prefix="tcc-cache-bench-") as tmp:
        scratch = Path(tmp)
        env = dict(os.environ)
        if not args.keep_bytecode_env:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
        child(CASES[names[0]], str(scratch / "warm-up"), env, primed=True)  # compiles tcc's modules to bytecode
        print(f"compile CPU seconds (process: wall), median of {args.repeat} fresh processes each\n")
        print(HEADER)
        print("|---" + "|---:" * (HEADER.count("|") - 2) + "|")
        for name in names:
            m = measure(CASES[name], args.repeat, env, scratch / name)
            cells = [m["front"], m["off"], m["cold"], m["warm"], m["warm"] / m["cold"], m["primed off"],
                     m["primed cold"], m["primed warm"], m["primed warm"] / m["primed cold"], m["process cold"],
                     m["process warm"]]
            print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
