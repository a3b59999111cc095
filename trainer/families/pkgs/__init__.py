"""The swe-pkg family: software-engineering tasks built from real open-source packages.

Each pinned package (:mod:`~trainer.families.pkgs.pins`) is a PyPI source distribution that
ships its own test suite. A bug is injected by a syntax-tree mutation
(:mod:`~trainer.families.pkgs.mutate`); the build (:mod:`~trainer.families.pkgs.build`) keeps a
task only when the package's own tests, run in the sandbox by the trusted runner
(:mod:`~trainer.families.pkgs.runner`), pass on the original and fail on the mutant; the task's
prompt is an issue written from the failing behaviour (:mod:`~trainer.families.pkgs.issues`).
Built task sets are committed under ``tasks/`` and read by :mod:`~trainer.families.pkgs.tasks`.
"""

FAMILY = "pkgs"
"""The family's name."""
