"""The language server: a thin pygls adapter over the pure analysis core.

``server.py`` holds the handlers, ``state.py`` the one object that owns documents, findings and
settings, ``convert.py`` the position-encoding arithmetic (the only module that knows UTF-16).
"""
