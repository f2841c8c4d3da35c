"""Holds the ``sitecustomize`` shim that ``ddp-lsp smallrun`` puts on ``PYTHONPATH``."""
