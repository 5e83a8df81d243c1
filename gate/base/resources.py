"""Find bundled data folders (templates, migrations) in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # gate/, above gate/base/


def resource_path(name: str) -> Path:
    """The folder `name` ("templates", "migrations", "static").

    A wheel carries them inside the package (`gate/_bundled/<name>`); a checkout or an
    editable install keeps them at the top level beside `gate/`.
    """
    bundled = _PACKAGE_DIR / "_bundled" / name
    if bundled.is_dir():
        return bundled
    checkout = _PACKAGE_DIR.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"gate's {name!r} folder is missing from this installation")
