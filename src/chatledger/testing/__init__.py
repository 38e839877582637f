"""Conformance suites a session store runs to prove itself (see the contract modules)."""
