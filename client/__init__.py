"""The Python client of pia's public API, for planning partners, analysts and our own tools (`pia upload`).

It speaks HTTP only and imports nothing of ours but `contracts`: it works against any pia server.
"""
