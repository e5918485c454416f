"""Sample jobs over the ``streamgate`` source, runnable as ``python -m pipeline.jobs.<name>``."""
