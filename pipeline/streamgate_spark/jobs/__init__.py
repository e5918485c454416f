"""Sample jobs over the ``streamgate`` source: ``python -m streamgate_spark.jobs.<name>``."""
