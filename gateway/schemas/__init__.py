"""Topic schemas: the JSON Schema engine, compatibility between versions, validation at the door."""
