"""Bad arguments fail early with one exception type that names the argument, rule and value."""

from __future__ import annotations

import pytest

from posenc import PosencError
from tests.cases import CASES, DOC, namespace, run


def test_error_type_is_a_value_error():
    assert issubclass(PosencError, ValueError)


@pytest.mark.parametrize("case", [c for c in CASES if c.expect], ids=lambda c: c.code[:60])
def test_every_rejection_in_the_catalogue(case):
    """Each input of docs/errors.md gets a PosencError (or, as a command, exit 2 and one line)
    whose message holds the argument, the rule and the value."""
    kind, got = run(case)
    if case.command:
        assert kind == "2", (kind, got)
        assert got.count("\n") == 1, got
    else:
        assert kind == "error", f"{case.code} returned instead of raising"
    for fragment in case.expect:
        assert fragment in got, (fragment, got)


@pytest.mark.parametrize("case", [c for c in CASES if c.holds], ids=lambda c: c.code[:60])
def test_every_valid_call_in_the_catalogue(case):
    kind, out = run(case)
    assert kind == "value", out
    assert eval(case.holds, {**namespace(), "out": out}), case.holds


def test_errors_md_lists_every_case_with_its_message():
    """docs/errors.md is written by `python -m tests.cases`: one row per case, in order, each
    holding the case's fragments."""
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    assert len(rows) == len(CASES), "regenerate docs/errors.md: python -m tests.cases"
    for row, case in zip(rows, CASES, strict=True):
        text = row.replace("\\|", "|")
        assert text.startswith(f"| `{' '.join(case.code.split())}` |"), (row, case.code)
        for fragment in case.expect or (case.holds,):
            assert fragment in text, (fragment, row)
