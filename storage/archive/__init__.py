"""The archive tier: a partition's oldest entries in immutable Parquet segment files, on a
filesystem path or an S3-compatible object store."""
