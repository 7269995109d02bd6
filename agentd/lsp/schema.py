"""Write `agentd/lsp/schema.json` from the models: `python -m agentd.lsp.schema`."""

from __future__ import annotations

import json
from pathlib import Path

from agentd.lsp.ext import json_schema

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def render() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
