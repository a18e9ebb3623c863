"""pytest-genguard's performance budget, measured as ratios in one run: `python -m benchmarks` writes RESULTS.md."""
