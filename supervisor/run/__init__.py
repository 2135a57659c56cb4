"""The engine's composed parts under the authors' base run (:mod:`supervisor.run._engine`).

Each part is a module of its own with one job; the base run calls each through one
narrow seam.  Nothing here is public by its own path: callers import from
:mod:`supervisor`, authors from :mod:`supervisor.provider`.
"""
