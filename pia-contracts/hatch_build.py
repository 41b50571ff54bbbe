"""Ship the repository's top-level contracts/ folder as the `contracts` package of the pia-contracts wheel."""

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

CONTRACTS = Path(__file__).resolve().parent.parent / "contracts"


class ContractsFolder(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "standard":  # an editable install reads the folder in place (dev-mode-dirs)
            build_data["force_include"][str(CONTRACTS)] = "contracts"
