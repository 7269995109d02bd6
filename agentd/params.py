"""What both front ends do with incoming params, in one place.

Both wires (LSP-framed and ACP) validate params with pydantic at the boundary
and answer -32602 naming each bad field; this is the one place that turns a
pydantic `ValidationError`, or a workspace path that cannot be used, into an
`agentd.errors.InvalidParams` with `data.fields = [{field, message}]`.
Each front end maps `InvalidParams` to its own error reply.

A handler declares its params model by annotating its `p` parameter;
`params_model` finds that model by name in the front end's models module.
The annotation is only a name at run time: the models (and pydantic) are
imported for type checking only, so that importing the handlers before
`initialize` is answered stays cheap. This module imports pydantic only
inside `validate_params` (called after the warm-up), for the same reason.
The models modules build their validators on demand (`defer_build`);
`build_models` is how the warm-up builds them ahead of use. A prompt of
text only is read without them (`text_prompt`), on the way of every prompt.
"""

from __future__ import annotations

import binascii
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

from agentd.errors import InvalidParams
from agentd.messages import ImagePart, TextPart

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


@dataclass(frozen=True, slots=True)
class TextPrompt:
    """A prompt's params that are a session id and text only, read without
    pydantic (`text_prompt`)."""

    session_id: str
    # The prompt as the core takes it: `prompt_input` of the blocks (their
    # texts joined as `prompt_text` joins them), or the string as given.
    text: str


def text_prompt(params: Any, *, blocks_only: bool) -> TextPrompt | None:
    """The params of a prompt of text only, read as validation and
    `prompt_input` read them, or None for anything else, which is validated
    as any params are (every -32602 as pydantic words it, naming its field).

    Text only: a `sessionId` string and a `prompt` that is a non-empty list
    of `{"type": "text", "text": <string>}` blocks (other keys ignored, as
    the models ignore them), or a string where the wire takes one (LSP's
    `agent/prompt`: `blocks_only` False). Exact types only (`type(x) is
    str`): the JSON decoder makes nothing else of a string. Lone surrogates
    pass, as they pass pydantic; the core replaces them. Pydantic's
    validation and the content blocks' dump and flattening took 0.1 ms of
    a prompt's way to the core once the daemon had idled."""
    if type(params) is not dict:
        return None
    session_id = params.get("sessionId")
    prompt = params.get("prompt")
    if type(session_id) is not str:
        return None
    if type(prompt) is str:
        return None if blocks_only else TextPrompt(session_id, prompt)
    if type(prompt) is not list or not prompt:
        return None
    texts: list[str] = []
    for block in prompt:
        if type(block) is not dict or block.get("type") != "text":
            return None
        text = block.get("text")
        if type(text) is not str:
            return None
        texts.append(text)
    return TextPrompt(session_id, texts[0] if len(texts) == 1 else "\n\n".join(texts))


def _invalid(method: str, fields: list[dict[str, str]]) -> InvalidParams:
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return InvalidParams(f"Invalid params for {method}: {summary}", {"fields": fields})


def validate_params(method: str, model: type[M], params: Any) -> M:
    from pydantic import ValidationError

    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _invalid(method, [{"field": "params", "message": "must be an object"}])
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in err["loc"]) or "params", "message": err["msg"]}
            for err in exc.errors()
        ]
        raise _invalid(method, fields) from None


@cache
def params_model(handler: Callable[..., Any], models: ModuleType) -> type[BaseModel]:
    """The model `handler`'s `p` is annotated with (`p: NewSessionParams`), from
    `models`: the first of a union (`p: PromptParams | TextPrompt`, a handler
    also given what `text_prompt` read)."""
    from pydantic import BaseModel

    annotation = inspect.get_annotations(handler).get("p")
    first = annotation.partition("|")[0].strip() if isinstance(annotation, str) else None
    name = first.rpartition(".")[2] if first else None
    model = getattr(models, name, None) if name else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(
            f"{handler.__qualname__}: `p` must be annotated with a model of {models.__name__}"
        )
    return model


def build_models(models: ModuleType, names: Iterable[str] | None = None) -> None:
    """Build the validators of the pydantic models defined in `models` (those
    in `names`, or all) that are not built yet. Called by the warm-up thread
    only for models no request can use meanwhile, so no model is built twice
    at once."""
    from pydantic import BaseModel

    wanted = None if names is None else set(names)
    for name, value in list(vars(models).items()):
        if wanted is not None and name not in wanted:
            continue
        if (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and value.__module__ == models.__name__
            and not value.__pydantic_complete__
        ):
            value.model_rebuild()


def workspace_path(value: str, field: str = "workspaceRoot") -> Path:
    """An absolute path (or file:// URI) of an existing directory, resolved."""

    def bad(why: str) -> InvalidParams:
        # The value is quoted short: it may be megabytes long.
        shown = repr(value) if len(value) <= 200 else repr(value[:200]) + "..."
        return InvalidParams(
            f"Invalid params: {field}: {why}: {shown}",
            {"fields": [{"field": field, "message": why}]},
        )

    if not value.isascii() and not _is_unicode(value):
        # A lone surrogate: how Python names a folder whose name is not
        # UTF-8 (surrogateescape), but no JSON an editor writes can mean
        # it, and the root is written to the transcript, the memory index
        # and the editor's updates, which stay valid UTF-8. Refused as LSP's
        # `agent/newSession` always refused it (pydantic reads no such str).
        raise bad("not valid Unicode (a lone surrogate)")
    try:
        if value.startswith("file:"):
            value = unquote(urlparse(value).path)
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise bad("must be an absolute path")
        if not path.is_dir():
            raise bad("not a directory")
        return path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        # A name too long, a NUL byte, a lone surrogate, a symlink loop: unusable.
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise bad(f"cannot be used ({why[:100]})") from None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# At most this many additional roots per session (ACP `additionalDirectories`):
# editors have a few; a list of thousands is a hostile client.
MAX_ADDITIONAL_ROOTS = 64
ADDITIONAL_ROOTS_FIELD = "additionalDirectories"


def additional_roots(
    values: list[str],
    root: Path | None,
    own_folders: Callable[[], Sequence[tuple[Path, str]]] = tuple,
) -> list[Path]:
    """ACP `additionalDirectories` (and the LSP field of the same name): each
    an absolute path or file:// URI of an existing directory, resolved as
    `workspace_path` resolves the root; one that is not is refused naming
    `additionalDirectories.N`. The workspace root itself (when known here;
    the session drops it otherwise) and repeats (after resolving) are
    dropped: they add nothing to where the tools may go. A folder of
    agentd's own (`$AGENTD_HOME`, a memory folder in it, the config folder)
    or one inside them is refused: tools reaching it would read and write
    the daemon's state (transcripts, locks, settings) as workspace files.
    The front ends pass what gives those folders as `own_folders`
    (`agentd.layout.agentd_folders`; called only for a list that is not
    empty, off a plain new session's path)."""
    if len(values) > MAX_ADDITIONAL_ROOTS:
        why = f"at most {MAX_ADDITIONAL_ROOTS} directories, not {len(values)}"
        raise InvalidParams.of(ADDITIONAL_ROOTS_FIELD, why)
    out: list[Path] = []
    own = own_folders() if values else ()
    for i, value in enumerate(values):
        field = f"{ADDITIONAL_ROOTS_FIELD}.{i}"
        path = workspace_path(value, field)
        for folder, name in own:
            if path == folder or folder in path.parents:
                why = f"{path} is agentd's own {name} ({folder}), not a workspace"
                raise InvalidParams.of(field, why)
        if path != root and path not in out:
            out.append(path)
    return out


def check_choice(value: str, allowed: list[str], field: str) -> str:
    """`value` if it is one of `allowed`, else `InvalidParams` naming `field`."""
    if value in allowed:
        return value
    message = f"{value!r} is not one of {', '.join(allowed)}"
    raise InvalidParams.of(field, message)


# The image formats both model APIs take (OpenAI `image_url`, Anthropic `image`).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def prompt_input(
    blocks: list[dict[str, Any]] | str, max_image_bytes: int
) -> str | list[TextPart | ImagePart]:
    """Prompt content blocks -> what the core takes: the text (flattened as by
    `prompt_text`), or, when there are images, text and images in order.
    An image of another format, not base64, or over `max_image_bytes` once
    decoded is refused (`InvalidParams` naming `prompt.N`)."""
    if isinstance(blocks, str) or not any(b.get("type") == "image" for b in blocks):
        return prompt_text(blocks)
    out: list[TextPart | ImagePart] = []
    pending: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        if block.get("type") != "image":
            pending.append(block)
            continue
        if pending:
            out.append(TextPart(prompt_text(pending)))
            pending = []
        out.append(_image(i, block, max_image_bytes))
    if pending:
        out.append(TextPart(prompt_text(pending)))
    return out


def _image(i: int, block: dict[str, Any], limit: int) -> ImagePart:
    mime = str(block.get("mimeType") or "")
    if mime not in IMAGE_TYPES:
        raise _bad_image(i, "mimeType", f"{mime or 'no type'}: use one of {', '.join(IMAGE_TYPES)}")
    data = block.get("data")
    if not isinstance(data, str) or not data:
        raise _bad_image(i, "data", "must be the image's bytes in base64")
    # Checked before decoding: a huge image is refused without the work.
    size = len(data) * 3 // 4 - data[-2:].count("=")
    if size > limit:
        raise _bad_image(
            i,
            "data",
            f"the image is {size / 1_048_576:.1f} MiB; the limit is "
            f"{limit / 1_048_576:.1f} MiB (limits.maxImageBytes)",
        )
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error:
        raise _bad_image(i, "data", "is not valid base64") from None
    return ImagePart(mime, data)


def _bad_image(i: int, key: str, message: str) -> InvalidParams:
    field = f"prompt.{i}.{key}"
    return InvalidParams.of(field, message)


def prompt_text(blocks: list[dict[str, Any]] | str) -> str:
    """Flatten prompt content blocks (text, resource links, embedded resources)."""
    if isinstance(blocks, str):
        return blocks
    out: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "resource_link":
            out.append(f"[{block.get('name') or block.get('uri')}]({block.get('uri')})")
        elif kind == "resource":
            res = block.get("resource") or {}
            uri = res.get("uri", "")
            text = res.get("text")
            if isinstance(text, str):
                out.append(f'<context uri="{uri}">\n{text}\n</context>')
            else:
                out.append(f"[{uri}]")
    return "\n\n".join(out)
