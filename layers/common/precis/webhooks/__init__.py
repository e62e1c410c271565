"""Webhooks: a workspace's endpoints and their secrets (`endpoints`), and how a delivery is signed (`signing`)."""
