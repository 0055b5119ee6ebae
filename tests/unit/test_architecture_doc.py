"""docs/architecture-picture.md is the picture of the house drawn from the code: it must be
current, like the protocol coverage table."""

from tests.support.architecture import DOC, render


def test_the_picture_of_the_house_is_current() -> None:
    regenerate = "python -m tests.support.architecture > docs/architecture-picture.md"
    assert DOC.read_text() == render(), f"{DOC.name} is stale: run `{regenerate}`"
