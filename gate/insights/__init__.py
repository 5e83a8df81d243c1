"""insights."""
