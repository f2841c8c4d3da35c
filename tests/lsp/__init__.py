"""Language-server tests: end-to-end over stdio, raw protocol, fuzzing, a real Neovim."""
