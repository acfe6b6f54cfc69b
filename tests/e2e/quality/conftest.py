"""A GX context of its own for the end-to-end quality test (reports under a temp home)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.config import Config
from cdclake.quality.context import QualityContext


@pytest.fixture(scope="module")
def e2e_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return Config(home=Path(tmp_path_factory.mktemp("quality-e2e")))


@pytest.fixture(scope="module")
def e2e_context(e2e_config: Config) -> QualityContext:
    return QualityContext.for_config(e2e_config)
