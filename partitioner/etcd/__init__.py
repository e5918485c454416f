"""The etcd client: typed values, the connection, and the one module that imports aetcd
(``aetcd_client``); the rest of partitioner sees only the typed values."""
