"""decisions."""
