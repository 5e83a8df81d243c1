"""`gate.store.passkeys` on each database: a challenge is used once, a new passkey is stored
with its challenge used up in one transaction, and an approval moves the counter only from
the value it was checked against (two approvals checked against one value: one counts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gate.store import passkeys
from gate.store.db import Database
from gate.store.records import ChallengeRow, PasskeyRow
from tests.support.sql_counter import counting

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def challenge(db: Database, nonce: str, purpose: str = "approve") -> None:
    row = ChallengeRow(
        nonce=nonce,
        approver="alice",
        purpose=purpose,
        request_id="01REQUEST" if purpose == "approve" else None,
        args_hash="ab" * 32 if purpose == "approve" else None,
        expires_at=NOW + timedelta(minutes=2),
    )
    passkeys.issue(db, row, now=NOW)


def key(credential_id: str = "cred-1") -> PasskeyRow:
    return PasskeyRow(
        id="01PASSKEY" + credential_id[-1],
        credential_id=credential_id,
        approver="alice",
        label="laptop",
        public_key=b"\xa5cose",
        sign_count=0,
        transports=("usb",),
        created_at=NOW,
    )


def test_challenges_are_single_use_and_short_lived(db_url: str) -> None:
    db = Database(db_url, pool_size=2)
    try:
        challenge(db, "reg-1", "register")
        with counting(db.engine) as tally:
            added = passkeys.add(db, key(), nonce="reg-1", now=NOW, auth={"kind": "password"})
        assert added == "added"
        assert tally.transactions == 1, tally  # the challenge used up with the insert
        assert passkeys.add(db, key(), nonce="reg-1", now=NOW, auth=None) == "challenge_used"
        challenge(db, "reg-2", "register")
        assert passkeys.add(db, key(), nonce="reg-2", now=NOW, auth=None) == "known"
        assert [k.credential_id for k in passkeys.of_approver(db, "alice")] == ["cred-1"]

        challenge(db, "late")
        later = NOW + timedelta(minutes=3)
        spent = passkeys.spend(
            db, nonce="late", credential_id="cred-1", seen_count=0, new_count=1, now=later
        )
        assert spent == "challenge_used"  # expired

        challenge(db, "a")
        challenge(db, "b")
        with counting(db.engine) as tally:
            spent = passkeys.spend(
                db, nonce="a", credential_id="cred-1", seen_count=0, new_count=5, now=NOW
            )
        assert spent == "spent" and tally.transactions == 1, tally
        # checked against the same counter value (0) meanwhile: the second does not count
        moved = passkeys.spend(
            db, nonce="b", credential_id="cred-1", seen_count=0, new_count=6, now=NOW
        )
        assert moved == "counter_moved"
        again = passkeys.spend(
            db, nonce="a", credential_id="cred-1", seen_count=5, new_count=7, now=NOW
        )
        assert again == "challenge_used"  # the replay
        found = passkeys.by_credential(db, "cred-1")
        assert found is not None and found.sign_count == 5 and found.last_used_at == NOW

        gone = passkeys.remove(db, approver="bob", key_id=found.id, now=NOW)
        assert gone is None  # not bob's
        gone = passkeys.remove(db, approver="alice", key_id=found.id, now=NOW)
        assert gone is not None and passkeys.of_approver(db, "alice") == []
        kept = passkeys.by_credential(db, "cred-1")
        assert kept is not None and kept.removed_by == "alice"  # on record
    finally:
        db.dispose()
