"""Shared fixtures for the verifier and catalogue tests."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def sandbox_execute():
    """``workers.sandbox.execute`` when the sandbox runtime is importable and usable, else None."""
    try:
        from workers.sandbox import execute  # noqa: PLC0415 - optional, lives on another branch
    except ImportError:
        return None
    return execute


@pytest.fixture
def real_sandbox():
    """A VerifyContext with the real sandbox (skip, or fail in CI, when it is missing)."""
    from tests.services import require
    from trainer.verifiers.context import VerifyContext

    execute = sandbox_execute()
    require(execute is not None, "workers.sandbox is not importable in this checkout")
    return VerifyContext(execute=execute)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than a few seconds (CI still runs it)")
