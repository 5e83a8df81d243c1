"""Settings: one gate.toml, with GATE_* environment variables overriding scalars.

Owns: the settings models (`settings`), the `[server]` connection keys (`connections`),
approvers and tokens (`people`) and how a configuration mistake is told (`errors`).

May import: gate.base, gate.text.
"""
