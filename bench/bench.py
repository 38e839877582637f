"""chatledger against zett-agent's own SQL store and the floor: see :mod:`chatledger.tools.bench`.

    python bench/bench.py --dsn postgresql://postgres@127.0.0.1/postgres \\
        --dsn mysql://root@127.0.0.1/mysql --dsn sqlite:///tmp/ [--quick] [--json bench.json]
"""

from __future__ import annotations

import sys

from chatledger.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
