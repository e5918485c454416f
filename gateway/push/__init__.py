"""Push subscriptions: consumer groups whose member is an HTTP endpoint."""
