"""The log: one Redis Stream per partition on a Redis Cluster. Knows nothing of HTTP or etcd.

Import from the modules: the ports (``storage.protocol``, ``storage.groups_protocol``), values
(``storage.models``), errors (``storage.errors``), settings and the store (``storage.redis_store``).
"""
