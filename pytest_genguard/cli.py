"""The `genguard` console script: look at a trace, compare two traces, render a snapshots folder as HTML, bisect the
release that changed a snapshot test (`genguard bisect`, exit codes in `pytest_genguard.bisection.report`), judge a
running server against snapshots (`genguard check-server`, exit codes in `pytest_genguard.serving.check`).

`genguard fidelity` says how far a candidate trace is from a reference trace (the KLD lower bound of
`pytest_genguard.core.fidelity`) and judges it by a budget.

Exit codes: 0 when the command did its job (for `diff`: the comparison holds; for `fidelity`: within the budget),
1 when `diff` finds a regression or a stale trace (`fidelity`: outside the budget), 2 for bad input (a missing or
unreadable file, a corrupt trace, wrong arguments). Never a traceback for bad input: the message names the file and
what to do. Torch-free: reading traces needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pytest_genguard.core.budget import parse_budget, traces_report
from pytest_genguard.core.compare import compare
from pytest_genguard.core.documents import compare_documents, parse_document
from pytest_genguard.core.errors import TraceFormatError
from pytest_genguard.core.fidelity import trace_fidelity
from pytest_genguard.core.files import atomic_write_text
from pytest_genguard.core.history import RecorderHistory
from pytest_genguard.core.html import TraceFile, render_trace_files
from pytest_genguard.core.text import clean, display_token, quote
from pytest_genguard.core.tolerances import Overrides, dtype_default
from pytest_genguard.core.trace import GenerationTrace
from pytest_genguard.engines import gguf_check

if TYPE_CHECKING:
    from rich.console import Console

    from pytest_genguard.bisection.search import ProbeResult

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# Folders never searched for traces (version control, caches, virtual environments).
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv", "node_modules"})
_MAX_TRACE_BYTES = 256 * 1024 * 1024


class CliError(Exception):
    """Bad input: printed as `genguard: <message>` with exit code 2, never as a traceback."""


def _read_text(path: Path) -> str:
    if not path.exists():
        raise CliError(f"{path}: no such file")
    if path.is_dir():
        raise CliError(f"{path}: is a folder, not a trace file (for a folder of snapshots use: genguard report DIR)")
    try:
        size = path.stat().st_size
        if size > _MAX_TRACE_BYTES:
            raise CliError(f"{path}: {size} bytes is too large to be a trace file")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{path}: not UTF-8 text (byte {exc.start}); a trace file is JSON text written by pytest-genguard"
        ) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Document:
    """A trace file or a recorder history file (``recorder.history`` snapshots), read and parsed."""

    path: Path
    text: str
    traces: tuple[tuple[str, GenerationTrace], ...]
    """(label, trace) pairs: one unlabelled trace, or one per checkpoint of a history."""
    is_history: bool


def _checkpoint_label(index: int, step: int, event: str, loss: float | None) -> str:
    return f"checkpoint {index}: step {step}, {event}" + (f", loss {loss:.4g}" if loss is not None else "")


def load_document(path: Path) -> Document:
    """Read a trace or history file, turning every way it can be wrong into a `CliError` that names the file."""
    text = _read_text(path)
    try:
        document = parse_document(text, str(path))
    except TraceFormatError as exc:
        raise CliError(str(exc)) from None
    if isinstance(document, RecorderHistory):
        labelled = tuple((_checkpoint_label(i, c.step, c.event, c.loss), c.trace) for i, c in enumerate(document))
        return Document(path, text, labelled, is_history=True)
    return Document(path, text, (("", document),), is_history=False)


def load_trace(path: Path) -> GenerationTrace:
    """Read a trace file (not a history); bad input raises `CliError`."""
    doc = load_document(path)
    if doc.is_history:
        raise CliError(f"{path}: is a recorder history, not a single trace")
    return doc.traces[0][1]


def _console(stream: IO[str] | None = None) -> Console:
    """A rich console: colours only on a terminal and without NO_COLOR; wide tables when writing to a pipe."""
    from rich.console import Console

    out = stream if stream is not None else sys.stdout
    probe = Console(file=out)
    width = None if probe.is_terminal or os.environ.get("COLUMNS") else 160
    plain = bool(os.environ.get("NO_COLOR"))  # no colours and no bold/dim either: https://no-color.org
    return Console(file=out, width=width, highlight=False, soft_wrap=False, color_system=None if plain else "auto")


def _fmt(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


def _print_trace(
    console: Console,
    trace: GenerationTrace,
    prompt: int | None,
    top: int | None,
    klds: dict[tuple[int, int], float] | None = None,
) -> int:
    """Metadata lines and one table per prompt (with `klds`, each step's KLD lower bound to a reference); returns how
    many fragile steps were flagged."""
    from rich.table import Table  # rich only where the tables are drawn: `genguard diff` does without it
    from rich.text import Text

    tolerances = dtype_default(trace.dtype)
    tie_tol = tolerances.tie_tol
    meta = [("model", f"{trace.model.short()} ({trace.model.dtype})" if trace.model else "(not recorded)")]
    if trace.tokenizer is not None:
        meta.append(("tokenizer", f"{trace.tokenizer.name} {trace.tokenizer.hash[:12]}"))
    meta.append(("settings", ", ".join(f"{k}={v}" for k, v in sorted(trace.settings.items()) if v is not None)))
    meta.append(("environment", ", ".join(f"{k}={v}" for k, v in sorted(trace.environment.items()))))
    for key, value in meta:
        console.print(Text.assemble((f"{key}: ", "dim"), clean(value)))
    fragile_total = 0
    for i, p in enumerate(trace.prompts):
        if prompt is not None and i != prompt:
            continue
        vocab = {**trace.token_texts, **{s.token_id: s.token for s in p.steps}}  # and the stored alternatives
        title = f"prompt {i}: {quote(p.prompt, 60)}  ({len(p.steps)} steps, finish {p.finish_reason})"
        if p.messages is not None:
            title = "\n".join([title, *(f"  {line}" for line in p.conversation_lines())])
        table = Table(title=Text(title), title_justify="left")
        for name in ("step", "id", "token", "logprob", "p", "margin", *(("KLD ≥",) if klds is not None else ())):
            table.add_column(name, justify="left" if name == "token" else "right")
        table.add_column("top-k (token p)", overflow="fold")
        for s, step in enumerate(p.steps):
            fragile = tolerances.near_tie(step.margin)
            fragile_total += fragile
            alts = Text()
            for rank, (tid, lp) in enumerate(zip(step.top_ids, step.top_logprobs, strict=False)):
                if top is not None and rank >= top:
                    break
                text = vocab.get(tid, trace.token_text(tid))  # another prompt may have chosen it
                label = display_token(text) if text is not None else f"#{tid}"
                alts.append(f"{label} {_percent(lp)}", style="bold" if tid == step.token_id else "")
                alts.append("  ")
            margin = Text(_fmt(step.margin, 3) + (" *" if fragile else ""), style="bold red" if fragile else "")
            token = Text(display_token(step.token), style="cyan")
            kld = () if klds is None else (_fmt(klds[(i, s)], 3) if (i, s) in klds else "–",)
            table.add_row(
                str(s), str(step.token_id), token, _fmt(step.logprob), _percent(step.logprob), margin, *kld, alts
            )
        console.print(table)
    if fragile_total:
        note = (
            f"* {fragile_total} fragile steps: top-1/top-2 margin within the tie tolerance {tie_tol:g} "
            "(a tiny numeric change can flip these tokens)"
        )
        console.print(Text(note, style="red"))
    return fragile_total


def _percent(logprob: float) -> str:
    return f"{100 * math.exp(min(logprob, 0.0)):.1f}%" if not math.isnan(logprob) else "nan"


def show(
    path: Path,
    *,
    prompt: int | None = None,
    top: int | None = None,
    reference: Path | None = None,
    stream: IO[str] | None = None,
) -> int:
    """Print a trace (or each checkpoint of a history) as tables: tokens, logprobs, margins and the top-k; with a
    `reference` trace, each step's KLD to it (the lower bound of `genguard fidelity`; "–" after the paths part)."""
    from rich.text import Text

    doc = load_document(path)
    klds = None
    if reference is not None:
        if doc.is_history:
            raise CliError(f"--reference: {path} is a recorder history; the KLD column compares single traces")
        base, trace = load_trace(reference), doc.traces[0][1]
        compared, _ = trace_fidelity(base, trace)
        index = {p.prompt: i for i, p in enumerate(trace.prompts)}  # prompts are matched by text
        klds = {(index[base.prompts[s.prompt].prompt], s.step): s.kld for s in compared}
    if prompt is not None:
        count = min((len(t.prompts) for _, t in doc.traces), default=0)
        if not 0 <= prompt < count:
            raise CliError(f"--prompt {prompt}: {path} has {count} prompts (0 to {count - 1})")
    console = _console(stream)
    console.print(Text(str(path), style="bold"))
    for label, trace in doc.traces:
        if label:
            console.print(Text(label, style="bold"))
        _print_trace(console, trace, prompt, top, klds)
    return EXIT_OK


def diff(
    expected_path: Path,
    actual_path: Path,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    tie_tol: float | None = None,
    check_fingerprints: bool = True,
    stream: IO[str] | None = None,
) -> int:
    """Compare two trace (or history) files with the rule the tests use; print the pytest failure text."""
    overrides = Overrides(atol=atol, rtol=rtol, tie_tol=tie_tol)
    expected = load_document(expected_path)
    actual = load_document(actual_path)
    if expected.is_history != actual.is_history:
        kinds = {True: "a recorder history", False: "a trace"}
        raise CliError(
            f"{expected_path} is {kinds[expected.is_history]} but {actual_path} is {kinds[actual.is_history]}; "
            "compare files of the same kind"
        )
    try:
        if expected.is_history:
            outcome = compare_documents(actual.text, expected.text, overrides=overrides, source=str(expected_path))
            ok, text = outcome.ok, outcome.detail
        else:
            comparison = compare(
                expected.traces[0][1], actual.traces[0][1], check_fingerprints=check_fingerprints, **overrides.args()
            )
            ok, text = comparison.ok, str(comparison)
    except ValueError as exc:  # a tolerance compare() rejects
        raise CliError(str(exc)) from None
    out = stream if stream is not None else sys.stdout
    out.write(f"{expected_path} -> {actual_path}\n{text}\n")
    return EXIT_OK if ok else EXIT_FAILED


def fidelity(
    reference_path: Path, candidate_path: Path, *, budget: str | None, as_json: bool, stream: IO[str] | None = None
) -> int:
    """How far a candidate trace is from a reference trace (lower bounds: the files hold top-k only); exit 0 within
    the budget (or without one), 1 outside it."""
    try:
        limits = None if budget is None else parse_budget(budget)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    reference = load_trace(reference_path)
    candidate = load_trace(candidate_path)
    report = traces_report(reference, candidate, limits)
    if not report.steps:
        raise CliError(
            f"{candidate_path}: shares no prompt with {reference_path}; record the candidate on the reference's prompts"
        )
    out = stream if stream is not None else sys.stdout
    if as_json:
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        out.write(f"{reference_path} -> {candidate_path}\n{report}\n")
    return EXIT_OK if report.holds else EXIT_FAILED


def find_trace_files(folder: Path) -> list[Path]:
    """Files under `folder` that look like traces (JSON objects with a "schema" key), sorted; hidden folders skipped."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            try:
                with path.open("rb") as fh:
                    head = fh.read(64)
            except OSError:
                continue
            if head.lstrip().startswith(b"{") and (b'"schema"' in head or b'"genguard_history"' in head):
                found.append(path)
    return found


def report(folder: Path, output: Path, *, stream: IO[str] | None = None) -> int:
    """Render every trace file under `folder` into one HTML file; unreadable traces are listed and fail the command."""

    if not folder.exists():
        raise CliError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise CliError(f"{folder}: not a folder (to look at one trace file use: genguard show {folder})")
    paths = find_trace_files(folder)
    if not paths:
        raise CliError(
            f"{folder}: no trace files found (trace files are JSON written by pytest-genguard, in __snapshots__ "
            "folders after pytest --snapshot-update)"
        )
    entries = []
    for path in paths:
        shown = str(path.relative_to(folder))
        try:
            entries.append(TraceFile(shown, traces=load_document(path).traces))
        except CliError as exc:
            entries.append(TraceFile(shown, error=str(exc)))
    try:
        atomic_write_text(output, render_trace_files(entries, root=str(folder)))
    except OSError as exc:
        raise CliError(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    out = stream if stream is not None else sys.stdout
    bad = [e for e in entries if e.error is not None]
    out.write(f"wrote {output}: {len(entries) - len(bad)} traces from {folder}\n")
    for entry in bad:
        sys.stderr.write(f"genguard: unreadable trace: {entry.error}\n")
    return EXIT_USAGE if bad else EXIT_OK


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (write e.g. 1e-5)") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def bisect_command(
    nodeid: str, package: str, good: str | None, bad: str | None, pre: bool, find_links: Sequence[str]
) -> int:
    """`genguard bisect`: progress per probe, then the finding; exit codes in `bisection.report.EXIT_CODES`."""
    # Imported here: bisect needs filelock, platformdirs and packaging, which `genguard show` (the core alone) does not.
    from pytest_genguard.bisection.driver import BisectError, bisect
    from pytest_genguard.bisection.environments import InstallError
    from pytest_genguard.bisection.releases import ReleaseError
    from pytest_genguard.bisection.report import EXIT_CODES, print_finding, progress_line

    def progress(probe: ProbeResult) -> None:
        sys.stdout.write(progress_line(package, probe) + "\n")
        sys.stdout.flush()

    sys.stdout.write(f"genguard bisect {nodeid}: {package} releases, the test replayed in one environment each\n")
    sys.stdout.flush()
    try:
        result = bisect(nodeid, package=package, good=good, bad=bad, pre=pre, find_links=find_links, on_probe=progress)
    except (BisectError, ReleaseError, InstallError) as exc:
        raise CliError(str(exc)) from None
    print_finding(result, sys.stdout)
    return EXIT_CODES[result.outcome]


def check_server_command(
    url: str, paths: Sequence[Path], *, model: str | None, dtype: str | None, timeout: float
) -> int:
    """`genguard check-server`: every trace snapshot in `paths` (files, or folders searched for them) judged against
    the server at `url`; exit codes in `pytest_genguard.serving.check`. Needs neither torch nor transformers."""
    from pytest_genguard.core.errors import ServerError  # the HTTP side loads for this command only
    from pytest_genguard.serving.check import check_traces
    from pytest_genguard.serving.http import Endpoint

    traces: list[tuple[str, GenerationTrace]] = []
    for path in paths:
        files = find_trace_files(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise CliError(f"{path}: no trace files found (snapshots are .genguard files under __snapshots__)")
        for file in files:
            doc = load_document(file)
            if doc.is_history:
                raise CliError(f"{file}: a recorder history; check-server judges trace snapshots")
            traces.append((str(file), doc.traces[0][1]))
    try:
        return check_traces(Endpoint.from_env(url, timeout=timeout), traces, model=model, dtype=dtype, out=sys.stdout)
    except (ServerError, ValueError) as exc:
        raise CliError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="genguard", description="Look at and compare pytest-genguard trace files (snapshots, references)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p_show = sub.add_parser("show", help="print a trace as a table: tokens, top-k, margins")
    p_show.add_argument("file", type=Path, metavar="FILE")
    p_show.add_argument("--prompt", type=int, default=None, metavar="N", help="show only prompt N (0-based)")
    p_show.add_argument("--top", type=int, default=None, metavar="K", help="show at most K alternatives per step")
    p_show.add_argument(
        "--reference", type=Path, default=None, metavar="REF", help="add each step's KLD (lower bound) to trace REF"
    )
    p_diff = sub.add_parser("diff", help="compare two traces (exit 0 when they agree, 1 when not)")
    p_diff.add_argument("expected", type=Path, metavar="EXPECTED")
    p_diff.add_argument("actual", type=Path, metavar="ACTUAL")
    p_diff.add_argument("--atol", type=_tolerance, default=None, help="absolute tolerance (default: by dtype)")
    p_diff.add_argument("--rtol", type=_tolerance, default=None, help="relative tolerance (default: by dtype)")
    p_diff.add_argument("--tie-tol", type=_tolerance, default=None, help="near-tie gap (default: by dtype)")
    p_diff.add_argument(
        "--ignore-fingerprints", action="store_true", help="compare traces of two different models on purpose"
    )
    p_fid = sub.add_parser(
        "fidelity", help="how far a candidate trace is from a reference (KLD lower bound; exit 1 outside --budget)"
    )
    p_fid.add_argument("reference", type=Path, metavar="REFERENCE")
    p_fid.add_argument("candidate", type=Path, metavar="CANDIDATE")
    p_fid.add_argument(
        "--budget", default=None, metavar="PRESET|KEY=VALUE,...", help="bf16, fp16, int8, int4 or limits"
    )
    p_fid.add_argument("--json", action="store_true", help="print the report as JSON")
    p_bisect = sub.add_parser(
        "bisect",
        help="name the release that changed a snapshot test's verdict (exit 0 found, 1 no change, 3 inconclusive)",
    )
    p_bisect.add_argument("nodeid", metavar="NODEID", help="the test, as pytest names it: tests/test_x.py::test_y")
    p_bisect.add_argument("--package", choices=("transformers", "torch"), default="transformers")
    p_bisect.add_argument("--good", metavar="VERSION", help="default: the version recorded in the test's snapshot")
    p_bisect.add_argument("--bad", metavar="VERSION", help="default: the version installed here")
    p_bisect.add_argument("--pre", action="store_true", help="probe pre-releases too")
    p_bisect.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR",
        help="local wheel folder for the probe environments (added to pip's find-links, which are always used)",
    )
    p_check = sub.add_parser(
        "check-server",
        help="judge a running server (vLLM) against snapshots (exit 0 hold, 1 regression, 2 bad input, 3 stale)",
    )
    p_check.add_argument("url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p_check.add_argument("paths", type=Path, nargs="+", metavar="SNAPSHOT", help="a .genguard file or a folder of them")
    p_check.add_argument("--model", default=None, help="the served model's name (default: the one it serves)")
    p_check.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "float16", "bfloat16"),
        help="the dtype the server computes in, when it does not report it (default: inferred from the logprobs)",
    )
    p_check.add_argument("--timeout", type=_tolerance, default=120.0, help="seconds per request (default: 120)")
    gguf_check.add_arguments(sub.add_parser("check-gguf", help=gguf_check.HELP))
    p_report = sub.add_parser("report", help="render every trace under a folder into one HTML file")
    p_report.add_argument("folder", type=Path, metavar="DIR")
    p_report.add_argument(
        "-o", "--output", type=Path, default=Path("genguard-report.html"), help="HTML file (default: %(default)s)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genguard` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "show":
            if args.top is not None and args.top < 1:
                raise CliError(f"--top {args.top}: must be at least 1")
            return show(args.file, prompt=args.prompt, top=args.top, reference=args.reference)
        if args.command == "diff":
            return diff(
                args.expected,
                args.actual,
                atol=args.atol,
                rtol=args.rtol,
                tie_tol=args.tie_tol,
                check_fingerprints=not args.ignore_fingerprints,
            )
        if args.command == "check-server":
            return check_server_command(args.url, args.paths, model=args.model, dtype=args.dtype, timeout=args.timeout)
        if args.command == "check-gguf":
            return gguf_check.run(args)
        if args.command == "fidelity":
            return fidelity(args.reference, args.candidate, budget=args.budget, as_json=args.json)
        if args.command == "bisect":
            return bisect_command(args.nodeid, args.package, args.good, args.bad, args.pre, args.find_links)
        return report(args.folder, args.output)
    except CliError as exc:
        sys.stderr.write(f"genguard {args.command}: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `genguard show big.json | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
