"""docs/passes.md documents every built-in pass and every one of its options.

The pass classes are the truth (``tcc passes`` prints them); this test keeps
the prose from falling behind them: a new pass without a ``## name`` section,
or a new option that its section never names, fails here, as does a section
left behind for a pass that no longer exists.
"""
from __future__ import annotations

import dataclasses
import pathlib
import re

from tcc.passes import BUILTIN_PASSES
from tcc.registry import get_pass_class

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "passes.md"
PASS_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def sections(text: str) -> dict[str, str]:
    """``## heading`` -> its text up to the next ``#`` or ``##`` heading (``###`` stays inside).

    Lines in fenced code blocks are never headings: IR dumps start with ``# -----//``.
    """
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (line.startswith("# ") or line.startswith("## ")):
            current = None
            if line.startswith("## "):
                current = out.setdefault(line[3:].strip().strip("`"), [])
            continue
        if current is not None:
            current.append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def names_option(section: str, option: str) -> bool:
    """Whether a code span of ``section`` names ``option``: `opt`, `opt=...`, or `pass{... opt=...}`."""
    for span in re.findall(r"`([^`\n]+)`", section):
        if span == option or span.startswith(option + "=") or re.search(r"[{ ]" + re.escape(option) + "=", span):
            return True
    return False


def missing(text: str, passes: dict[str, list[str]]) -> list[str]:
    """What ``text`` fails to document of ``passes`` (pass name -> option names, dashed)."""
    found = sections(text)
    problems = []
    for name, options in passes.items():
        if name not in found:
            problems.append(f"pass '{name}' has no '## {name}' section")
            continue
        problems += [f"option '{o}' of pass '{name}' is not named in its section (as `{o}` or `{o}=...`)"
                     for o in options if not names_option(found[name], o)]
    stale = [h for h in found if PASS_NAME.fullmatch(h) and h not in passes]
    problems += [f"section '## {h}' describes no built-in pass" for h in stale]
    return problems


def builtin_options() -> dict[str, list[str]]:
    return {
        name: [f.name.replace("_", "-") for f in dataclasses.fields(get_pass_class(name)) if f.init]
        for name in sorted(BUILTIN_PASSES)
    }


def test_every_builtin_pass_and_option_is_documented():
    passes = builtin_options()
    assert len(passes) >= 20 and sum(map(len, passes.values())) >= 20  # the registry was really read
    assert {"lower-loops", "lower-llvm", "llvm-opt", "emit-ptx"} <= set(passes)  # the L3 passes too, wherever they live
    problems = missing(DOC.read_text(encoding="utf-8"), passes)
    assert not problems, "docs/passes.md is behind the pass classes:\n  " + "\n  ".join(problems)


def test_the_check_finds_what_is_missing():
    doc = """# Passes

## alpha

**Options.** `depth` (default 1), and `alpha{full=true}`.

```
# -----// IR after alpha //----- #
## beta
```

## gamma

Mentions width only in prose, and `width-ish`.

## removed-pass

Gone.
"""
    problems = missing(doc, {"alpha": ["depth", "full"], "beta": [], "gamma": ["width"]})
    assert problems == [
        "pass 'beta' has no '## beta' section",
        "option 'width' of pass 'gamma' is not named in its section (as `width` or `width=...`)",
        "section '## removed-pass' describes no built-in pass",
    ]
