"""Turn engine: sessions, history, tools. Plain asyncio; never imports the wire."""
