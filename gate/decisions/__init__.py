"""Requests and their decisions: the use cases, the one decision pipeline, the state machine.

Owns: submitting, cancelling and expiring requests (`service`), reading them (`reading`),
deciding and extending from every surface (`deciding`, `clicks`), who may act and what they
are told (`acting`, `outcomes`, `reasons`), the only code that changes a status (`machine`),
one write transaction's changes (`changes`), grants (`grants`, `grant_review`), the audit
trail (`audit`), reports after the call (`reports`), the read model every surface renders
(`readmodel`), the server log's request lines (`requestlog`), a request's spans when
tracing is on (`spans`), and which approver a chat id is, with the bindings made outside
gate.toml (`identities`: identity provider claims, console link codes).

May import: gate.asking, gate.base, gate.config, gate.identity, gate.inputs, gate.policy,
gate.rendering, gate.store, gate.text.
"""
