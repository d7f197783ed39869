"""The CodeLab benchmark suite: speed, scale and cost of the real mesh, in one run.

``python -m bench`` (``make bench``) starts the mesh the way ``make run`` does, drives it
from outside through the gateway and the project's own clients, and prints numbers; it
never fails on a threshold. ``python -m bench.soak`` (``make soak``) is the bounded soak.
"""
