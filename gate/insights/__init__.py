"""What history says about the policy: the decision log replayed through a candidate policy,
rules suggested from what people decided, and approval-fatigue figures.

Owns: `gate policy replay` (`replay`), `gate policy suggest` (`suggest`, `suggest_rules`,
`suggest_report`), their command line (`commands`), and the Stats page's and `/metrics`'
fatigue figures (`fatigue`). Everything here reads; nothing is ever applied by itself.

May import: gate.asking, gate.base, gate.config, gate.inputs, gate.policy, gate.store,
gate.text.
"""
