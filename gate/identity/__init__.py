"""Who is calling: API bearer tokens and the principals they stand for.

Owns: the token book and `Principal` (`auth`), what the decision pipeline, the API and the
console ask about a caller.

May import: gate.base, gate.config.
"""
