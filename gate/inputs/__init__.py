"""What agents and approvers send: the v1 API's request bodies, validated.

Owns: the call as gate receives it (`GateCall`), the decision, grant, extend, outcome and
cancel bodies, and what JSON gate agrees to store (`bodies`).

May import: gate.base, gate.config, gate.text.
"""
