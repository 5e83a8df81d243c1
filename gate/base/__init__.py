"""The vocabulary every part of gate shares, and nothing that decides anything.

Owns: the error shapes and their one JSON body (`errors`), status names, ids and times
(`statuses`), the surfaces a decision can come from and how a sentence names them
(`surfaces`), worker threads for blocking work (`threads`), in-process wake-ups of waiters and
live pages (`notify`), logging set-up (`logs`), tracing's run-time helpers, which import no
OpenTelemetry while it is off (`tracing`), bundled data folders (`resources`), and the TLS
context outbound HTTP clients share (`tls`).

May import: nothing in gate.
"""
