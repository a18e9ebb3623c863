"""`python -m benchmarks [--smoke] [--only NAME] [--out PATH] [--threads N]`."""

from benchmarks.run import exit_now, main

exit_now(main())
