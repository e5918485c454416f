"""Storage's Redis wire: RESP bytes and replies, the error tree, pipelined node connections and
their lanes; it knows nothing of what a command means."""
