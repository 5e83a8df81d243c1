"""`gate hook`: the pre-tool hook command, and `gate init` for the agents that run it.

Owns: the command (`command`, run as `python -m gate.hook`), what each agent runtime sends
and accepts (`dialects`), catching stop signals while starting (`start`) and writing an
agent's hook configuration (`setup`).

May import: gate.asking, gate.base, gate.config, gate.policy, gate.text.
"""
