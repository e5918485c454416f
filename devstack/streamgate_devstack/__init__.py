"""Local Redis Cluster and etcd child processes for `streamgate dev` and the integration tests.

Usage::

    with DevStack(DevStackConfig(data_dir=Path(".streamgate-dev"), redis_base_port=7000)) as stack:
        stack.redis_startup_nodes, stack.etcd_endpoint
"""

from streamgate_devstack.errors import (
    DevStackError,
    LayoutMismatchError,
    MissingBinary,
    ProcessExitedError,
    StartupTimeoutError,
)
from streamgate_devstack.etcd import EtcdConfig, EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterConfig, RedisClusterProcess
from streamgate_devstack.redis_node import RedisNode
from streamgate_devstack.stack import DevStack, DevStackConfig

__all__ = [
    "DevStack",
    "DevStackConfig",
    "DevStackError",
    "EtcdConfig",
    "EtcdProcess",
    "LayoutMismatchError",
    "MissingBinary",
    "ProcessExitedError",
    "RedisClusterConfig",
    "RedisClusterProcess",
    "RedisNode",
    "StartupTimeoutError",
]
