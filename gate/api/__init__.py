"""The HTTP API: `/v1` for agents, approvers and admins, health, metrics and the docs pages.

Owns: the routes (`v1`, `health`, `metrics`, `docs`), the plain JSON hot paths answered ahead
of FastAPI (`lean`) and their long-poll (`waiting`), the response shapes (`schemas`), request
framing and body limits (`framing`, `middleware`, `guard`), the security headers every
response carries (`headers`) and the dependencies routes share (`deps`).

May import: gate.base, gate.config, gate.decisions, gate.delivery, gate.identity,
gate.inputs, gate.insights, gate.policy, gate.server, gate.store, gate.text.
"""
