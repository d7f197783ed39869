from services.common.runner import main
from services.hitl.server import serve

main(serve)
