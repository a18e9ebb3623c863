"""``--genguard-server URL``: every snapshot assertion of the run also judges a running server against the stored
trace, without editing the tests (``assert trace == genguard_snapshot`` and ``genguard_snapshot.verify()`` alike).

After the test's own check holds, the stored snapshot's prompts are teacher forced through the server
(`pytest_genguard.serving`) and judged as the test judges in process: by the comparison rule under the test's
tolerances (its ``genguard`` marker on the ini options, `settings.tolerance_overrides`), or, under
``@pytest.mark.genguard(fidelity=...)``, by that budget (`fidelity_marker.marker_budget`), through the one gate of
`core.gate`: within (proven) passes; outside, and unproven (within on lower bounds only, which proves nothing: the
failure names how to prove it), fail the assertion. A regression, a budget broken, a stale server (another tokenizer)
or a server that cannot answer fails the assertion with the server's explanation. A sampled snapshot's sampler is
judged too (its distribution after truncation along the path; ``--genguard-server-align-sampler`` sends the fields
that align the server's sampler semantics), through the same gate: within passes, outside and unproven fail. The
outcome is a ``snapshot`` event with ``via: "server"``. Recorder histories are not judged (a server serves one model,
not a training run). The server is probed once per session (`_server`), shared by every assertion.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_genguard.core import events
from pytest_genguard.core.budget import Budget
from pytest_genguard.core.errors import ServerError
from pytest_genguard.core.events import CheckEvent
from pytest_genguard.core.gate import UNPROVEN, gate_line
from pytest_genguard.core.tolerances import Overrides
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.core.verdict import Status, Verdict
from pytest_genguard.plugin.settings import settings

__all__ = ["judge_stored"]

_SERVER = pytest.StashKey[Any]()
_CAP = pytest.StashKey[Any]()
"""The server's `serving.check.LogprobCap`, probed once per run (`_budget_logprobs`)."""


def _server(config: pytest.Config, url: str, model: str | None) -> Any:
    """The session's `serving.servers.Server` at `url`: probed at its first use, shared by every assertion (a
    failed probe is not kept: the next assertion says the same)."""
    from pytest_genguard.serving.http import Endpoint  # the HTTP side loads with the option only
    from pytest_genguard.serving.servers import connect

    server = config.stash.get(_SERVER, None)
    if server is None:
        server = connect(Endpoint.from_env(url), model=model)
        config.stash[_SERVER] = server
    return server


def _budget_logprobs(config: pytest.Config, server: Any, document: GenerationTrace) -> int | None:
    """`serving.check.budget_logprobs` for `document`: the server's cap probed once per run, asked per top-k."""
    from pytest_genguard.serving.check import logprob_cap
    from pytest_genguard.serving.record import top_k_of

    cap = config.stash.get(_CAP, None)
    if cap is None:
        cap = config.stash[_CAP] = logprob_cap(server, [document])
    return cap.asked(top_k_of(document))[0]


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
    """The failure lines when the server at ``--genguard-server`` does not hold the stored snapshot (`stored`, its
    text; `document`, its trace) (None: it holds, or there is no server option), judged under the test's `overrides`
    or by its fidelity `budget`."""
    current = settings(config)
    if current.server is None:
        return None
    from pytest_genguard.serving.check import ON_A_SERVER, judge, worst_share  # the HTTP side: with the option only

    server = f"--genguard-server {current.server}"
    try:
        connected = _server(config, current.server, current.server_model)
        # a budget asks for the server's cap of logprobs, as check-server does: a bound over the reference's whole
        # recorded top-k proves something; the snapshot's top-k alone leaves steps incomplete (unproven)
        logprobs = None if budget is None else _budget_logprobs(config, connected, document)
        judged = judge(
            connected.endpoint,
            document,
            label=source,
            model=current.server_model,
            server=connected,
            budget=budget,
            logprobs=logprobs,
            overrides=overrides,
            align_sampler=current.server_align_sampler,
        )
    except ServerError as exc:
        lines = [f"genguard snapshot {name!r} ({source}) could not be judged on the server ({server}):", str(exc)]
        _emit(Status.INVALID, lines, name, failure=True)
        return lines
    if judged.stale is not None or (judged.comparison is None and judged.sampler is None):
        lines = [f"genguard snapshot {name!r} ({source}) is stale on the server ({server}):", str(judged.stale)]
        _emit(Verdict.STALE, lines, name, failure=True)
        return lines
    sampler = judged.sampler
    if sampler is not None and (judged.comparison is None or sampler.status != "within"):
        return _sampler_outcome(judged.verdict, sampler.lines(), name, source, server, sampler.status)
    assert judged.comparison is not None
    comparison = judged.comparison
    if judged.report is not None:
        report = judged.report
        said = UNPROVEN if report.status == "unproven" else str(judged.verdict)
        head = f"genguard snapshot {name!r} ({source}) on the server ({server}): {said}"
        lines = [head, *str(report).splitlines(), f"  {gate_line(report, in_process=ON_A_SERVER)}"]
        if report.status == "within":
            _emit(judged.verdict, lines, name, failure=False)
            return None
        if report.status == "outside":
            lines.append(
                "  if the server is meant to be this far, loosen the budget (@pytest.mark.genguard(fidelity={...}))"
            )  # unproven: the gate line above names how to prove it (a bound that proves nothing is no pass)
        _emit(judged.verdict, lines, name, failure=True, expected=stored, actual=comparison.actual.to_json())
        return lines
    share, where = worst_share(comparison)
    head = f"genguard snapshot {name!r} ({source}) on the server ({server}): {comparison.verdict}"
    if comparison.ok:
        held = [f"{head}; worst drift {share:.2%} of the allowance ({where})", *(sampler.lines() if sampler else ())]
        _emit(comparison.verdict, held, name, failure=False)
        return None
    lines = [head, *str(comparison).splitlines()]
    if comparison.dtype_change is not None:
        lines.append(
            "  a server in another dtype is judged by a fidelity budget: mark the test "
            "@pytest.mark.genguard(fidelity='bf16') (or genguard check-server ... --budget bf16)"
        )
    _emit(comparison.verdict, lines, name, failure=True, expected=stored, actual=comparison.actual.to_json())
    return lines


def _sampler_outcome(
    verdict: Verdict, lines: list[str], name: str, source: str, server: str, status: str
) -> list[str] | None:
    """A sampled snapshot's sampler on the server (checked after its raw values held, or alone where the server
    cannot teacher force): within passes; outside (its cause, fix and what was sent) and unproven (a support the
    server did not show) fail the assertion, as the one gate does."""
    said = [f"genguard snapshot {name!r} ({source}) on the server ({server}): sampler {status}", *lines]
    _emit(verdict, said, name, failure=status != "within")
    return None if status == "within" else said


def _emit(verdict: Verdict | Status, lines: list[str], name: str, *, failure: bool, **fields: Any) -> None:
    events.emit(CheckEvent("snapshot", verdict, failure, lines[0], "\n".join(lines), name, via="server", **fields))
