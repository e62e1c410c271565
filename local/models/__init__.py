"""Fake model servers: an OpenAI-compatible one and a Bedrock Runtime one, for the local stack, the tests and the
benchmarks."""
