"""The policy's revision: a short hash of its normalised rules.

Normalised means each rule as gate reads it, every key present (defaults filled in), keys
sorted, durations in one notation: reordering keys, reformatting the file or spelling out a
default leaves the revision as it was, while changing, adding, removing or reordering a rule
(first match wins) changes it. Every request and decision-log row records the revision it was
decided under, so a page, `gate requests show` and the audit trail can say which rules decided.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from gate.config.settings import RuleSettings, Settings

#: hex digits kept: 48 bits, so two revisions of one gate.toml collide with odds of about
#: one in 10^14, while the value stays short enough to read out and type
LENGTH = 12


def normalised(rules: Sequence[RuleSettings]) -> str:
    """The rules as canonical JSON: what the revision hashes."""
    dumped = [rule.model_dump(mode="json") for rule in rules]
    return json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def revision(settings: Settings) -> str:
    """The revision of `settings`' rules (`LENGTH` hex digits of their SHA-256)."""
    digest = hashlib.sha256(normalised(settings.rules).encode()).hexdigest()
    return digest[:LENGTH]
