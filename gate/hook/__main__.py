"""`python -m gate.hook`: the command agents' hook configurations run (`gate init` writes it).

Stop signals are caught before the hook's imports, as `gate hook` does (`gate.hook.start`).
"""

import sys

from gate.hook.start import catch

catch()

from gate.hook.command import main  # noqa: E402  (after catch(): see gate.hook.start)

raise SystemExit(main(sys.argv[1:]))
