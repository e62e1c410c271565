"""Webhooks: a workspace's endpoints and their secrets (`endpoints`), how a delivery is signed (`signing`), and where
a delivery may go (`targets`)."""
