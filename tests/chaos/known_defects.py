"""Must-be-0 figures the pipeline is known to fail in the chaos tests, each an open defect
(none today: every chaos test holds every figure to 0)."""

PIPELINE_DEFECTS: frozenset[str] = frozenset()
