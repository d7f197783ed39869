from services.common.runner import main
from services.orchestrator.server import serve

main(serve)
