"""The web console's helpers: sessions, read-only queries, SVG charts."""
