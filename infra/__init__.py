"""The CDK app that deploys jobsched: one stack composed of one construct per capability."""

import sys
from pathlib import Path

# The stack reads the schema and filter patterns from the function code itself.
_FUNCTIONS = str(Path(__file__).resolve().parent.parent / "functions")
if _FUNCTIONS not in sys.path:
    sys.path.append(_FUNCTIONS)
