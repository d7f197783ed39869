"""`python -m services.scripted_model`: serve with settings from the environment.

On asyncio's own loop, not uvloop as the services: on uvloop, 100 streams paced through the
mesh kept 77-89 % of the model's pace in some runs (96-104 % on asyncio's), and the pace is
what the model stands for."""

import asyncio
import os

from services.common.logs import configure_logging
from services.scripted_model.app import serve
from services.scripted_model.config import ScriptedModelSettings

if __name__ == "__main__":
    configure_logging("scripted_model", os.environ.get("LOG_LEVEL", "INFO").upper())
    asyncio.run(serve(ScriptedModelSettings.from_env(os.environ)))
