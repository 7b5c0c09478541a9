"""The CDK app that deploys jobsched: one stack holding the JobScheduler construct
(jobsched.cdk, in functions/jobsched/cdk/), and the deploy-time tools around it (the
preflight, the migration gate, the layer build)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
# The construct and the stack's checks read the function code itself (jobsched.cdk, the schema).
_FUNCTIONS = str(ROOT / "functions")
if _FUNCTIONS not in sys.path:
    sys.path.append(_FUNCTIONS)
