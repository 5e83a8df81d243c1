"""hook."""
