"""The linter front end: files -> documents (with line numbers) -> findings -> formats."""
