"""The HTTP API fuzzed from its own OpenAPI schema with schemathesis: generated requests
to every endpoint (bounded in number), checked for server errors (no 500) and for
responses that break the schema. The index is real (SQLite store, the bundled embedder,
the fake model at the provider boundary)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from isotope import Isotope

schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis")
pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")

from hypothesis import HealthCheck, settings  # noqa: E402

from isotope.server.app import create_app  # noqa: E402
from isotope.server.auth import Keys  # noqa: E402


@pytest.fixture
def api(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[Any]:
    iso.ingest(examples / "handbook.md")
    application = create_app(iso, keys=Keys(), roots=[examples.resolve()],
                             max_bytes=200_000, uploads=tmp_path / "uploads", mcp=False,
                             allowed_hosts=["testserver"])  # schemathesis' Host
    yield schemathesis.openapi.from_asgi("/openapi.json", application)


def test_no_server_errors_and_responses_match_the_schema(api: Any) -> None:
    from hypothesis import given
    from schemathesis.checks import (
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    operations = [result.ok() for result in api.get_all_operations()]
    assert {op.path for op in operations} >= {"/search", "/ask", "/sources", "/status"}
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def run(case: Any) -> None:
            case.call_and_validate(checks=[not_a_server_error, response_schema_conformance],
                                   excluded_checks=[status_code_conformance])

        run()



@pytest.mark.parametrize("name", ["~0", "~nobody-here/x.md"])
def test_a_source_named_after_an_unknown_user_is_not_a_server_error(
        iso: Isotope, examples: Path, tmp_path: Path, name: str) -> None:
    """``~0`` is a user's home only if that user exists: an unknown one is a name like any
    other (pathlib raised "Could not determine home directory", a 500; found by the fuzz)."""
    from starlette.testclient import TestClient

    iso.ingest(examples / "handbook.md")
    application = create_app(iso, keys=Keys(), roots=[examples.resolve()],
                             max_bytes=200_000, uploads=tmp_path / "uploads", mcp=False,
                             allowed_hosts=["testserver"])
    with TestClient(application) as client:
        found = client.delete(f"/sources/{name}")
    assert found.status_code == 404, found.text
