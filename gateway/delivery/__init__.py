"""Delivering messages to subscribers: group readers shared per process, sessions with credit,
filters."""
