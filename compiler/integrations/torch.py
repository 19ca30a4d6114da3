"""``tcc.torch.function``: a tcc program as a differentiable PyTorch function.

    f = tcc.torch.function(open("examples/urban.tcc").read())
    out = f(a=a, b=b, c=c, d=d)              # torch tensors in, {"f": tensor} out
    out["f"].sum().backward()                # runs tcc's own compiled VJP program

Why it is built this way:

* **The backward is tcc's derivative program, not torch's.**  For each
  result ``y`` that receives a gradient, the backward calls the program
  ``tcc.grad(source, of=y, wrt=<the float inputs that need one>)``, compiled
  once per (result, inputs) set and dtype, with the incoming gradient as its
  seed ``dy``; the contributions of several results add up.
* **Any order.**  That derivative program is itself wrapped by this module
  (:func:`function` of its printed text), so the backward is made of
  differentiable calls: ``create_graph=True`` records them, and a second
  backward runs tcc's second-order program (``gradgradcheck`` passes), a
  third the third-order one, and so on.  Each level is compiled on first use.
* **No copies on the CPU.**  Tensors are handed to the compiled program as
  NumPy views (``Tensor.numpy()`` shares memory) and its results come back
  through ``torch.from_numpy`` (shared too).  Non-contiguous tensors are made
  contiguous first (a copy torch makes), since compiled code reads C order.
* **Index inputs** (``index tok[n] < v``) are integer tensors, validated by
  the compiled program like NumPy arrays, and get no gradient.

* **CUDA tensors go to the cuda target in place.**  With ``target="cuda"``
  float tensors on a CUDA device are handed to the compiled program as they
  are: the cuda runtime reads them through ``__cuda_array_interface__`` (no
  copy) and returns results as tensors on the same device
  (:mod:`tcc.backends.cuda`).  Index tensors are copied to the host, where the
  runtime validates index arrays before any launch.  CPU tensors work with
  ``target="cuda"`` too (copied to the device and back by the runtime), which
  is how the path is tested without a GPU (PyCUDA's test double).  The
  ``cpu`` and ``cuda-sim`` targets take CPU tensors only; a call mixing
  devices is refused rather than moved behind the caller's back.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tcc.integrations.common import FrameworkFunction, framework, program_source
from tcc.ir.diagnostics import TccError

__all__ = ["function", "TorchFunction"]


def _torch() -> Any:
    return framework("torch", "tcc.torch needs PyTorch: pip install 'tcc[torch]' (a CPU build: torch==2.13.0)")


class TorchFunction(FrameworkFunction):
    """A tcc program callable on torch tensors by keyword, differentiable by ``torch.autograd``.

    Made by :func:`function`; ``inputs`` and ``results`` name what it takes
    and returns.  Compiled programs (the forward per dtype, each derivative
    program on first use) are kept by the instance (:class:`tcc.integrations.common.FrameworkFunction`).
    """

    api = "tcc.torch.function"

    def __init__(self, source: Any, dtype: str | None, target: str, threads: int | None) -> None:
        if target not in TARGETS:
            raise ValueError(f"tcc.torch.function supports the targets 'cpu', 'cuda-sim' and 'cuda', not {target!r}")
        super().__init__(source, dtype)
        self.target = target
        self.threads = threads

    def _compile(self, dtype: str) -> Any:
        import tcc

        return tcc.compile(self.program, self.target, dtype=dtype, threads=self.threads, results=self.results)

    def _wrap(self, program: Any) -> "TorchFunction":
        return TorchFunction(program, self.dtype, self.target, self.threads)

    # -- calls ---------------------------------------------------------------
    def __call__(self, **tensors: Any) -> dict[str, Any]:
        torch = _torch()
        self.check_names(tensors)
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input '{name}' must be a torch.Tensor, got {type(t).__name__}")
        self._check_devices(tensors)
        dtype = self.dtype_from({n: str(t.dtype).replace("torch.", "") for n, t in tensors.items()})
        names = list(self.inputs)
        outs = _Apply.apply(self, dtype, names, *[tensors[n] for n in names])
        return dict(zip(self.results, outs))

    def _check_devices(self, tensors: dict[str, Any]) -> None:
        """CPU tensors for ``cpu`` and ``cuda-sim``; one device, CPU or CUDA, for ``cuda``."""
        devices = sorted({str(t.device) for t in tensors.values()})
        if self.target != "cuda":
            for name, t in tensors.items():
                if t.device.type != "cpu":
                    raise TccError(f"input '{name}' is on {t.device}: the target '{self.target}' runs CPU tensors "
                                   "(target='cuda' takes CUDA tensors)")
            return
        if len(devices) > 1:
            raise TccError(f"the inputs are on several devices ({', '.join(devices)}): "
                           "put them on one device (tcc.torch does not move tensors)")
        for name, t in tensors.items():
            if t.device.type not in ("cpu", "cuda"):
                raise TccError(f"input '{name}' is on {t.device}: the target 'cuda' takes CUDA or CPU tensors")


#: the targets a TorchFunction runs on
TARGETS = ("cpu", "cuda-sim", "cuda")


def _argument(t: Any, index: bool) -> Any:
    """What the compiled program gets for a tensor.

    A CPU tensor: a NumPy view (a contiguous copy first where it is not
    contiguous).  A CUDA float tensor: the detached tensor itself, read in
    place through ``__cuda_array_interface__`` (torch refuses that attribute
    on a tensor that requires grad).  A CUDA index tensor: a host copy, since
    index arrays are validated on the host.
    """
    t = t.detach().contiguous()
    if t.device.type == "cpu":
        return t.numpy()
    return t.cpu().numpy() if index else t


def _tensor(value: Any) -> Any:
    """A result as a tensor: NumPy arrays shared through ``from_numpy``; device results are tensors already."""
    torch = _torch()
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(value)


def _make_apply() -> Any:
    torch = _torch()

    class Apply(torch.autograd.Function):
        """One call of a TorchFunction; the backward calls its derivative programs (differentiably)."""

        @staticmethod
        def forward(ctx: Any, fn: TorchFunction, dtype: str, names: list[str], *tensors: Any) -> tuple[Any, ...]:
            out = fn.run(dtype, {n: _argument(t, n in fn.index_inputs) for n, t in zip(names, tensors)})
            ctx.fn, ctx.dtype, ctx.names = fn, dtype, names
            ctx.save_for_backward(*tensors)
            return tuple(_tensor(out[n]) for n in fn.results)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
            fn: TorchFunction = ctx.fn
            tensors = ctx.saved_tensors
            by_name = dict(zip(ctx.names, tensors))
            wrt = tuple(n for n, t, need in zip(ctx.names, tensors, ctx.needs_input_grad[3:])
                        if need and n not in fn.index_inputs)
            total: dict[str, Any] = {}
            if wrt:
                for of, g in zip(fn.results, grads):
                    if g is None:
                        continue
                    vjp, seed, dnames = fn.derivative(of, wrt)
                    got = vjp(**by_name, **{seed: g.contiguous()})
                    for x, d in zip(wrt, dnames):
                        total[x] = got[d] if x not in total else total[x] + got[d]
            return (None, None, None) + tuple(total.get(n) for n in ctx.names)

    return Apply


class _LazyApply:
    """The autograd Function, made on first use so that ``import tcc.torch`` does not import torch."""

    _cls: Any = None

    def apply(self, *args: Any) -> Any:
        if _LazyApply._cls is None:
            _LazyApply._cls = _make_apply()
        return _LazyApply._cls.apply(*args)


_Apply = _LazyApply()


def function(source: Any, *, dtype: Any = None, target: str = "cpu", threads: int | None = None) -> TorchFunction:
    """A tcc program (text, a path's text or a Program) as a differentiable function of torch tensors.

    ``dtype`` (``float64`` / ``float32``) fixes the element type; ``None``
    takes it from the float input tensors at each call.  ``target`` is
    ``cpu``, ``cuda-sim`` (CPU tensors) or ``cuda`` (CUDA tensors in place, or
    CPU tensors copied through the device); ``threads`` as for :func:`tcc.compile`.
    """
    return TorchFunction(program_source(source), None if dtype is None else str(np.dtype(dtype)), target, threads)
