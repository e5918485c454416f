"""The append room: what an append means on the wire (call classes with their RESP and reply fold,
the append Lua) and the appender that batches calls per node."""
