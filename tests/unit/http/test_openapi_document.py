"""``/openapi.json`` is a valid OpenAPI 3.1 document, and every operation says what it
answers (a schema for each success body, the binary content types where there are some)."""

from __future__ import annotations

from openapi_spec_validator import validate

from api.http.openapi import openapi_document


def test_the_document_is_valid_openapi_3_1() -> None:
    validate(openapi_document())  # type: ignore[arg-type]


def test_every_operation_has_a_response_schema_or_says_no_content() -> None:
    doc = openapi_document()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ok = {k: v for k, v in op["responses"].items() if k != "default"}
            assert ok, (method, path)
            for status, r in ok.items():
                if status == "204":
                    assert "content" not in r
                    continue
                assert r["content"], (method, path)
                assert all("schema" in m for m in r["content"].values()), (method, path)


def test_binary_and_streamed_content_types_are_listed() -> None:
    paths = openapi_document()["paths"]
    records = "/v3/clusters/{cluster_id}/topics/{topic}/records"
    read = "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/records"
    produce = paths[records]["post"]
    assert {"application/json", "application/x-ndjson", "application/msgpack"} <= set(
        produce["requestBody"]["content"]
    )
    assert "application/x-ndjson" in produce["responses"]["200"]["content"]
    assert {"application/json", "application/msgpack", "application/vnd.apache.arrow.stream"} <= (
        set(paths[read]["get"]["responses"]["200"]["content"])
    )
    assert set(paths["/openapi"]["get"]["responses"]["200"]["content"]) == {"text/html"}
