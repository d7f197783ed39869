"""What the orchestrator keeps: sessions, messages and events (store), their delivery (hub),
event builders, the session state machine and API keys. Every query file lives in ``sql``."""

from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"
