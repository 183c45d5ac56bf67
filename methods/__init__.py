"""Methods under comparison. Each is registered under ``sourcebench.methods`` (see pyproject.toml)."""
