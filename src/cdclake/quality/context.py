"""The GX Data Context cdclake validates in: file mode, rooted under the reports directory.

File mode, not ephemeral: the stream and the mirrors are validated by different Airflow tasks
(different processes), and Data Docs' index is rebuilt from the stored validation results, so
only a persisted context gives one index listing every run. The context lives in
``<reports>/gx`` and its Data Docs site in ``<reports>/data_docs`` (``index.html`` there), next
to the batch reports, so publishing ``reports/`` publishes both.

GX's Checkpoint runs all its validation definitions on one set of batch parameters, and a
dataframe asset takes its dataframe from those parameters, so each (suite, table) gets its own
asset, validation definition and checkpoint, all kept in the context and updated in place on
every run: the stored objects always match the suite files of the running version.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context import FileDataContext

    from cdclake.config import Config

DATASOURCE = "cdclake"
#: the Spark DataFrames' source (mirrors read by Spark executors, nothing collected)
SPARK_DATASOURCE = "cdclake_spark"
SITE = "cdclake"
BATCH_DEFINITION = "whole_dataframe"
#: Relative to the context root (``<reports>/gx``), so a copied reports tree still works.
SITE_DIRECTORY = "../data_docs/"

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


def is_spark(frame: Any) -> bool:
    """A Spark DataFrame (without importing pyspark where none is used)."""
    return type(frame).__module__.startswith("pyspark.")


def gx_name(*parts: str) -> str:
    """A name GX can use as a file name for suites, definitions and checkpoints."""
    return ".".join(_UNSAFE_NAME.sub("_", p) for p in parts)


class QualityContext:
    """One GX file Data Context for a reports directory; open once, validate many tables."""

    def __init__(self, reports_dir: Path) -> None:
        import great_expectations as gx

        self.reports_dir = Path(reports_dir).resolve()
        self.reports_dir.mkdir(parents=True, exist_ok=True)
        self.gx: FileDataContext = gx.get_context(mode="file",
                                                  project_root_dir=str(self.reports_dir))
        self._configure()

    @classmethod
    def for_config(cls, config: Config) -> QualityContext:
        return cls(config.reports_path())

    @property
    def data_docs_dir(self) -> Path:
        return (Path(self.gx.root_directory) / SITE_DIRECTORY).resolve()

    @property
    def data_docs_index(self) -> Path:
        return self.data_docs_dir / "index.html"

    def _configure(self) -> None:
        """No analytics, no progress bars on stderr, one Data Docs site under reports/."""
        from great_expectations.data_context.types.base import ProgressBarsConfig

        variables = self.gx.variables
        sites = {
            SITE: {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": SITE_DIRECTORY,
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        }
        stored: Any = variables.progress_bars  # a dict when read from great_expectations.yml
        bars: dict[str, Any] = (stored if isinstance(stored, dict)
                                else vars(stored) if stored is not None else {})
        changed = False
        if variables.analytics_enabled is not False:
            variables.analytics_enabled = False
            changed = True
        if not bars or bars.get("globally", True) or bars.get("metric_calculations", True):
            variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
            changed = True
        if variables.data_docs_sites != sites:
            variables.data_docs_sites = sites
            changed = True
        if changed:
            variables.save()

    def validate(self, *, suite: ExpectationSuite, asset: str, frame: pd.DataFrame | Any,
                 result_format: dict[str, Any], run_id: RunIdentifier,
                 ) -> tuple[ExpectationSuiteValidationResult, str | None]:
        """Run ``suite`` on ``frame`` (pandas, or a Spark DataFrame: GX's Spark engine then
        computes the metrics on the executors) through a Checkpoint that updates Data Docs.

        Returns the validation result and the path of its Data Docs page.
        """
        import great_expectations as gx
        from great_expectations.checkpoint import UpdateDataDocsAction

        batch_definition = self._batch_definition(asset, spark=is_spark(frame))
        stored_suite = self.gx.suites.add_or_update(suite)
        definition = self.gx.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=suite.name, data=batch_definition, suite=stored_suite)
        )
        checkpoint = self.gx.checkpoints.add_or_update(
            gx.Checkpoint(
                name=suite.name,
                validation_definitions=[definition],
                actions=[UpdateDataDocsAction(name="update_data_docs", site_names=[SITE])],
                result_format=result_format,
            )
        )
        outcome = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=run_id)
        ((key, result),) = outcome.run_results.items()
        return result, self._page_of(key)

    def _batch_definition(self, asset_name: str, *, spark: bool = False) -> Any:
        from great_expectations.datasource.fluent import PandasDatasource, SparkDatasource

        name, kind = (SPARK_DATASOURCE, SparkDatasource) if spark else (DATASOURCE,
                                                                         PandasDatasource)
        sources = self.gx.data_sources
        try:
            source = sources.get(name)
        except KeyError:
            source = sources.add_spark(name) if spark else sources.add_pandas(name)
        if not isinstance(source, kind):
            raise TypeError(f"data source {name!r} in {self.gx.root_directory} is a "
                            f"{type(source).__name__}, not the {kind.__name__} cdclake creates")
        if asset_name in source.get_asset_names():
            asset = source.get_asset(asset_name)
        else:
            asset = source.add_dataframe_asset(asset_name)
        names = {d.name for d in asset.batch_definitions}
        if BATCH_DEFINITION in names:
            return asset.get_batch_definition(BATCH_DEFINITION)
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)

    def _page_of(self, key: Any) -> str | None:
        urls = self.gx.get_docs_sites_urls(resource_identifier=key, site_name=SITE,
                                           only_if_exists=True)
        url = urls[0].get("site_url") if urls else None
        if not url:
            return None
        parsed = urlparse(str(url))
        return str(Path(unquote(parsed.path)).resolve()) if parsed.scheme == "file" else url
