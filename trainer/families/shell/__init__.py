"""Shell tasks beyond patches (``shell-*``): data transformation with command-line tools,
configuration repair, and git operations, worked in a real bash session and judged on the final
tree by trusted code.

* :mod:`~trainer.families.shell.tasks`: the generators (seed and level to files, setup, checks,
  reference and wrong command scripts);
* :mod:`~trainer.families.shell.verifier`: the ``shell_state`` stage;
* :mod:`~trainer.families.shell.catalogue`: the catalogue entries.
"""
