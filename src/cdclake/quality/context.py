"""The GX Data Context cdclake validates in: file mode, rooted under the reports directory.

File mode, not ephemeral: the stream and the mirrors are validated by different Airflow tasks
(different processes), and Data Docs' index is rebuilt from the stored validation results, so
only a persisted context gives one index listing every run. The context lives in
``<reports>/gx`` and its Data Docs site in ``<reports>/data_docs`` (``index.html`` there), next
to the batch reports, so publishing ``reports/`` publishes both.

A dataframe asset takes its dataframe from the batch parameters of a run, so each (suite,
table) gets its own asset and validation definition, kept in the context and updated in place
by the first check of each process (and again when they change): the stored objects match the
suite files of the running version. A definition is run as itself, which stores its result:
a Checkpoint around it (no actions — cdclake renders Data Docs once per check) only checked
again that it and its definition were the stored ones and serialised both (6 % of checking
three tables twice in a new home: 1.12 → 1.06 s of CPU).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from cdclake.quality import deferred

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context import FileDataContext

    from cdclake.config import Config

log = logging.getLogger(__name__)

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


def _no_fingerprints() -> None:
    """GX's pandas engine md5-hashes every batch under 1 GB for a ``pandas_data_fingerprint``
    batch marker: a quarter of what validating a chunk of changes costs (measured, 900k
    rows). Nothing reads that marker — cdclake's reports locate rows by their LSNs or key —
    so the engine's threshold for it is set to nothing, for the frames of this process."""
    from great_expectations.execution_engine import pandas_execution_engine

    pandas_execution_engine.HASH_THRESHOLD = 0


class QualityContext:
    """One GX file Data Context for a reports directory; open once, validate many tables.

    Storing a suite, its validation definition and its checkpoint writes and fsyncs several
    files, and rendering a Data Docs page compiles GX's templates again each time: together
    some 1.4 s a table here, ten times what validating a batch of a few thousand changes
    costs. So a context stores each (suite, table)'s objects once per process, again only
    when they change (:meth:`validate`), and a run renders its pages and the index once, for
    all its tables (:meth:`publish`): a follower (``cdclake run --follow``) that keeps its
    context pays for neither again.
    """

    def __init__(self, reports_dir: Path, keep_results: int = 100) -> None:
        gx = deferred.great_expectations()
        self.keep_results = keep_results
        self.reports_dir = Path(reports_dir).resolve()
        self.reports_dir.mkdir(parents=True, exist_ok=True)
        self.gx: FileDataContext = gx.get_context(mode="file",
                                                  project_root_dir=str(self.reports_dir))
        if self._configure():  # GX reads some settings only when a context is made
            self.gx = gx.get_context(mode="file", project_root_dir=str(self.reports_dir))
        _no_fingerprints()
        #: suite name -> (what its stored objects were made from, its validation definition)
        self._definitions: dict[str, tuple[str, Any]] = {}
        #: the results whose pages :meth:`publishing_once` renders at its end (None: outside)
        self._deferred: list[Any] | None = None

    @classmethod
    def for_config(cls, config: Config) -> QualityContext:
        """The context of ``config``'s reports directory: the one this process opened last
        if it is that directory's (and the directory is still there), else a new one. The
        two checks of a run, the phases of a test and a follower's runs open GX's context,
        and store each table's suite and definition, once (one context is kept: a process
        serves one home)."""
        global _last
        root = config.reports_path().resolve()
        known = _last
        if (known is not None and known.reports_dir == root
                and known.keep_results == config.quality_keep_results
                and (Path(known.gx.root_directory) / "great_expectations.yml").exists()):
            return known
        _last = cls(root, config.quality_keep_results)
        return _last

    @property
    def data_docs_dir(self) -> Path:
        return (Path(self.gx.root_directory) / SITE_DIRECTORY).resolve()

    @property
    def data_docs_index(self) -> Path:
        return self.data_docs_dir / "index.html"

    def _configure(self) -> bool:
        """No analytics, no progress bars on stderr, one Data Docs site under reports/ whose
        views compile their templates once per process (:mod:`cdclake.quality.views`), no
        profiling section (cdclake stores no profiling results), and no config variables
        file: cdclake's context uses none, and GX read that YAML again on every access of a
        store's settings — several times per table validated. True when the configuration
        was changed (and saved)."""
        from great_expectations.data_context.types.base import ProgressBarsConfig

        from cdclake.quality.views import INDEX_VIEW, PAGE_VIEW

        variables = self.gx.variables
        sites = {
            SITE: {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": SITE_DIRECTORY,
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder",
                                       "view": INDEX_VIEW},
                "site_section_builders": {"expectations": {"view": PAGE_VIEW},
                                          "validations": {"view": PAGE_VIEW},
                                          "profiling": "None"},
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
        if variables.config_variables_file_path is not None:
            variables.config_variables_file_path = None  # type: ignore[assignment]  # unset
            changed = True
        if changed:
            variables.save()
        return changed

    def validate(self, *, suite: ExpectationSuite, asset: str, frame: pd.DataFrame | Any,
                 result_format: dict[str, Any], run_id: RunIdentifier,
                 ) -> tuple[ExpectationSuiteValidationResult, Any]:
        """Run ``suite`` on ``frame`` (pandas, or a Spark DataFrame: GX's Spark engine then
        computes the metrics on the executors) through its validation definition; the result
        is stored in the context, and its Data Docs page is rendered by :meth:`publish`.

        Returns the validation result and its key in the context's store.
        """
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
            ValidationResultIdentifier,
        )

        definition = self._definition(suite, asset, is_spark(frame))
        try:
            result = definition.run(batch_parameters={"dataframe": frame},
                                    result_format=result_format, run_id=run_id)
        finally:
            _forget_batch(definition)
        key = ValidationResultIdentifier(  # where the run stored it, as a Checkpoint names it
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=suite.name),
            run_id=run_id, batch_identifier=result.batch_id)
        return result, key

    def publish(self, keys: list[Any]) -> list[str | None]:
        """Render the Data Docs pages of the validation results ``keys`` (and of their
        suites) and the site's index, once; the path of each result's page. Inside
        :meth:`publishing_once`, only noted: rendered at its end, and the paths they get."""
        if not keys:
            return []
        if self._deferred is not None:
            self._deferred.extend(keys)
            return [self._page_of(k, rendered=False) for k in keys]
        self._render(keys)
        return [self._page_of(k) for k in keys]

    @contextmanager
    def publishing_once(self) -> Iterator[None]:
        """Render the pages of every result published inside, and the index, once at the
        end — also when what is inside fails, so a failed check has its page. Rendering the
        index reads every stored result (up to ``keep_results`` per table and suite): a step
        that validates a backlog batch by batch rendered it again for each."""
        if self._deferred is not None:  # already inside: the outer one renders
            yield
            return
        self._deferred = []
        try:
            yield
        except BaseException:
            keys, self._deferred = self._deferred, None
            try:
                self._render(keys)
            except Exception as exc:  # the failure inside is the one to tell
                log.warning("Data Docs were not rendered: %s", exc)
            raise
        keys, self._deferred = self._deferred, None
        self._render(keys)

    @property
    def publishes_index(self) -> bool:
        """Whether the Data Docs index exists, or is rendered at the end of
        :meth:`publishing_once`."""
        return self._deferred is not None or self.data_docs_index.exists()

    def _render(self, keys: list[Any]) -> None:
        """The pages of ``keys`` and of their suites, and the index, once the stored results
        are pruned (of a step that validated more than ``keep_results`` chunks of a table,
        GX renders the newest: the others are gone)."""
        if not keys:
            return
        from great_expectations.data_context.types.resource_identifiers import (
            ExpectationSuiteIdentifier,
        )

        self.prune(self.keep_results)
        suites = {ExpectationSuiteIdentifier(name=k.expectation_suite_identifier.name)
                  for k in keys}
        self.gx.build_data_docs(site_names=[SITE], resource_identifiers=[*keys, *suites])

    def prune(self, keep: int) -> int:
        """Drop the stored results, and their pages, of each suite (a table's) but its newest
        ``keep``; how many were dropped. The index is rendered from every stored result: a
        follower adds a table's results every few seconds, and would render an ever longer
        index, ever more slowly."""
        store = self.gx.validation_results_store
        by_suite: dict[str, list[Any]] = {}
        for key in store.list_keys():
            by_suite.setdefault(key.expectation_suite_identifier.name, []).append(key)
        dropped = 0
        for keys in by_suite.values():
            keys.sort(key=lambda k: (k.run_id.run_time, k.run_id.run_name or ""))
            for key in keys[:max(0, len(keys) - keep)]:
                page = self._page_of(key)
                store.remove_key(key)
                if page is not None:
                    Path(page).unlink(missing_ok=True)
                dropped += 1
        return dropped

    def _definition(self, suite: ExpectationSuite, asset: str, spark: bool) -> Any:
        """The suite's validation definition, its suite and asset stored in the context —
        written again only when what they are made from changed."""
        gx = deferred.great_expectations()
        made_of = json.dumps([suite.to_json_dict(), asset, spark], sort_keys=True, default=str)
        known = self._definitions.get(suite.name)
        if known is not None and known[0] == made_of:
            return known[1]
        batch_definition = self._batch_definition(asset, spark=spark)
        stored_suite = self.gx.suites.add_or_update(suite)
        definition = self.gx.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=suite.name, data=batch_definition, suite=stored_suite)
        )
        self._definitions[suite.name] = (made_of, definition)
        return definition

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

    def _page_of(self, key: Any, *, rendered: bool = True) -> str | None:
        """Where the page of result ``key`` is (None: not rendered, unless ``rendered`` is
        False: where it will be)."""
        urls = self.gx.get_docs_sites_urls(resource_identifier=key, site_name=SITE,
                                           only_if_exists=rendered)
        url = urls[0].get("site_url") if urls else None
        if not url:
            return None
        parsed = urlparse(str(url))
        return str(Path(unquote(parsed.path)).resolve()) if parsed.scheme == "file" else url


#: the context :meth:`QualityContext.for_config` opened last
_last: QualityContext | None = None


def _forget_batch(definition: Any) -> None:
    """Drop the data GX's execution engine keeps of the batch a run validated: each asset's
    last frame would stay cached until that asset runs again — a chunk in memory per table
    checked, while the next chunk is read."""
    engine = definition.batch_definition.data_asset.datasource.get_execution_engine()
    engine.batch_manager.reset_batch_cache()
    engine.batch_manager.batch_data_cache.clear()
