"""Container healthcheck: exit 0 when the local service answers 200 on a route (default `/readyz`).

    python scripts/healthcheck.py [/route]

The port comes from SSI_PORT (default 8000), as for `ssi serve`. Only the standard library is used,
because the slim images have no curl.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main(argv: list[str]) -> int:
    route = argv[1] if len(argv) > 1 else "/readyz"
    url = f"http://127.0.0.1:{os.environ.get('SSI_PORT', '8000')}{route}"
    try:
        with urllib.request.urlopen(url, timeout=float(os.environ.get("SSI_HEALTHCHECK_TIMEOUT", "3"))) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
