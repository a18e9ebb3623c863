"""``--genguard-gguf FILE``: every snapshot assertion of the run also judges a GGUF file through llama.cpp against the
stored trace, without editing the tests (as ``--genguard-server`` judges a running server).

After the test's own check holds, the GGUF is checked against the stored snapshot beyond its logits (its tokenizer on
the snapshot's prompt texts and a built-in corpus, its embedded chat template on the snapshot's conversations, and
with ``--genguard-gguf-model`` its metadata: a mismatch is stale), then the snapshot's paths are teacher forced
through llama.cpp in process (`pytest_genguard.engines.gguf_check.GGUFJudge`) and judged: by the test's
``@pytest.mark.genguard(fidelity=...)`` budget, else as ``genguard check-gguf`` judges the file's type (an F32 file by
the comparison rule under the test's tolerances, a quantized one by its type's preset). The GGUF, its llama.cpp
context and its Hugging Face side are opened once per session. A budget goes through the one gate of `core.gate`:
within (proven) passes; outside, and unproven (within on the snapshot's top-k bounds only, which proves nothing),
fail the assertion, the latter naming how to prove it. With ``--genguard-gguf-model`` the figures are exact and the
long probe (a built-in text of 2,048 tokens, read once per session; ``--genguard-gguf-no-probe`` leaves it out) is
judged with every snapshot, band by band. With ``--genguard-gguf-baseline FILE`` every snapshot is judged against that
known-good GGUF instead (`core.baseline`: both files measured in the run against the same reference), whatever the
test's budget. The outcome is a ``snapshot`` event with ``via: "gguf"``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.budget import Budget
from pytest_genguard.core.errors import GenguardError
from pytest_genguard.core.events import CheckEvent
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Status, Verdict
from pytest_genguard.plugin.settings import settings

__all__ = ["judge_stored"]

_JUDGE = pytest.StashKey[Any]()


def _judge(config: pytest.Config) -> Any:
    """The session's `GGUFJudge` (opened at first use: it loads llama.cpp, torch and transformers)."""
    judge = config.stash.get(_JUDGE, None)
    if judge is None:
        from pytest_genguard.engines.gguf_check import GGUFJudge

        current = settings(config)
        assert current.gguf is not None
        judge = GGUFJudge.open(
            current.gguf,
            kv_cache=current.gguf_kv_cache,
            model_dir=current.gguf_model,
            probe=current.gguf_probe,
            baseline=current.gguf_baseline,
        )
        config.stash[_JUDGE] = judge
    return judge


def judge_stored(
    config: pytest.Config,
    stored: str,
    document: GenerationTrace,
    source: str,
    name: str,
    *,
    overrides: Overrides | None = None,
    budget: Budget | None = None,
) -> list[str] | None:
    """The failure lines when the GGUF of ``--genguard-gguf`` does not hold the stored snapshot (`stored`, its text;
    `document`, its trace) (None: it holds, or there is no such option), judged under the test's `overrides` or by
    its fidelity `budget`."""
    current = settings(config)
    if current.gguf is None:
        return None
    from pytest_genguard.engines.gguf_check import BadInput  # the torch side loads with the option only

    where = f"--genguard-gguf {current.gguf.name}"
    try:
        judge = _judge(config)
        mismatches = judge.mismatches([document])
        judged = None if mismatches else judge.judge(document, budget=budget, overrides=overrides)
    except (GenguardError, BadInput, ValueError, OSError) as exc:
        lines = [f"genguard snapshot {name!r} ({source}) could not be judged on the GGUF ({where}):", str(exc)]
        _emit(Status.INVALID, lines, name, failure=True)
        return lines
    if judged is None:
        lines = [f"genguard snapshot {name!r} ({source}) is stale on the GGUF ({where}):"]
        lines += [f"  {mismatch}" for mismatch in mismatches]
        lines.append("  the GGUF is not the model the snapshot was recorded on: convert it again, or re-record")
        _emit(Verdict.STALE, lines, name, failure=True)
        return lines
    head = f"genguard snapshot {name!r} ({source}) on the GGUF ({where}): {judged.said()}, judged by {judged.how}"
    lines = [head, *str(judged).splitlines()]
    if judged.holds:
        _emit(judged.verdict, lines, name, failure=False)
        return None
    traces = {} if judged.candidate is None else {"expected": stored, "actual": judged.candidate.to_json()}
    _emit(judged.verdict, lines, name, failure=True, **traces)
    return lines


def _emit(verdict: Verdict | Status, lines: list[str], name: str, *, failure: bool, **fields: Any) -> None:
    events.emit(CheckEvent("snapshot", verdict, failure, lines[0], "\n".join(lines), name, via="gguf", **fields))
