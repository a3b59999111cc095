"""The examples in docstrings are tests too."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["trainer.verifiers", "trainer.catalogue", "trainer.environments", "trainer.audit", "controlplane.alerts.channels"]
MODULES = [
    "trainer.outcomes", "trainer.pyast", "trainer.pipeline", "trainer.checkpoint", "trainer.catalogue.builtin", "controlplane.common.cli", "controlplane.common.validation",
    "controlplane.domains.selectors", "controlplane.domains.schemas", "controlplane.common.model_refs", "controlplane.review.services",
    "controlplane.runs.services", "controlplane.runs.watch", "controlplane.scheduling.services", "controlplane.registry.services", "controlplane.domains.policy", "workers.driver", "workers.observers", "workers.compute_observers", "workers.verify",
    "controlplane.accounts.throttle", "controlplane.common.security", "controlplane.settings.security",
    "controlplane.runs.usage", "workers.usage", "trainer.rollout", "controlplane.registry.selectors",
    "controlplane.alerts.rules", "controlplane.alerts.services", "controlplane.alerts.transport", "workers.lanes",
    "workers.devices", "trainer.parallel", "controlplane.web.manage_views", "tests.suite_env", "trainer.evaluation",
    "controlplane.scheduling.scheduler", "controlplane.scheduling.selectors", "workers.launch", "controlplane.runs.ceilings", "trainer.ranks", "trainer.algorithms", "trainer.tasks.filings", "trainer.tasks.statements",
    "trainer.integrity", "trainer.advisor", "controlplane.runs.spec", "controlplane.web.pages",
    "trainer.families.pkgs.catalogue", "trainer.families.pkgs.environment",
]


def _modules():
    names = list(MODULES)
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".") if not m.name.endswith("__main__")]
    return sorted(set(names))


@pytest.mark.parametrize("name", _modules())
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
