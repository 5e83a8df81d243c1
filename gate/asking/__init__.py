"""The agent's side of asking gate about a call, sans-IO and standard library only.

Owns: the ask flow every adapter drives (`askflow`: submit, wait, withdraw), what happens
after the call (`aftercall`), the exchanges a flow asks its driver for (`exchange`), the
binding of a yes to the exact call (`binding`), the call and its verdict (`toolcall`) and
every sentence said to the model (`wording`), and the caller's W3C `traceparent` sent with
each request (`tracecontext`). `gate hook` imports this on every tool call,
so it stays light.

May import: nothing in gate.
"""
