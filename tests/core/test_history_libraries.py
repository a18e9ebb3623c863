"""A recorder history names the TRL and PEFT releases that trained it: a history that changed with a TRL upgrade says
so in its environment line, and a history written before these fields compares as it did."""

from __future__ import annotations

from collections.abc import Mapping

import trace_builder

from pytest_genguard.core.documents import compare_documents
from pytest_genguard.core.environments import environment_diff, same_environment
from pytest_genguard.core.history import Checkpoint, history_to_json
from pytest_genguard.core.jsontext import JSONScalar
from pytest_genguard.core.verdict import Verdict

ENVIRONMENT: Mapping[str, JSONScalar] = {
    "torch": "2.13.0+cpu",
    "transformers": "5.24.0",
    "device": "cpu",
    "device_type": "cpu",
    "dtype": "float32",
}


def _history(environment: Mapping[str, JSONScalar], logprob: float = -0.5) -> str:
    step = trace_builder.step([(3, logprob), (9, -2.0)], text="t3")
    trace = trace_builder.trace([step], prompts=["hi"], environment=environment)
    return history_to_json([Checkpoint(step=2, epoch=0.5, loss=3.5, event="step", trace=trace)])


def test_a_history_that_changed_with_a_trl_upgrade_names_trl_in_its_environment_line() -> None:
    old = _history({**ENVIRONMENT, "trl": "0.24.0", "peft": "0.17.1"})
    new = _history({**ENVIRONMENT, "trl": "0.25.0", "peft": "0.17.1"}, logprob=-0.9)
    outcome = compare_documents(new, old)
    assert outcome.verdict is Verdict.REGRESSION
    assert "recorded on trl 0.24.0, now trl 0.25.0" in outcome.detail.splitlines()
    assert "  trl: '0.24.0' -> '0.25.0'" in outcome.detail.splitlines()
    assert "peft" not in outcome.detail  # the same release on both sides


def test_a_peft_upgrade_is_named_after_the_libraries_before_it() -> None:
    old = _history({**ENVIRONMENT, "torch": "2.12.0+cpu", "peft": "0.17.1"})
    new = _history({**ENVIRONMENT, "peft": "0.18.0"}, logprob=-0.9)
    assert "recorded on torch 2.12.0+cpu / peft 0.17.1, now torch 2.13.0+cpu / peft 0.18.0" in (
        compare_documents(new, old).detail.splitlines()
    )


def test_a_history_written_before_the_library_fields_compares_as_before() -> None:
    old, new = dict(ENVIRONMENT), {**ENVIRONMENT, "trl": "0.25.0", "peft": "0.18.0"}
    assert environment_diff(old, new) == () and environment_diff(new, old) == ()
    assert same_environment(old, new)  # so the two histories are held to the bitwise rule, as before
    outcome = compare_documents(_history(new), _history(old))
    assert outcome.verdict is Verdict.IDENTICAL
    assert "same environment" in outcome.detail and "trl" not in outcome.detail
