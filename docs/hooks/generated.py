"""MkDocs hook: the reference pages' generated parts, made from the code at build time.

A page holds a marker comment such as `<!-- generated: openapi -->` where the generated text
goes. Each generator reads the code itself (the OpenAPI document the API serves, the CLI's
argparse parser, the settings model, the run lifecycle's transition table), so the site cannot
drift from it: `mkdocs build --strict` runs in `make test`. An unknown marker fails the build."""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for entry in (ROOT / "functions", ROOT):  # this checkout's code, not an installed copy
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

MARKER = re.compile(r"<!-- generated: ([\w-]+) -->")


def openapi_document() -> dict[str, Any]:
    """The document `GET /openapi.json` serves (the API handler's own resolver)."""
    from jobsched.handlers.api import app

    return dict(json.loads(app.get_openapi_json_schema()))


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#schema-{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    return f"`{schema.get('type', 'any')}`"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def openapi_markdown() -> str:
    document = openapi_document()
    lines = [
        f"OpenAPI {document.get('openapi', '')}, *{document['info']['title']}* version "
        f"{document['info']['version']}: {len(document['paths'])} paths. Local mode serves the same "
        "document at `/openapi.json` and Swagger UI at `/docs` (both need a key).",
        "",
    ]
    for path in sorted(document["paths"]):
        for method, operation in document["paths"][path].items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            lines += [f"### `{method.upper()} {path}`", ""]
            if operation.get("summary") and operation["summary"] != f"{method.upper()} {path}":
                lines += [_cell(operation["summary"]), ""]
            if operation.get("description"):
                lines += [operation["description"].strip(), ""]
            params = operation.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | schema | description |", "| --- " * 5 + "|"]
                for p in params:
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                        f"{_schema_name(p.get('schema', {}))} | {_cell(p.get('description', ''))} |"
                    )
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, spec in body.items():
                lines += [f"Request body (`{media}`): {_schema_name(spec.get('schema', {}))}", ""]
            responses = operation.get("responses", {})
            if responses:
                lines += ["| status | description | body |", "| --- | --- | --- |"]
                for status, answer in sorted(responses.items()):
                    content = answer.get("content", {})
                    shapes = ", ".join(_schema_name(c.get("schema", {})) for c in content.values())
                    lines.append(f"| {status} | {_cell(answer.get('description', ''))} | {shapes} |")
                lines.append("")
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
    for name in sorted(schemas):
        schema = schemas[name]
        lines += [f'<a id="schema-{name.lower()}"></a>', "", f"### `{name}`", ""]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
            for field, spec in properties.items():
                lines.append(
                    f"| `{field}` | {_schema_name(spec)} | {'yes' if field in required else 'no'} | "
                    f"{_cell(spec.get('description', spec.get('title', '')))} |"
                )
            lines.append("")
        elif "enum" in schema:
            lines += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return "\n".join(lines)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((name, sub))
    return found


def cli_markdown() -> str:
    """Every command's `--help`, as the CLI prints it, walked from the parser."""
    from jobsched_cli.args import build_parser

    lines: list[str] = []

    def walk(parser: argparse.ArgumentParser, depth: int) -> None:
        lines.extend([f"{'#' * min(depth, 4)} `{parser.prog}`", "", "```text", parser.format_help().rstrip()])
        lines.extend(["```", ""])
        for _name, sub in _subcommands(parser):
            walk(sub, depth + 1)

    parser = build_parser()
    parser.prog = "jobsched"
    walk(parser, 2)
    return "\n".join(lines)


def _field_comments() -> dict[str, str]:
    """Each settings field's comments in settings.py: the lines above it and on its line."""
    import jobsched.settings as module

    source = Path(module.__file__).read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(source))
    comments: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    above: list[str] = []
                    line = item.lineno - 2
                    while line >= 0 and source[line].strip().startswith("#"):
                        above.insert(0, source[line].strip().lstrip("# "))
                        line -= 1
                    trailing = [
                        source[i].split("  # ", 1)[1]
                        for i in range(item.lineno - 1, item.end_lineno or item.lineno)
                        if "  # " in source[i]
                    ]
                    comments[item.target.id] = " ".join(above + trailing)
    return comments


RULE_WORDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}


def settings_markdown() -> str:
    """The runtime settings model: variable, type, default, rules, and what it is for."""
    from jobsched.settings import Settings

    comments = _field_comments()
    lines = [
        "| variable | type | default | rules | what it is |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        variable = f"`{field.alias}`" if field.alias else f"({name}: from `<KEY>_QUEUE_URL`/`<KEY>_DLQ_URL`)"
        default = field.get_default(call_default_factory=True)
        shown = "—" if default in (None, (), {}) else f"`{json.dumps(default, default=str)}`"
        if hasattr(default, "model_dump"):
            shown = "nothing granted"
        rules = []
        for rule in field.metadata:
            for key, shown_as in RULE_WORDS.items():
                if getattr(rule, key, None) is not None:
                    rules.append(f"{shown_as} {getattr(rule, key)}")
        annotation = getattr(field.annotation, "__name__", str(field.annotation))
        annotation = annotation.replace("typing.", "")
        what = _cell(comments.get(name, ""))
        lines.append(f"| {variable} | `{_cell(annotation)}` | {shown} | {', '.join(rules)} | {what} |")
    return "\n".join(lines)


def lifecycle_markdown() -> str:
    """The run lifecycle's state diagram and table, from domain.transitions.TRANSITIONS."""
    from jobsched.domain.runs import TERMINAL_STATES
    from jobsched.domain.transitions import TRANSITIONS

    edges: dict[tuple[str, str], list[str]] = {}
    for rule in TRANSITIONS.values():
        for source in sorted(rule.sources):
            for target in sorted(rule.targets):
                if source != target:
                    edges.setdefault((source.value, target.value), []).append(rule.name)
    lines = ["```mermaid", "stateDiagram-v2", "    [*] --> PENDING: sweeper, trigger, backfill"]
    for (start, end), names in sorted(edges.items()):
        lines.append(f"    {start} --> {end}: {', '.join(names)}")
    for state in sorted(TERMINAL_STATES):
        lines.append(f"    {state.value} --> [*]")
    lines += ["```", "", "| transition | from | to | written by | guard |", "| --- | --- | --- | --- | --- |"]
    for rule in TRANSITIONS.values():
        sources = ", ".join(sorted(s.value for s in rule.sources))
        targets = ", ".join(sorted(s.value for s in rule.targets)) or "(keeps its state)"
        lines.append(f"| `{rule.name}` | {sources} | {targets} | {rule.writer.value} | {_cell(rule.guard)} |")
    return "\n".join(lines)


def events_markdown() -> str:
    """The event types (domain.events.EventType, with what each level publishes) and the
    CloudEvent's JSON Schema, from the pydantic model every published event is built with."""
    from jobsched.domain.events import CloudEvent, EventType, RunEventsLevel, published

    source = Path(ROOT / "functions/jobsched/domain/events.py").read_text()
    notes = dict(re.findall(r'^\s+\w+ = "(jobsched\.[\w.]+)"\s+#\s*(.+)$', source, re.M))
    lines = ["| type | published at | what happened |", "| --- | --- | --- |"]
    for event_type in EventType:
        levels = ", ".join(f"`{lv.value}`" for lv in RunEventsLevel if published(lv, event_type))
        lines.append(f"| `{event_type.value}` | {levels} | {_cell(notes.get(event_type.value, ''))} |")
    schema = json.dumps(CloudEvent.model_json_schema(by_alias=True), indent=2)
    return "\n".join(
        [*lines, "", "The JSON Schema of every event (`detail` on the bus):", "", "```json", schema, "```"]
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "openapi": openapi_markdown,
    "events": events_markdown,
    "cli": cli_markdown,
    "settings": settings_markdown,
    "lifecycle": lifecycle_markdown,
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            known = sorted(GENERATORS)
            raise ValueError(f"{page.file.src_path}: no generator named {name!r} (known: {known})")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)
