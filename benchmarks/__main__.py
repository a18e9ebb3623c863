"""`python -m benchmarks [--smoke] [--only NAME] [--out PATH]`."""

from benchmarks.run import main

raise SystemExit(main())
