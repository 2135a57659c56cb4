"""Small tools every room uses: the UTF-8 text cap, clean text, where log records go, waiting
for the first of several things.

Nothing here is public by its own path: callers import from :mod:`supervisor`, authors from
:mod:`supervisor.provider` and :mod:`supervisor.wire`.
"""
