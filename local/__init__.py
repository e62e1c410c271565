"""The local stack behind `make dev`: moto for AWS, an HTTP gateway and a stream poller, no Docker."""
