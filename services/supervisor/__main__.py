"""``python -m services.supervisor``: run the whole mesh in the foreground."""

import asyncio

from services.supervisor.supervisor import main

raise SystemExit(asyncio.run(main()))
