"""Policy loading (:mod:`trainer.models.load`) and the locally built tiny model (:mod:`trainer.models.tiny`)."""
