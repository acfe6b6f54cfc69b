"""Data Docs views whose Jinja templates are compiled once per process.

GX renders a page through a view class that builds its own Jinja ``Environment``, and its
site builder makes new views for every ``build_data_docs``: each run's pages compiled GX's
templates (page, section, component, the styles) again — some 15 % of what validating a
table's batch costs here. The site configuration names its views (the documented
``view: {module_name, class_name}`` of a section builder and of the index builder), so
cdclake's name these: GX's views whose environments share one in-memory bytecode cache
(Jinja's own mechanism, keyed by template and checked against its source), so a template is
compiled once per process, whichever home's context renders it.
"""

from __future__ import annotations

from great_expectations.render.view.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2 import Environment
from jinja2.bccache import Bucket, BytecodeCache

#: how the site configuration names each view
PAGE_VIEW = {"module_name": __name__, "class_name": "PageView"}
INDEX_VIEW = {"module_name": __name__, "class_name": "IndexPageView"}


class _InMemory(BytecodeCache):
    """Compiled templates by bucket key, for the process (a bucket whose source changed is
    compiled again: Jinja checks the checksum stored with the code)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


COMPILED = _InMemory()


class _Compiled:
    """A GX view whose environment takes the process's compiled templates."""

    env: Environment

    def __init__(self, custom_styles_directory: str | None = None,
                 custom_views_directory: str | None = None) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)  # type: ignore[call-arg]
        self.env.bytecode_cache = COMPILED


class PageView(_Compiled, DefaultJinjaPageView):
    """GX's page view (suites, validation results), its templates compiled once."""


class IndexPageView(_Compiled, DefaultJinjaIndexPageView):
    """GX's index page view, its templates compiled once."""
