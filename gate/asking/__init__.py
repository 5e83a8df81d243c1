"""asking."""
