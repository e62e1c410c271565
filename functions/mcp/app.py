"""MCP function: `POST /mcp` (and GET/DELETE, answered 405), the Model Context Protocol over the v3 API's operations.

A function of its own: the tool catalogue and its argument models stay off the other functions' cold starts, and its
role is the union of what its tools do (ingest's writes, chat's model). The protocol is served by `precis.mcp`
itself, not the `mcp` package, whose import alone takes longer than this whole cold start (docs/benchmarks.md).
"""

from precis import startup  # first: no garbage collection while the imports run (precis.startup)

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from precis.mcp.endpoint import handle
from precis.settings import get_settings

logger = Logger()
get_settings()  # a bad deployment setting stops the cold start here, as in every function, not the first request


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def lambda_handler(event: dict, context) -> dict:
    return handle(event)


startup.done()  # the module is built: freeze what it made (precis.startup)
