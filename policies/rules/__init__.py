"""One module per rule; see :mod:`policies.registry` for the contract."""
