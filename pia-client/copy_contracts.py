"""Copy the contract modules the client needs into pia_client/contracts/, so the pia-client distribution stands alone.

The client checks a planner's file with the server's own rules and reads held data in the server's own schemas;
those live in the repository's `contracts/`, which ships with the server. The copies carry them into the client's
wheel with their imports renamed; `tests/test_client_package.py` fails when a copy differs from what this script
writes. Run it from anywhere after changing one of the modules:

    uv run python pia-client/copy_contracts.py
"""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
SOURCE = REPOSITORY / "contracts"
TARGET = Path(__file__).resolve().parent / "pia_client" / "contracts"
# What the client imports, and what those import in turn.
MODULES = ("batch_kinds", "formats", "held_datasets", "limits")
PACKAGE_DOCSTRING = '"""The server\'s contract modules the client needs, copied by pia-client/copy_contracts.py."""\n'


def copies() -> dict[Path, str]:
    """Each file of pia_client/contracts/ and the text it must have."""
    wanted = {TARGET / "__init__.py": PACKAGE_DOCSTRING}
    for name in MODULES:
        source = (SOURCE / f"{name}.py").read_text()
        header = f"# Copied from contracts/{name}.py by pia-client/copy_contracts.py: edit that file, then run it.\n"
        wanted[TARGET / f"{name}.py"] = header + source.replace("from contracts.", "from pia_client.contracts.")
    return wanted


def main() -> None:
    TARGET.mkdir(exist_ok=True)
    for path, text in copies().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(REPOSITORY)}")


if __name__ == "__main__":
    main()
