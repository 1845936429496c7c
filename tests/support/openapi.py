"""Real answers against the OpenAPI document (stream_app/stream/openapi.json):
`assert_matches` validates a body with jsonschema against the schema the
document gives for that path and status; `checked` reads a worker and does so."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator

from stream_app.stream.openapi import document

DOC = document()


def response_schema(doc: dict[str, Any], path_template: str, status: int, method: str = "get") -> dict[str, Any]:
    """The JSON schema of the answer; fails if the document has no such answer."""
    operation = doc["paths"][path_template][method]
    responses = operation["responses"]
    assert str(status) in responses, f"{method.upper()} {path_template}: status {status} is not documented"
    response = responses[str(status)]
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rpartition("/")[2]]
    content = response.get("content", {})
    assert "application/json" in content, f"{method.upper()} {path_template} {status}: not a JSON answer"
    return content["application/json"]["schema"]


def assert_matches(doc: dict[str, Any], path_template: str, status: int, body: Any, method: str = "get") -> None:
    """The body is what the document says `path_template` answers with `status`."""
    # The components ride along in the root, so the schema's "#/components/..." refs resolve
    # (an unknown keyword to JSON Schema, but a place a $ref may point into).
    schema = {"components": doc["components"], "allOf": [response_schema(doc, path_template, status, method)]}
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(body), key=lambda error: list(error.absolute_path))
    assert not errors, f"{method.upper()} {path_template} {status}: " + "; ".join(
        f"at {'/'.join(map(str, error.absolute_path)) or 'the top'}: {error.message[:300]}" for error in errors[:5])


def template_for(doc: dict[str, Any], path: str) -> str:
    """The documented path that a request's path (query and all) falls under."""
    segments = urlsplit(path).path.split("/")
    for template in doc["paths"]:
        pattern = "/".join("[^/]+" if re.fullmatch(r"\{\w+\}", part) else re.escape(part)
                           for part in template.split("/"))
        if re.fullmatch(pattern, "/".join(segments)):
            return template
    raise AssertionError(f"{path}: no documented path")


def checked(worker: Any, path: str) -> tuple[int, Any]:
    """`worker.get(path)`, its body checked against the document."""
    status, body = worker.get(path)
    assert_matches(DOC, template_for(DOC, path), status, body)
    return status, body
