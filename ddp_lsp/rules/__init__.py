"""The rule catalogue: one module per rule, ``ddpNNN_<name>.py`` (see ddp_lsp.core.registry)."""
