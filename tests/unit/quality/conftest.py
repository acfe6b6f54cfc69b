"""One GX Data Context per test session: opening one costs seconds (the import).

GX is imported here, before any test module of this directory imports parts of it, the way
cdclake imports it (:mod:`cdclake.quality.deferred`): collecting the suite, every worker
imports it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.config import Config
from cdclake.quality import deferred
from cdclake.quality.context import QualityContext

deferred.great_expectations()


@pytest.fixture(scope="session")
def quality_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return Config(home=Path(tmp_path_factory.mktemp("quality-home")))


@pytest.fixture(scope="session")
def gx_context(quality_config: Config) -> QualityContext:
    return QualityContext.for_config(quality_config)
