"""Shell tasks beyond patches (``shell-*``): data transformation with command-line tools,
configuration repair, and git operations, worked in a real bash session and judged on the final
tree (and, for git, the repository's commits) by trusted code.

* :mod:`~trainer.families.shell.tasks`: the generators (seed and level to files, setup, checks,
  reference and wrong command scripts);
* :mod:`~trainer.families.shell.verifier`: the ``shell_state`` stage;
* :mod:`~trainer.families.shell.gitobjects`: a generated history's commit ids and bundles,
  computed without git; :mod:`~trainer.families.shell.gitstate`: a git task's repository read
  back as a bundle at the end of the episode and inspected in a fresh sandbox;
* :mod:`~trainer.families.shell.catalogue`: the catalogue entries.
"""
