from services.common.runner import main
from services.gateway.server import serve

main(serve)
