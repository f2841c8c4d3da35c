"""Holds the ``sitecustomize`` shim that ``ddp-lsp smallrun`` and ``ddp-lsp feasibility`` put on ``PYTHONPATH``."""
