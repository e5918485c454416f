"""What the gateway tells about itself: metrics, hot partitions and keys, the access log."""
