"""Authentication (API keys, JWT) and authorization (ACL rules, forced header filters) for the
gateway."""
