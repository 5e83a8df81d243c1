"""Who is calling: API bearer tokens and the principals they stand for.

Owns: the token book and `Principal` (`auth`), what the decision pipeline, the API and the
console ask about a caller; how a person was authenticated (`authmethod`); the single
sign-on client (`oidc`); WebAuthn's ceremonies for passkeys and the challenge an approval
signs (`passkeys`).

May import: gate.base, gate.config.
"""
