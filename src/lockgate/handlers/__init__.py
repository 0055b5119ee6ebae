"""One module per Kafka API: decode → call the owner → encode. Handlers keep no state."""

import importlib
import pkgutil


def load_all() -> None:
    """Imports every handler module so that each registers itself (idempotent)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("k"):
            importlib.import_module(f"{__name__}.{module.name}")
