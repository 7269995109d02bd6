"""agentd: a coding-agent daemon that editors spawn over stdio."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
