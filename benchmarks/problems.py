"""What ``benchmarks/run.py`` (CPU) and ``benchmarks/gpu.py`` (CUDA) share.

* the peers: :class:`Peers` (jax and torch, where their arrays live, why one
  is missing) and :func:`import_peer`, which records a peer that cannot be
  loaded; each script loads them for its own device;
* the problems: :func:`urban`, :func:`correlation` and :func:`conv2d` build a
  :class:`GradCase` (tcc program text, inputs, seed and the jax/torch
  reference functions, the inputs differentiated, the useful FLOPs of each
  row) for given sizes and the peers at hand (``families.py`` builds more);
* :func:`grad_case`, the three rows of such a case (forward,
  forward+backward, backward only), on the CPU or, through the device hooks
  of :class:`RunContext`, on a GPU;
* small helpers: :func:`jax_ready`, :func:`unavailable`,
  :func:`residual_program`.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

import harness as H

FB, BO = "gradients, forward+backward", "gradients, backward only"


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------
@dataclass
class Peers:
    """jax and torch (``None`` where they cannot run: ``jax_status`` / ``torch_status`` say why).

    ``jax_device`` / ``torch_device`` are where the peers' arrays live; with
    ``None`` (``run.py``) jax arrays come from ``jnp.asarray`` (jax's default
    device) and torch tensors share NumPy's memory.
    """

    jax: Any = None
    jnp: Any = None
    lax: Any = None
    jax_device: Any = None
    jax_status: str = "ok"
    torch: Any = None
    torch_device: Any = None
    torch_status: str = "ok"
    versions: dict[str, str] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)

    def jax_put(self, value: np.ndarray) -> Any:
        if self.jax_device is None:
            return self.jnp.asarray(value)
        return self.jax.device_put(value, self.jax_device)

    def torch_put(self, value: np.ndarray) -> Any:
        if self.torch_device is None:
            return self.torch.from_numpy(value)
        return self.torch.from_numpy(np.ascontiguousarray(value)).to(self.torch_device)

    def torch_leaf(self, value: np.ndarray) -> Any:
        """A tensor of ``value`` that requires grad, for autograd's leaves."""
        if self.torch_device is None:
            return self.torch.from_numpy(value.copy()).requires_grad_()
        return self.torch_put(value).requires_grad_()

    def torch_sync(self) -> None:
        if self.torch is not None and self.torch_device is not None and self.torch_device.type == "cuda":
            self.torch.cuda.synchronize(self.torch_device)


def import_jax() -> tuple[Any, Any, Any]:
    """``jax``, ``jax.numpy`` and ``jax.lax``, with ``jax_enable_x64``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax import lax

    return jax, jnp, lax


def import_torch() -> Any:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\..*")
    import torch

    return torch


def import_peer(peers: Peers, name: str, setup: Callable[[], None], absent: str | None = None) -> None:
    """Run ``setup()``, which loads the peer ``name`` (``jax`` or ``torch``) into ``peers``; if it raises, say why.

    An ImportError makes the peer ``missing``; with ``absent`` given, a
    LookupError (``setup``'s way of saying the peer has no backend for the
    benchmark's device) makes it ``absent``; anything else ``failed: ...``.
    """
    lookup = LookupError if absent is not None else ()
    try:
        setup()
        return
    except ImportError as exc:
        status, version = "missing", f"missing ({exc.name or exc})"
    except lookup as exc:
        status, version = absent, f"missing ({exc})"
    except Exception as exc:  # noqa: BLE001
        status = version = f"failed: {H.short_reason(exc)}"
    setattr(peers, f"{name}_status", status)
    peers.versions[name] = version


def jax_ready(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def unavailable(framework: str, status: str) -> H.Candidate:
    return H.Candidate(framework, None, status=status)


def residual_program(text: str, names: list[str]) -> str:
    """The printed program ``text`` with the locals ``names`` turned into inputs (their definitions dropped).

    Used for "backward only": tcc's gradient program recomputes the forward
    value it needs (a local); given as an input, it is the residual a reverse
    mode framework keeps from its forward pass.
    """
    out: list[str] = []
    moved: list[str] = []
    for line in text.splitlines():
        if line.startswith("local "):
            decls = re.findall(r"\w+\[[^\]]*\]|\w+", line[len("local "):])
            keep = [d for d in decls if re.match(r"\w+", d).group(0) not in names]
            moved += [d for d in decls if d not in keep]
            if keep:
                out.append("local " + ", ".join(keep))
            continue
        m = re.match(r"\s*(\w+)\s*[\[=]", line)
        if m and m.group(1) in names and not line.startswith(("input", "output")):
            continue
        out.append(line)
    if len(moved) != len(names):
        raise ValueError(f"not all of {names} are locals of the program")
    for i, line in enumerate(out):
        if line.startswith("input "):
            out[i] = line + ", " + ", ".join(moved)
            break
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# run context: what grad_case needs of a script's context
# --------------------------------------------------------------------------
class RunContext:
    """The methods both scripts' run contexts share, and the device hooks of :func:`grad_case`.

    A subclass (a dataclass) has the attributes ``peers``, ``rows``,
    ``repeat``, ``budget_s``, ``min_time_s``, ``quiet_below`` and ``primer``,
    and the methods ``tcc_compile(name, program)`` and ``breakdown(title,
    compiled, arrays)``.  The hooks' defaults are those of the CPU: tcc is
    given the NumPy arrays themselves and its results are NumPy arrays.
    """

    breakdown_backward_only = False            # also time the kernels of the "backward only" program

    def log(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def row(self, case: str, what: str, candidates: list[H.Candidate], reference: Any, tol: float = 1e-9,
            note: str = "", flops: float | None = None) -> H.Row:
        row = H.Row(case, what, note=note, flops=flops)
        H.run_row(row, candidates, reference, repeat=self.repeat, budget_s=self.budget_s, tol=tol,
                  min_time_s=self.min_time_s, quiet_below=self.quiet_below, primer=self.primer, log=self.log)
        self.rows.append(row)
        return row

    def put(self, value: np.ndarray) -> Any:
        """An input as tcc is given it."""
        return value

    def wrap(self, results: Mapping[str, Any]) -> Mapping[str, Any]:
        """What a timed tcc call returns to the harness, which checks the first one."""
        return results

    def fetch(self, results: Mapping[str, Any]) -> Mapping[str, Any]:
        """tcc's results as NumPy arrays (the references the peers are checked against)."""
        return results

    def cpu_check(self, name: str, program: Any, arrays: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
                  dtype: str = "float64") -> None:
        """Compare tcc's results with tcc's on the CPU (nothing to do on the CPU)."""


# --------------------------------------------------------------------------
# a function and its gradients
# --------------------------------------------------------------------------
@dataclass
class GradCase:
    case: str
    src: str                                  # the tcc forward program
    of: str
    inputs: dict[str, np.ndarray]             # in the order f_jax and f_torch take them
    seed: np.ndarray                          # d<of>
    f_jax: Callable[..., Any] | None
    f_torch: Callable[..., Any] | None
    numpy_fwd: Callable[..., np.ndarray] | None = None
    torch_compile: bool = False
    notes: dict[str, str] = field(default_factory=dict)
    wrt: list[str] | None = None              # the inputs differentiated (default: all); the others are constants
    flops: dict[str, float] = field(default_factory=dict)   # useful FLOPs per row ("forward", FB, BO)
    # one round of NumPy's matmul on the forward + gradients' products (families.py): timed in the FB
    # row's alternating blocks, beside tcc, as the rate goal's reference
    same_shapes: Callable[[], Any] | None = None


def grad_case(ctx: RunContext, gc: GradCase) -> None:
    """Three rows: forward, forward+backward, backward only; tcc's arrays placed by ``ctx.put``.

    The gradients are those of ``gc.wrt`` (all inputs by default); every
    peer differentiates only those too (jax: ``jax.vjp`` of the function of
    those arguments; torch: only they require grad).
    """
    import tcc

    peers = ctx.peers
    everything = list(gc.inputs)
    names = list(gc.wrt) if gc.wrt is not None else everything
    at = [everything.index(n) for n in names]   # positions of the differentiated arguments

    def merged(xs: list[Any], ws: tuple[Any, ...]) -> list[Any]:
        """All arguments: ``xs`` with the differentiated ones replaced by ``ws``."""
        full = list(xs)
        for i, w in zip(at, ws):
            full[i] = w
        return full

    dnames = ["d" + n for n in names]
    arrays = gc.inputs
    seed_name = "d" + gc.of
    wrap = ctx.wrap
    ctx.log(f"[{gc.case}] shapes " + ", ".join(f"{k}{list(v.shape)}" for k, v in arrays.items()))

    # every tcc program returns what the peers return (results=): the value, the gradients; its other
    # definitions are intermediates that rematerialize may recompute or drop (docs/runtime.md#results)
    program = tcc.parse(gc.src, f"<{gc.case}>")
    fwd = ctx.tcc_compile(f"{gc.case}: forward", program, results=[gc.of])
    grad_program = tcc.grad(program, of=gc.of, wrt=names)
    grad = ctx.tcc_compile(f"{gc.case}: gradients", grad_program, results=dnames)
    # the gradient program computes the forward value itself
    recomputes = gc.of in {d.name for d in grad_program.definitions}

    dev = {k: ctx.put(v) for k, v in arrays.items()}
    dseed = ctx.put(gc.seed)
    ref_f = ctx.fetch(fwd(**dev))
    ref_grad = ctx.fetch(grad(**dev, **{seed_name: dseed}))
    ref_all = {gc.of: ref_f[gc.of], **{d: ref_grad[d] for d in dnames}}
    ctx.cpu_check(f"{gc.case}: forward", program, arrays, {gc.of: ref_f[gc.of]})
    ctx.cpu_check(f"{gc.case}: gradients", grad_program, {**arrays, seed_name: gc.seed},
                  {d: ref_grad[d] for d in dnames})

    # -- forward --------------------------------------------------------
    cands = [H.Candidate("tcc", lambda: wrap(fwd(**dev)), check=False)]
    tj = tt = None
    if peers.jax is not None and gc.f_jax is not None:
        jargs = [peers.jax_put(v) for v in arrays.values()]
        jseed = peers.jax_put(gc.seed)
        jf = peers.jax.jit(gc.f_jax)
        cands.append(H.Candidate("jax.jit", lambda: {gc.of: jax_ready(jf(*jargs))}))
        tj = (jargs, jseed)
    else:
        cands.append(unavailable("jax.jit", peers.jax_status if peers.jax is None else "n/a"))
    if peers.torch is not None and gc.f_torch is not None:
        torch = peers.torch
        targs = [peers.torch_put(v) for v in arrays.values()]
        tleaves = [peers.torch_leaf(v) if k in names else peers.torch_put(v) for k, v in arrays.items()]
        tseed = peers.torch_put(gc.seed)

        def torch_fwd(f: Callable[..., Any]) -> Callable[[], dict]:
            def run() -> dict:
                with torch.no_grad():
                    y = f(*targs)
                peers.torch_sync()
                return {gc.of: y}
            return run

        cands.append(H.Candidate("torch", torch_fwd(gc.f_torch)))
        tt = (tleaves, tseed)
        if gc.torch_compile:
            try:
                cands.append(H.Candidate("torch.compile", torch_fwd(torch.compile(gc.f_torch))))
            except Exception as exc:  # noqa: BLE001
                cands.append(unavailable("torch.compile", f"failed: {H.short_reason(exc)}"))
    else:
        cands.append(unavailable("torch", peers.torch_status if peers.torch is None else "n/a"))
        if gc.torch_compile:
            cands.append(unavailable("torch.compile", peers.torch_status if peers.torch is None else "n/a"))
    if gc.numpy_fwd is not None:
        cands.append(H.Candidate("numpy", lambda: {gc.of: gc.numpy_fwd(*arrays.values())}))
    ctx.row(gc.case, "forward", cands, {gc.of: ref_f[gc.of]}, note=gc.notes.get("forward", ""),
            flops=gc.flops.get("forward"))

    # -- forward + backward ---------------------------------------------
    # one program for the value and the gradients (tcc.grad(value=True), as jax.value_and_grad),
    # which is what a training step runs: it shares the value's intermediates with the gradients
    value_grad = ctx.tcc_compile(f"{gc.case}: value and gradients", tcc.grad(program, of=gc.of, wrt=names, value=True),
                                 results=[gc.of, *dnames])

    def tcc_fb() -> Mapping[str, Any]:
        return wrap(value_grad(**dev, **{seed_name: dseed}))
    cands = [H.Candidate("tcc", tcc_fb, check=False)]
    jbwd = None
    if tj is not None:
        jax = peers.jax
        jargs, jseed = tj

        def vjp_all(*args: Any) -> dict:
            *xs, g = args
            y, pullback = jax.vjp(lambda *ws: gc.f_jax(*merged(xs, ws)), *[xs[i] for i in at])
            return {gc.of: y, **dict(zip(dnames, pullback(g)))}

        jfb = jax.jit(vjp_all)
        cands.append(H.Candidate("jax.jit", lambda: jax_ready(jfb(*jargs, jseed))))
        # backward only: the pullback of a jitted forward, itself jitted; its residuals are arguments
        try:
            jf_all = jax.jit(gc.f_jax)
            _, pullback = jax.vjp(lambda *ws: jf_all(*merged(jargs, ws)), *[jargs[i] for i in at])
            jpb = jax.jit(lambda pb, g: pb(g))
            jbwd = H.Candidate("jax.jit", lambda: dict(zip(dnames, jax_ready(jpb(pullback, jseed)))))
        except Exception as exc:  # noqa: BLE001
            jbwd = unavailable("jax.jit", f"failed: {H.short_reason(exc)}")
    else:
        cands.append(unavailable("jax.jit", peers.jax_status if peers.jax is None else "n/a"))
    tbwd = []
    if tt is not None:
        torch = peers.torch
        tleaves, tseed = tt

        def autograd_fb(f: Callable[..., Any]) -> Callable[[], dict]:
            def run() -> dict:
                y = f(*tleaves)
                gs = torch.autograd.grad(y, [tleaves[i] for i in at], tseed)
                peers.torch_sync()
                return {gc.of: y, **dict(zip(dnames, gs))}
            return run

        def autograd_bwd(f: Callable[..., Any]) -> Callable[[], dict]:
            kept: dict[str, Any] = {}

            def run() -> dict:
                if "y" not in kept:                 # the forward (graph and residuals) once, on the first call
                    kept["y"] = f(*tleaves)
                gs = torch.autograd.grad(kept["y"], [tleaves[i] for i in at], tseed, retain_graph=True)
                peers.torch_sync()
                return dict(zip(dnames, gs))
            return run

        cands.append(H.Candidate("torch", autograd_fb(gc.f_torch)))
        tbwd.append(H.Candidate("torch", autograd_bwd(gc.f_torch)))
        if gc.torch_compile:
            try:
                cf = torch.compile(gc.f_torch)
                cands.append(H.Candidate("torch.compile", autograd_fb(cf)))
                tbwd.append(H.Candidate("torch.compile", autograd_bwd(cf)))
            except Exception as exc:  # noqa: BLE001
                cands.append(unavailable("torch.compile", f"failed: {H.short_reason(exc)}"))
    else:
        st = peers.torch_status if peers.torch is None else "n/a"
        cands.append(unavailable("torch", st))
        tbwd.append(unavailable("torch", st))
        if gc.torch_compile:
            cands.append(unavailable("torch.compile", st))
            tbwd.append(unavailable("torch.compile", st))
    if gc.same_shapes is not None:  # NumPy as it runs without tcc: OpenBLAS's own spin (tcc.runtime.externs.blas_spin)
        from tcc.runtime.externs.blas_spin import openblas_spin

        cands.append(H.Candidate(H.SAME_SHAPES, gc.same_shapes, check=False, around=openblas_spin))
    ctx.row(gc.case, FB, cands, ref_all,
            note="tcc: one program for the value and the gradients, tcc.grad(value=True)", flops=gc.flops.get(FB))

    # -- backward only --------------------------------------------------
    if recomputes:
        bwd_text = residual_program(str(grad_program), [gc.of])
        bwd = ctx.tcc_compile(f"{gc.case}: backward only", bwd_text, results=dnames)
        given = {**dev, seed_name: dseed, gc.of: ctx.put(ref_f[gc.of])}
        tcc_b = lambda: wrap(bwd(**given))  # noqa: E731
        note = f"tcc: the gradient program with {gc.of} as an input"
    else:
        tcc_b = lambda: wrap(grad(**dev, **{seed_name: dseed}))  # noqa: E731
        note = "tcc: the gradient program (it does not need " + gc.of + ")"
    cands = [H.Candidate("tcc", tcc_b, check=False)]
    cands.append(jbwd if jbwd is not None else unavailable("jax.jit", peers.jax_status if peers.jax is None else "n/a"))
    cands += tbwd
    ctx.row(gc.case, BO, cands, {d: ref_grad[d] for d in dnames}, note=note, flops=gc.flops.get(BO))

    ctx.breakdown(f"{gc.case}: forward", fwd, dev)
    ctx.breakdown(f"{gc.case}: gradients", grad, {**dev, seed_name: dseed})
    if recomputes and ctx.breakdown_backward_only:
        ctx.breakdown(f"{gc.case}: backward only", bwd, given)


# --------------------------------------------------------------------------
# the problems, for given sizes and the peers at hand
# --------------------------------------------------------------------------
def urban(I: int, J: int, K: int, peers: Peers, **kw: Any) -> GradCase:
    """The Urban paper's sec. 6 function: ``f[i, j] = exp(-sum[k]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))``."""
    rng = np.random.default_rng(1)
    inputs = {
        "a": rng.uniform(0, 0.25, (I, K)),
        "b": rng.uniform(0, 0.25, (J, K)),
        "c": rng.uniform(0, 1, (I, I)),
        "d": rng.uniform(0, 0.5, (I + K - 1,)),
    }
    src = (
        f"input a[{I}, {K}], b[{J}, {K}], c[{I}, {I}], d[{I + K - 1}]\n"
        f"output f[{I}, {J}]\n"
        "f[i, j] = exp(-sum[k]((a[i, k] + b[j, k])**2 * c[i, i] + d[i + k]**3))\n"
    )
    f_jax = f_torch = None
    if peers.jax is not None:
        jnp = peers.jnp

        def f_jax(a, b, c, d):
            n, k = a.shape
            s = jnp.sum((a[:, None, :] + b[None, :, :]) ** 2 * jnp.diagonal(c)[:, None, None], axis=-1)
            window = d[jnp.arange(n)[:, None] + jnp.arange(k)[None, :]]
            return jnp.exp(-(s + jnp.sum(window ** 3, axis=-1)[:, None]))

    if peers.torch is not None:
        torch = peers.torch

        def f_torch(a, b, c, d):
            k = a.shape[1]
            s = ((a[:, None, :] + b[None, :, :]) ** 2 * torch.diagonal(c)[:, None, None]).sum(-1)
            return torch.exp(-(s + (d.unfold(0, k, 1) ** 3).sum(-1)[:, None]))

    return GradCase("urban", src, "f", inputs, rng.uniform(0, 1, (I, J)), f_jax, f_torch, **kw)


def correlation_src(n: int, k: int) -> str:
    """``y[i] = sum[k](x[i + k] * w[k])`` (valid) for ``x[n]``, ``w[k]``."""
    return f"input x[{n}], w[{k}]\ny[i] = sum[k](x[i + k] * w[k])\n"


def correlation_peers(peers: Peers) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """The correlation in jax and in torch, ``f(x, w) -> y`` (``None`` for a peer that is not there)."""
    f_jax = f_torch = None
    if peers.jax is not None:
        jnp = peers.jnp

        def f_jax(x, w):
            return jnp.correlate(x, w, mode="valid")

    if peers.torch is not None:
        F = peers.torch.nn.functional

        def f_torch(x, w):
            return F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)

    return f_jax, f_torch


def correlation(n: int, k: int, peers: Peers, **kw: Any) -> GradCase:
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal(n), "w": rng.standard_normal(k)}
    f_jax, f_torch = correlation_peers(peers)
    return GradCase("correlation", correlation_src(n, k), "y", inputs, rng.standard_normal(n - k + 1),
                    f_jax, f_torch, **kw)


def conv2d(B: int, C: int, O: int, S: int, R: int, peers: Peers, stride: int = 2, case: str = "conv2d",
           **kw: Any) -> GradCase:
    """NCHW convolution, valid, with stride ``stride``: batch B, C -> O channels, SxS images, RxR kernels."""
    So = (S - R) // stride + 1
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((B, C, S, S)), "w": rng.standard_normal((O, C, R, R))}
    at = "" if stride == 1 else f"{stride}*"
    src = (
        f"input x[{B}, {C}, {S}, {S}], w[{O}, {C}, {R}, {R}]\n"
        f"y[b, o, i, j] = sum[c, p, q](x[b, c, {at}i + p, {at}j + q] * w[o, c, p, q])\n"
    )
    f_jax = f_torch = None
    if peers.jax is not None:
        lax = peers.lax

        def f_jax(x, w):
            return lax.conv_general_dilated(x, w, (stride, stride), "VALID",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    if peers.torch is not None:
        F = peers.torch.nn.functional

        def f_torch(x, w):
            return F.conv2d(x, w, stride=stride)

    return GradCase(case, src, "y", inputs, rng.standard_normal((B, O, So, So)), f_jax, f_torch, **kw)
