"""Held rows rendered as the contract's JSON documents. Routes, admin operations and the console all render
here, so no route module imports another (an import-linter contract in pyproject.toml holds that)."""
