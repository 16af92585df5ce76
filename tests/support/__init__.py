"""Shared test builders and fixtures: settings from the real config, tiny models, workflow copies."""
