"""Which tool calls need a human: rules compiled once, evaluated per call, and their tools.

Owns: the rules and their evaluation (`rules`, with the per-rule checks and frozen offers in
`rule_checks`), what a rule offers approvers (`offers`), canonical tool names (`toolnames`),
the checks of a `when` before it runs (`check` and the `cel_*` modules), the agent hook
matchers derived from the policy (`matchers`), and the policy commands: `gate policy test`
(`cases`), `lint` (`lint`, `globs`), their CLI (`commands`), and the history-aware terms of a
`when` (`history`).

May import: gate.asking, gate.base, gate.config, gate.identity, gate.inputs, gate.text.
"""
