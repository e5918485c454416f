"""Background duties of the partitions this gateway owns: delayed-message promotion, retention,
lag."""
