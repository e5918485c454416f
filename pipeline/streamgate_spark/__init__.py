"""The PySpark side of streamgate: the ``streamgate`` data source and sample jobs. The only package
importing pyspark.

    from streamgate_spark import register
    register(spark)
    (spark.readStream.format("streamgate")
        .option("topic", "orders").option("redisNodes", "127.0.0.1:7000") ...)
"""

from streamgate_spark.errors import (
    InvalidSourceOption,
    PipelineError,
    StreamgateDataLoss,
    TopicNotFound,
    UnknownSchemaVersion,
)
from streamgate_spark.source import FORMAT, StreamgateDataSource, register

__all__ = [
    "FORMAT",
    "InvalidSourceOption",
    "PipelineError",
    "StreamgateDataLoss",
    "StreamgateDataSource",
    "TopicNotFound",
    "UnknownSchemaVersion",
    "register",
]
