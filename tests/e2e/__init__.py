"""End-to-end tests of the webhook's lifecycle semantics on a real control plane."""
