"""Where a pytest run's time went, per test file, from its JUnit XML: `.ci/run` prints this after README's test command
(run under xdist, `--durations` names single tests; a file of many 2-second tests is found only by adding them up).

Usage: python .ci/time_per_file.py JUNIT_XML [TOP]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def per_file(junit: Path) -> list[tuple[str, float, int]]:
    """(file, seconds summed over its tests, tests), the slowest first. JUnit's classname is the dotted module path
    (plus a class name): its file is the longest dotted prefix that names one."""
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        name = "/".join(parts)
        for end in range(len(parts), 0, -1):
            if Path("/".join(parts[:end]) + ".py").is_file():
                name = "/".join(parts[:end]) + ".py"
                break
        seconds[name] += float(case.get("time", "0"))
        tests[name] += 1
    return sorted(((f, seconds[f], tests[f]) for f in seconds), key=lambda row: -row[1])


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    junit = Path(argv[1])
    if not junit.is_file():
        print(f"time_per_file: no JUnit XML at {junit}", file=sys.stderr)
        return 2
    rows = per_file(junit)
    top = int(argv[2]) if len(argv) == 3 else 25
    total = sum(s for _, s, _ in rows)
    print(f"Seconds per test file (summed over its tests, setup and teardown included: {total:.0f} s in all):")
    for name, spent, count in rows[:top]:
        print(f"{spent:8.1f} s {spent / total:6.1%} {count:5d} tests  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
