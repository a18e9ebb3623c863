"""`genguard show FILE`: a trace (or each checkpoint of a history) as tables of tokens, logprobs, margins and the
top-k; with ``--reference``, each step's KLD lower bound to another trace. Rich is imported where tables are drawn."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pytest_genguard.cli.inputs import EXIT_OK, CliError, console as make_console, load_document, load_trace
from pytest_genguard.core.fidelity import trace_fidelity
from pytest_genguard.core.text import clean, display_token, quote
from pytest_genguard.core.tolerances import dtype_default
from pytest_genguard.core.trace import GenerationTrace

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["add_arguments", "run", "show"]


def _fmt(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


def _percent(logprob: float) -> str:
    return f"{100 * math.exp(min(logprob, 0.0)):.1f}%" if not math.isnan(logprob) else "nan"


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
        compared, _, _ = trace_fidelity(base, trace)
        index = {p.prompt: i for i, p in enumerate(trace.prompts)}  # prompts are matched by text
        klds = {(index[base.prompts[s.prompt].prompt], s.step): s.kld for s in compared}
    if prompt is not None:
        count = min((len(t.prompts) for _, t in doc.traces), default=0)
        if not 0 <= prompt < count:
            raise CliError(f"--prompt {prompt}: {path} has {count} prompts (0 to {count - 1})")
    console = make_console(stream)
    console.print(Text(str(path), style="bold"))
    for label, trace in doc.traces:
        if label:
            console.print(Text(label, style="bold"))
        _print_trace(console, trace, prompt, top, klds)
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--prompt", type=int, default=None, metavar="N", help="show only prompt N (0-based)")
    p.add_argument("--top", type=int, default=None, metavar="K", help="show at most K alternatives per step")
    p.add_argument(
        "--reference", type=Path, default=None, metavar="REF", help="add each step's KLD (lower bound) to trace REF"
    )


def run(args: argparse.Namespace) -> int:
    """`genguard show` with parsed arguments."""
    if args.top is not None and args.top < 1:
        raise CliError(f"--top {args.top}: must be at least 1")
    return show(args.file, prompt=args.prompt, top=args.top, reference=args.reference)
