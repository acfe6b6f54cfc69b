"""Helpers every suite shares (unit, oracle, e2e) and the benchmarks use: nothing here is a
test, and nothing in tests/unit imports from tests/e2e or tests/oracle."""

#: the PostgreSQL majors every server-backed suite runs on: 15 (Debian), 18 (embedded wheel)
VERSIONS = (15, 18)
