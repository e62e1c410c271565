"""Precis: conversation memory for LLM agents (the shared layer of every function)."""

__version__ = "0.1.0"
