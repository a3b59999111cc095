"""Domain families whose parts span the trainer's layers, each in one package of its own.

A family package holds all of a family: its task source, its environment, its verifier stages and
its catalogue entries, so that a new family is one new package and the trainer's general packages
import downward only: ``tasks`` (the task type) < ``verifiers`` (generic stages) <
``environments`` (the environment interface, the generic tool-use environments, the replay
stage) < ``catalogue`` (the registry) < a family. The registries name a family's parts by
``module:attribute`` strings (a stage type's function, an environment class, a catalogue module),
imported when first used, so no general package imports a family.

* :mod:`trainer.families.swe`: software-engineering tasks in a generated repository.

A family whose code is only its catalogue entries (math, HumanEval, the built-ins, the
reasoning-gym generators) keeps its one module in :mod:`trainer.catalogue`.
"""
