"""The store: everything in gate that speaks SQL, behind verbs named for what the rest does.

What it owns, module by module:

* `decisions`: the state machine's verbs (load for a decision, cast a vote, compare-and-set
  returning `Won`/`Lost`, append an audit event, owe card updates) and, once per database,
  which statements they run and why that is correct (`_SQLite`, `_PostgreSQL`);
* `records`: the typed rows those verbs take and return (`RequestRow`, `VoteRow`);
* `reads`: the use cases' reads (a request by key, with its votes, the sweep's due work);
  `gauges`: what `/metrics` reads at scrape time; `signins`: the console's sign-ins;
* `outbox` and `marks`: card deliveries owed, claimed with a lease, and marked;
  `webhooks`: the same for `[[webhooks]]` messages;
* `grants`, `nudges`: grants' and reminders' statements; `passkeys`: approvers' WebAuthn
  credentials and the single-use challenges issued for them;
* `identities`: chat identities bound outside gate.toml and their one-time link codes;
* `rows`: the hot paths' statements, built once; `batch`: a change's trailing writes sent as
  one statement (PostgreSQL); `direct`: a fixed statement run on the driver's cursor, and
  `direct.listen`, the hook tracing uses to see every statement;
* `tables`: the SQLModel tables (the schema Alembic's migrations build), with
  `approver_tables` (sign-ins, passkeys, chat identities) and `columns` (shared column types);
* `notify_pg`: wake-ups across replicas, NOTIFY in the deciding transaction and LISTEN;
* `db`: the engine, sessions and migrations' glue; `sqlite` and `postgres`: each
  database's connection specifics.

May import: gate.base, gate.config (settings checks, error types, bundled files); never a
surface, a channel or the state machine. No channel imports anything under `gate.store`
(`tests/core/test_store_seam.py`).
"""
