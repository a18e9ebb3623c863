"""`genguard bisect NODEID`: the release that changed a snapshot test's verdict, one probe environment per release
(`pytest_genguard.bisection`; exit codes in `pytest_genguard.bisection.report`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_genguard.cli.inputs import CliError

if TYPE_CHECKING:
    from pytest_genguard.bisection.search import ProbeResult

__all__ = ["add_arguments", "bisect_command", "run"]


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    p.add_argument("nodeid", metavar="NODEID", help="the test, as pytest names it: tests/test_x.py::test_y")
    p.add_argument("--package", choices=("transformers", "torch"), default="transformers")
    p.add_argument("--good", metavar="VERSION", help="default: the version recorded in the test's snapshot")
    p.add_argument("--bad", metavar="VERSION", help="default: the version installed here")
    p.add_argument("--pre", action="store_true", help="probe pre-releases too")
    p.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR",
        help="local wheel folder for the probe environments (added to pip's find-links, which are always used)",
    )


def run(args: argparse.Namespace) -> int:
    """`genguard bisect` with parsed arguments."""
    return bisect_command(args.nodeid, args.package, args.good, args.bad, args.pre, args.find_links)
