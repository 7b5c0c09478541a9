"""The handler contract: `jobsched.handler` registers a function for a job type, what it
raises is classed retryable or permanent, and handler modules are imported from a search
path with one error naming a module that cannot be."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jobsched
import pytest
from jobsched.domain.errors import ExecutionError, PermanentError, RetryableError
from jobsched.targets import (
    HandlerModuleError,
    HandlerRegistry,
    Invocation,
    TargetRunner,
    import_handler_modules,
    registry,
)

SCHEDULED = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def invocation(job_type: str, payload: Any = None) -> Invocation:
    return Invocation(
        run_key=f"job-1@{SCHEDULED:%Y-%m-%dT%H:%M:%SZ}",
        job_id="job-1",
        tenant="acme",
        job_type=job_type,
        scheduled_for=SCHEDULED,
        attempt=2,
        payload=payload,
        timeout_seconds=30.0,
        fence=5,
        deadline=SCHEDULED + timedelta(seconds=30),
    )


def test_the_decorator_registers_the_function_unchanged_with_the_process_registry() -> None:
    job_type = f"invoice.send.{uuid.uuid4().hex[:8]}"

    @jobsched.handler(job_type)
    def send(payload: Any, call: Invocation) -> Any:
        return {"invoice": payload["invoice"], "key": call.run_key, "fence": call.fence}

    assert registry.get(job_type) is send
    assert TargetRunner(lambda service: None).run(None, invocation(job_type, {"invoice": 7})) == {
        "invoice": 7,
        "key": "job-1@2026-12-07T09:00:00Z",
        "fence": 5,
    }


def test_a_type_takes_one_handler_and_a_handler_must_be_callable() -> None:
    handlers = HandlerRegistry()
    handlers.add("a", lambda payload, call: None)
    with pytest.raises(ValueError, match="'a' is already registered"):
        handlers.add("a", lambda payload, call: None)
    with pytest.raises(ValueError, match="'b' is not callable"):
        handlers.add("b", "not a function")  # type: ignore[arg-type]
    assert handlers.types() == ["a"]


@pytest.mark.parametrize(
    ("raised", "retryable", "error_class"),
    [
        (RetryableError("503 from the bank", error_class="Bank503"), True, "Bank503"),
        (PermanentError("no such customer", error_class="NoCustomer"), False, "NoCustomer"),
        (KeyError("invoice"), True, "KeyError"),  # anything else: retryable, named by its class
    ],
)
def test_what_a_handler_raises_is_classed_retryable_or_permanent(
    raised: Exception, retryable: bool, error_class: str
) -> None:
    handlers = HandlerRegistry()

    @handlers.register("invoice.send")
    def send(payload: Any, call: Invocation) -> Any:
        raise raised

    with pytest.raises(ExecutionError) as failure:
        TargetRunner(lambda service: None, registry=handlers).run(None, invocation("invoice.send"))
    assert (failure.value.retryable, failure.value.error_class) == (retryable, error_class)


def test_a_type_without_a_handler_is_a_permanent_failure() -> None:
    with pytest.raises(PermanentError) as failure:
        TargetRunner(lambda service: None, registry=HandlerRegistry()).run(None, invocation("nobody.runs"))
    assert failure.value.error_class == "NoHandler"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def test_modules_are_imported_from_the_search_path_first(project: Path) -> None:
    package = f"jobs_{uuid.uuid4().hex[:8]}"
    (project / "src" / package).mkdir(parents=True)
    (project / "src" / package / "__init__.py").write_text("LOADED = True\n")
    import_handler_modules([package], [project / "src"])
    assert sys.modules[package].LOADED is True
    assert sys.path[0] == str((project / "src").resolve())


def test_a_module_not_found_names_it_and_where_it_was_looked_for(project: Path) -> None:
    with pytest.raises(HandlerModuleError) as failure:
        import_handler_modules(["jobsched.demo_handlers", "nosuch_jobs.handlers"], [project])
    assert failure.value.module == "nosuch_jobs.handlers" and failure.value.missing
    assert str(failure.value) == (
        "handler module 'nosuch_jobs.handlers' could not be imported: "
        f"no module named 'nosuch_jobs' in {project.resolve()}, the installed packages"
    )


def test_a_module_whose_import_fails_names_it_the_reason_and_the_line(project: Path) -> None:
    module = f"needs_{uuid.uuid4().hex[:8]}"
    (project / f"{module}.py").write_text("import jobsched\nimport nosuch_dependency\n")
    with pytest.raises(HandlerModuleError) as failure:
        import_handler_modules([module], [project])
    assert failure.value.module == module and not failure.value.missing
    source = (project / f"{module}.py").resolve()
    assert (
        failure.value.reason == f"ModuleNotFoundError: No module named 'nosuch_dependency' ({source}, line 2)"
    )
