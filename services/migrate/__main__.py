import asyncio
import os
import sys

from services.common.errors import SettingsError
from services.common.logs import configure_logging
from services.common.settings import Settings
from services.migrate import run

try:
    settings = Settings.from_env(os.environ)
    configure_logging("migrate", settings.log_level)
    asyncio.run(run(settings, wait="--wait" in sys.argv[1:]))
except SettingsError as error:
    print(f"configuration error: {error}", file=sys.stderr)
    raise SystemExit(2) from None
