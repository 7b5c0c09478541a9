"""The test suite's own rules: helpers come from tests/helpers.py, never from a conftest
(pytest imports conftest files itself; importing one again makes a second copy of it)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
CONFTEST_IMPORT = re.compile(r"^\s*from\s+(tests(\.\w+)*\.conftest|\.+conftest)\s+import", re.MULTILINE)


def test_no_test_imports_from_a_conftest():
    offenders = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if CONFTEST_IMPORT.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_rule_catches_both_spellings():
    assert CONFTEST_IMPORT.search("from tests.conftest import T0")
    assert CONFTEST_IMPORT.search("    from ..conftest import CALLER_AWS_ENVIRONMENT")
    assert not CONFTEST_IMPORT.search("from tests.helpers import T0")
