"""Cards out and time passing: the channel port, sending, and the scheduled jobs.

Owns: the port every channel implements (`channel`), sending a claimed delivery through its
channel (`sending`), signing and sending `[[webhooks]]` messages (`webhooks`), the expiry
sweep, outbox pump and reminders (`jobs`, `reminders`) and when they run (`scheduler`).

May import: gate.base, gate.config, gate.decisions, gate.policy, gate.store, gate.text.
"""
