"""Business rules as pure functions: no I/O, importing only `contracts` and the standard library (DESIGN.md)."""
