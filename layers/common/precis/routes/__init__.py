"""The v3 API's routes as Powertools routers: `write` for the ingest function, `read` for the context function."""
