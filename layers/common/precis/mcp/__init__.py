"""The MCP endpoint (Model Context Protocol): agents reach the memory as tools, over streamable HTTP.

`protocol` reads a JSON-RPC message and its era (pure: no I/O), `tools` is the catalogue (each tool authorizes as
the route it stands for, then calls the layer as that route does), `endpoint` is the HTTP edge (keys, statuses,
headers). `instructions.md` is the text an agent gets when it connects.
"""
