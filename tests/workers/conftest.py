import pytest


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A tiny model (trainer.models.tiny), built once per test module: the base model of its runs."""
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("tiny") / "model", layers=2))
