"""One running gate: what it owns and how it serves HTTP.

Owns: the app's state, the face of it channels get (`state`), connection capacity
(`capacity`), uvicorn with limits that keep silent sockets from locking it up (`serve`,
`closing`), the access log and each request's SERVER span (`access`), and starting and
stopping OpenTelemetry tracing (`telemetry`).

May import: gate.base, gate.config, gate.decisions, gate.delivery, gate.identity,
gate.policy, gate.store.
"""
