"""Tests that need no database server: pure Python, or an embedded SQLite file at most.

``pytest tests/unit`` runs them anywhere; the backend matrix is the rest of ``tests/``.
"""
