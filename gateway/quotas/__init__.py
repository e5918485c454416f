"""Quotas counted across gateways: bytes retained in the log, messages in flight."""
