from services.common.runner import main
from services.toolsearch.server import serve

main(serve)
