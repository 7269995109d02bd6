"""`python -m agentd.acp`: serve ACP over stdio (what `agentd serve --acp` runs)."""

from __future__ import annotations

import logging
import os
import sys

from agentd.acp.server import run_acp_stdio
from agentd.stdio import exit_on_stop_signals

if __name__ == "__main__":
    # stdout belongs to the protocol; everything human goes to stderr.
    logging.basicConfig(
        level=getattr(logging, os.environ.get("AGENTD_LOG_LEVEL", "warning").upper(), 30),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    exit_on_stop_signals()
    sys.exit(run_acp_stdio())
