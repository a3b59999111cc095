import pytest

from tests import factories


@pytest.fixture
def world(db):
    """Two teams, each with one user per role, a platform admin, and a few domains."""
    class World:
        pass

    w = World()
    w.team = factories.team("acme")
    w.other = factories.team("globex")
    w.users = {role: factories.member(w.team, role, f"acme-{role}") for role in ("viewer", "reviewer", "member", "admin")}
    w.other_users = {role: factories.member(w.other, role, f"globex-{role}") for role in ("viewer", "reviewer", "member", "admin")}
    w.staff = factories.user("root", staff=True)
    w.domain = factories.domain("addition")
    w.domain2 = factories.domain("parity", kind="reasoning")
    w.team_domain = factories.domain("acme-private", team_=w.team)
    w.other_domain = factories.domain("globex-private", team_=w.other)
    return w


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's cost is for production; tests hash many throwaway passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _models_under_tmp(settings, tmp_path_factory, monkeypatch):
    """Tests build their tiny models under pytest's temporary directory: it is an allowed model
    root (TEMPER_MODEL_DIRS) here and in the worker processes a test starts (they inherit the
    environment). Tests of the confinement itself set their own roots."""
    roots = [*settings.TEMPER_MODEL_DIRS, tmp_path_factory.getbasetemp()]
    settings.TEMPER_MODEL_DIRS = roots
    monkeypatch.setenv("TEMPER_MODEL_DIRS", ",".join(str(r) for r in roots))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` first (otherwise in collection order): ``make test`` spreads the suite
    over pytest-xdist workers that take work from each other, and a long test that starts last
    keeps one worker running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def money_context():
    """A test's own decimal arithmetic (expected costs) in the product's money context: the
    thread's context may have been changed by an earlier test in the process (reasoning-gym's and
    BFCL's decimal arithmetic set its precision), which the product's money code ignores
    (``controlplane.runs.cost.exact``) and the test must too."""
    import decimal  # lazy: only the money tests use it

    from controlplane.runs.cost import MONEY_CONTEXT  # lazy: the apps are loaded when a test runs, not at collection

    with decimal.localcontext(MONEY_CONTEXT):
        yield
