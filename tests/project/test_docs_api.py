"""docs/api.md's signatures are the code's: its `## Signatures` block has one line per public function (those of
`pytest_genguard.__all__`, and the servers' and engines' entry points), each equal to `inspect.signature` of the
function without annotations. A parameter added, renamed or given another default fails here until the page says so."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest_genguard
from pytest_genguard import engines, serving

ROOT = Path(__file__).resolve().parents[2]
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def public_functions() -> dict[str, Callable[..., Any]]:
    """The documented functions, by the name the page gives them."""
    found = {name: getattr(pytest_genguard, name) for name in pytest_genguard.__all__}
    functions = {name: value for name, value in found.items() if inspect.isfunction(value)}
    return {**functions, "serving.record_server": serving.record_server, "engines.engine": engines.engine}


class _Shown:
    """A default as the page writes it: its repr when that is a literal, else `...` (an object's repr can hold an
    address that changes every run)."""

    def __init__(self, value: object) -> None:
        text = repr(value)
        try:
            ast.literal_eval(text)
        except (ValueError, SyntaxError):
            text = "..."
        self.text = text

    def __repr__(self) -> str:
        return self.text


def signature_line(name: str, function: Callable[..., Any]) -> str:
    """`name(parameters)`: the parameters' names, kinds (`/`, `*`, `**`) and defaults, without annotations."""
    signature = inspect.signature(function)
    parameters = [
        p.replace(
            annotation=inspect.Parameter.empty,
            default=p.default if p.default is inspect.Parameter.empty else _Shown(p.default),
        )
        for p in signature.parameters.values()
    ]
    return name + str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def documented_signatures(page: str) -> list[str]:
    """The lines of the fenced block under the page's `## Signatures` heading."""
    found = re.search(r"^## Signatures\n.*?^```python\n(.*?)^```$", page, re.M | re.S)
    assert found, "docs/api.md has no '## Signatures' section with a python block"
    return found.group(1).splitlines()


def signature_problems(page: str, functions: dict[str, Callable[..., Any]]) -> list[str]:
    """Where the page's signatures differ from the code: a function without its line, a line for no public
    function, a line that is not the function's signature."""
    lines = {line.split("(", 1)[0]: line for line in documented_signatures(page) if line.strip()}
    problems = [f"{name}: no line" for name in functions if name not in lines]
    problems += [f"{name}: not a public function" for name in lines if name not in functions]
    for name, function in functions.items():
        real = signature_line(name, function)
        if name in lines and lines[name] != real:
            problems.append(f"{name}: the page says {lines[name]}, the code {real}")
    return problems


def test_a_signature_line_shows_kinds_and_defaults() -> None:
    def example(a: int, /, b: str = "x", *, c: object = None, d: object = print, **rest: Any) -> None:
        """An example."""

    assert signature_line("example", example) == "example(a, /, b='x', *, c=None, d=..., **rest)"


def test_the_api_page_gives_every_public_function_its_real_signature() -> None:
    problems = signature_problems(API, public_functions())
    assert not problems, "docs/api.md's signatures are not the code's:\n" + "\n".join(problems)


def test_the_signature_check_fails_on_a_removed_line_and_on_a_stale_signature() -> None:
    # Negative controls: the page without the line of record(), and with verify() as it was before
    # check_fingerprints.
    functions = public_functions()
    (record_line,) = [line for line in documented_signatures(API) if line.startswith("record(")]
    assert signature_problems(API.replace(record_line + "\n", ""), functions) == ["record: no line"]
    (verify_line,) = [line for line in documented_signatures(API) if line.startswith("verify(")]
    stale = API.replace(verify_line, "verify(model, tokenizer, trace, *, logits_processor=None, **tolerances)")
    (problem,) = signature_problems(stale, functions)
    assert problem.startswith("verify: the page says")
