"""Email: approval cards sent over SMTP, each approver with links of their own.

The package, by role:

* `settings`: `EmailSettings`, the `[channels.email]` table (the channel's `settings_model`).
* `channel`: `EmailChannel`, the adapter gate loads (post, update, router, aclose) and the
  SMTP session behind it, with SMTP's failures mapped onto the outbox's retry rules.
* `links`: the signed, per-approver link tokens and the confirm page's form tokens.
* `confirm`: the confirm page a link opens (GET shows, POST decides), each form turned into
  a neutral `gate.delivery.channel.Click`, handed to gate, and answered on the page.
* `message`, `page`, `text`: the mail and the page, pure functions of a request's view, and
  the cleaning that keeps untrusted text inert in them; `templates/` holds their Jinja2.
"""

from channels.email.channel import EmailChannel

__all__ = ["EmailChannel"]
