"""The server's contract modules the client needs, copied by pia-client/copy_contracts.py."""
