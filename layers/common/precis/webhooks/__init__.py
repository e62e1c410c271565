"""Webhooks: the endpoints a workspace registers, the events delivered to them, and where a delivery may go."""
