"""Great Expectations checks of the change stream and the mirror tables.

The suites are JSON files in ``expectations/`` (shipped here through the ``expectations``
symlink); :mod:`cdclake.quality.runner` instantiates them per table, validates through a GX
validation definition, renders Data Docs under ``config.reports_path()``, and returns a
:class:`QualityReport`. Importing this package does not import GX (seconds); the first
validation does.
"""

from cdclake.quality.context import QualityContext
from cdclake.quality.report import QualityReport, raise_for_failures
from cdclake.quality.runner import (
    validate_mirror_chunks,
    validate_mirrors,
    validate_stream,
    validate_stream_chunks,
)

__all__ = [
    "QualityContext",
    "QualityReport",
    "raise_for_failures",
    "validate_mirror_chunks",
    "validate_mirrors",
    "validate_stream",
    "validate_stream_chunks",
]
