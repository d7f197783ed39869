"""`python -m services.scripted_model`: serve with settings from the environment, on uvloop
(it stands in for a remote provider but shares the box with the mesh in `make run` and the
bench: its own cost per streamed chunk is kept low)."""

import os

import uvloop

from services.common.logs import configure_logging
from services.scripted_model.app import serve
from services.scripted_model.config import ScriptedModelSettings

if __name__ == "__main__":
    configure_logging("scripted_model", os.environ.get("LOG_LEVEL", "INFO").upper())
    uvloop.run(serve(ScriptedModelSettings.from_env(os.environ)))
