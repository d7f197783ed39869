from services.common.runner import main
from services.llmproxy.server import serve

main(serve)
