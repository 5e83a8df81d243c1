"""The store: everything in gate that speaks SQL, behind the verbs the state machine uses.

What it owns: the engine and its sessions (`db`, PostgreSQL's driver specifics in
`postgres`), the migrations' glue, the hot paths' statements and typed rows (`rows`), the
trailing writes sent as one statement (`batch`) and the driver path that runs a fixed
statement without SQLAlchemy's execution context (`direct`).

What it may import: the table models (`gate.models`), settings checks (`gate.config`), the
error types (`gate.errors`) and bundled files (`gate.resources`); never a surface, a channel
or the state machine. No channel imports anything under `gate.store`
(`tests/core/test_store_seam.py`).
"""
