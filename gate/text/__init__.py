"""Untrusted text: the one place that makes what agents and chat platforms send inert.

Owns: cleaning and secret masking (`untrusted`), characters that make text read as something
it is not (`glyphs`), defanged links (`defanging`) and linear-time regular expressions for any
pattern run over untrusted text (`linear`).

May import: nothing in gate.
"""
