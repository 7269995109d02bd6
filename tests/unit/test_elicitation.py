"""The checks of MCP elicitation without a daemon: which schemas and URLs a
server may send to the user, which answers of the editor reach the server."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.agent.elicitation import (
    ElicitationAnswer,
    ElicitationRequest,
    content_problem,
    read_answer,
    schema_problem,
    url_problem,
)
from tests.mcp.server import FORM, NESTED


def form(schema: dict[str, Any] = FORM) -> ElicitationRequest:
    return ElicitationRequest("c1", "srv", "form", "?", schema)


@pytest.mark.parametrize(
    "schema",
    [
        FORM,
        {"type": "object", "properties": {}},
        {"properties": {"a": {"type": "string", "oneOf": [{"const": "x", "title": "X"}]}}},
        {
            "type": "object",
            "properties": {
                "many": {
                    "type": "array",
                    "items": {
                        "anyOf": [{"const": "x", "title": "X"}, {"const": "y", "title": "Y"}]
                    },
                    "minItems": 1,
                }
            },
        },
    ],
)
def test_the_restricted_shapes_are_allowed(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (NESTED, "properties.where"),
        ([], "not an object"),
        ({"type": "array"}, "type is not object"),
        ({"properties": {"a": {"type": "null"}}}, "properties.a"),
        ({"properties": {"a": {"type": "array", "items": {"type": "integer"}}}}, "multi-select"),
        ({"properties": {"a": {"type": "string", "enum": [1, 2]}}}, "enum"),
        ({"properties": {"a": {"type": "integer", "minimum": "1"}}}, "minimum"),
        ({"properties": {"a": {"type": "integer", "maximum": 1.5}}}, "maximum"),
        ({"properties": {"a": {"type": "string", "minLength": -1}}}, "minLength"),
        ({"properties": {"a": {"type": "string", "oneOf": [{"const": "x"}]}}}, "oneOf"),
        ({"properties": {"a": {"type": "string", "format": 5}}}, "format"),
        ({"properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
        ({"properties": {str(i): {"type": "string"} for i in range(65)}}, "more than 64"),
        ({"properties": {"a": {"type": "string", "description": "x" * 70_000}}}, "too large"),
        ({"properties": {"a": {"type": "number", "maximum": float("inf")}}}, "plain JSON"),
    ],
)
def test_other_shapes_are_refused_saying_why(schema: Any, why: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,hi",
        "https:no-slashes",
        "https://example.com/a b",
        "https://example.com/\x07",
        "",
        None,
        "https://e.com/" + "x" * 9000,
    ],
)
def test_only_http_urls_are_shown(url: Any) -> None:
    assert url_problem(url) is not None


def test_a_schema_too_deep_to_serialize_is_refused() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    problem = schema_problem({"properties": {"a": {"type": "string", "description": deep}}})
    assert problem == "requestedSchema is not plain JSON"


def test_an_https_url_is_shown() -> None:
    assert url_problem("https://example.com/sign-in?state=1") is None
    assert url_problem("HTTP://localhost:8080/x") is None


@pytest.mark.parametrize(
    "content",
    [
        {"account": "work"},
        {"account": "personal", "rows": 10, "ratio": 0.5, "confirm": False, "tags": []},
        {"account": "work", "rows": 3.0},  # an integral float is an integer
        {"account": "work", "note": None},  # an optional field left empty
    ],
)
def test_content_matching_the_schema_passes(content: dict[str, Any]) -> None:
    assert content_problem(content, FORM) is None


@pytest.mark.parametrize(
    "content",
    [
        {"rows": 1},
        {"account": None},
        {"account": "other"},
        {"account": "work", "rows": 0},
        {"account": "work", "rows": 2.5},
        {"account": "work", "rows": False},
        {"account": "work", "ratio": float("nan")},
        {"account": "work", "confirm": "yes"},
        {"account": "work", "tags": ["a", 1]},
        {"account": "work", "tags": "a"},
        {"account": "work", "note": "x" * 21},
        {"account": "work", "unknown": 1},
        {"account": "work", "note": {"nested": "object"}},
        "work",
    ],
)
def test_content_not_matching_the_schema_is_refused(content: Any) -> None:
    assert content_problem(content, FORM) is not None


def test_read_answer_fails_closed() -> None:
    assert read_answer({"action": "cancel"}, form()) == ElicitationAnswer("cancel")
    assert read_answer({"action": "decline", "content": 5}, form()) == ElicitationAnswer("decline")
    accepted = read_answer({"action": "accept", "content": {"account": "work"}}, form())
    assert accepted == ElicitationAnswer("accept", {"account": "work"})
    bad_answers: list[Any] = [
        None,
        [],
        {"action": "ACCEPT"},
        {"action": "accept", "content": {"x": 1}},
    ]
    for bad in bad_answers:
        assert read_answer(bad, form()).action == "decline"
    url = ElicitationRequest("c1", "srv", "url", "?", url="https://e.com", elicitation_id="e")
    # In URL mode no content travels, whatever the editor sends.
    assert read_answer({"action": "accept", "content": {"pw": "x"}}, url).content is None
