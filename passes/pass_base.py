"""What a pass is: a small frozen dataclass with a name, a level and options.

Modelled on xDSL: the options are the dataclass fields, so a pipeline string
``autodiff{of=f wrt=a,d}`` maps one-to-one onto ``AutoDiff(of="f", wrt=("a", "d"))``
and a pass prints back to the same string.  A pass never mutates its input:
IR is immutable, ``run`` returns the new program.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar


class Level(enum.Enum):
    """The IR a pass consumes.  Lowering passes also name what they produce."""

    INDEX = "index"   # L1: element-wise index expressions
    LOOPS = "loops"   # L2: loop nests
    LLVM = "llvm"     # L3: an llvmlite module
    PTX = "ptx"       # PTX text for NVIDIA GPUs (what emit-ptx makes of an L3 module)

    def __str__(self) -> str:
        return self.value


@dataclass
class PassContext:
    """State shared by the passes of one pipeline run (not part of the IR)."""

    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str] = ""
    level: ClassVar[Level] = Level.INDEX
    produces: ClassVar[Level | None] = None
    summary: ClassVar[str] = ""

    def run(self, program: Any, ctx: PassContext) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_ints(self, *names: str, zero: bool = False) -> None:
        """Refuse an option among ``names`` that is not a positive integer (non-negative with ``zero``;
        booleans refused: ``True`` is an int to Python, never a count to a pass), in the pipeline
        string's spelling: ``min-rows must be a positive integer, not 0``."""
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
                kind = "non-negative" if zero else "positive"
                raise ValueError(f"{name.replace('_', '-')} must be a {kind} integer, not {value!r}")

    @property
    def output_level(self) -> Level:
        return self.produces or self.level

    def spec(self) -> str:
        """The pipeline-string form of this pass, options included."""
        opts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default or (f.default_factory is not dataclasses.MISSING and value == f.default_factory()):  # type: ignore[misc]
                continue
            if isinstance(value, tuple):
                value = ",".join(str(v) for v in value)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            opts.append(f"{f.name.replace('_', '-')}={value}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")
