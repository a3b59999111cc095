"""The software-engineering family (``swe-*``): a task is a generated repository with a bug to fix
or a change to make, solved by a diff or through tool calls and judged by hidden tests.

* :mod:`~trainer.families.swe.repo_kernels`: the small functions the repositories are built from;
* :mod:`~trainer.families.swe.repos`: the task source (a repository, its visible and hidden tests);
* :mod:`~trainer.families.swe.environment`: the ``repo`` tool-use environment (read, write,
  apply a patch, run the visible tests in the sandbox);
* :mod:`~trainer.families.swe.verifier`: the ``repo_tests`` stage (the hidden tests on the final
  tree in a fresh sandbox);
* :mod:`~trainer.families.swe.catalogue`: the catalogue entries.
"""
