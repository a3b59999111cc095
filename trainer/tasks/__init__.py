"""Task sources: where a domain's prompts and reference answers come from."""
from trainer.tasks.base import Task, TaskSource

__all__ = ["Task", "TaskSource"]
