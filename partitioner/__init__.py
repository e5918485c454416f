"""Placement and coordination: key hashing, topic metadata in etcd (the only package importing
etcd)."""
