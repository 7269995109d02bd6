"""`agentd.params.text_prompt`, the read of a text-only prompt without
pydantic: whatever it reads, validation and the handlers' `prompt_input`
read the same (session id and the core's input); anything it does not read
is left to validation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.acp import params as acp_params
from agentd.errors import InvalidParams
from agentd.lsp import ext as lsp_ext
from agentd.params import TextPrompt, prompt_input, text_prompt, validate_params

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.just("text"),
    st.just("\ud800"),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
text_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "text", "image", "txt"]), "text": json_values | st.text()},
    optional={"annotations": json_values, "_meta": json_values, "data": json_values},
)
prompts = st.one_of(
    st.lists(text_blocks, max_size=4), st.text(), json_values, st.lists(json_values, max_size=2)
)
params = st.one_of(
    st.fixed_dictionaries(
        {"sessionId": st.text(max_size=6) | json_values, "prompt": prompts},
        optional={"session_id": st.text(max_size=3), "extra": json_values},
    ),
    json_values,
)


def validated(wire: str, value: Any) -> TextPrompt | InvalidParams:
    """What validation and the prompt handler's `prompt_input` make of `value`."""
    method = "session/prompt" if wire == "acp" else "agent/prompt"
    model = acp_params.PromptParams if wire == "acp" else lsp_ext.PromptParams
    try:
        p: Any = validate_params(method, model, value)
        if isinstance(p.prompt, str):
            text = prompt_input(p.prompt, 1 << 20)
        else:
            text = prompt_input([b.model_dump(by_alias=True) for b in p.prompt], 1 << 20)
    except InvalidParams as exc:
        return exc
    return TextPrompt(p.session_id, text) if isinstance(text, str) else InvalidParams("images")


@settings(max_examples=400, deadline=None)
@given(params, st.sampled_from(["acp", "lsp"]))
def test_what_text_prompt_reads_validation_reads_the_same(value: Any, wire: str) -> None:
    read = text_prompt(value, blocks_only=wire == "acp")
    if read is not None:
        assert validated(wire, value) == read


def test_the_common_prompts_are_read() -> None:
    blocks = [{"type": "text", "text": "a", "annotations": {}}, {"type": "text", "text": "b"}]
    for wire in ("acp", "lsp"):
        value = {"sessionId": "s", "prompt": blocks}
        assert text_prompt(value, blocks_only=wire == "acp") == TextPrompt("s", "a\n\nb")
        assert validated(wire, value) == TextPrompt("s", "a\n\nb")
    assert text_prompt({"sessionId": "s", "prompt": "hi"}, blocks_only=False) == TextPrompt(
        "s", "hi"
    )
    assert text_prompt({"sessionId": "s", "prompt": "hi"}, blocks_only=True) is None
    # What validation must word: left to it.
    assert text_prompt({"sessionId": "s", "prompt": []}, blocks_only=True) is None
    assert text_prompt({"session_id": "s", "prompt": blocks}, blocks_only=True) is None
    image = {"type": "image", "data": "", "mimeType": "image/png"}
    assert text_prompt({"sessionId": "s", "prompt": [image]}, blocks_only=True) is None
