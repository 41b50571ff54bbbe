"""The operator console: HTML pages at /console/ for admin clients (routes.py), their sessions (sessions.py), what
each page shows (pages.py) and its charts (charts.py)."""
