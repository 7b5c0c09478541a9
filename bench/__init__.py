"""`make bench`: start lag, cost per run, sweep read amplification, hot-path CPU and a
capacity model for jobsched. Figures are reported, never asserted.

Run `python -m bench --help` for the options; results land in bench/results.json,
bench/report.md and bench/lag.png."""
