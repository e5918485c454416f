"""The aiohttp gateway: HTTP publish, topic admin, replay, health, metrics and the CLI."""
