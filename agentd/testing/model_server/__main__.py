"""`python -m agentd.testing.model_server`: the same as `agentd model-server`."""

import sys

from agentd.testing.model_server.cli import main

sys.exit(main())
