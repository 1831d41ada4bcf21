"""The end-to-end demo on the local default: a small, dirty retail feed through bronze.

Files are generated once, with fixed names: a second run finds them ingested (in the archive)
and adds nothing; ``--fresh`` deletes the lakehouse root and starts over.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from framework.config.model import ProjectConfig

ORDER_FILES = 20
ORDERS_PER_FILE = 500


def generate(project: ProjectConfig, seed: int = 7) -> int:
    """Write the demo's landing files unless they were written before; returns files written."""
    root = Path(project.env.root)
    marker = root / ".demo-generated"
    if marker.exists():
        return 0
    rng = random.Random(seed)
    orders = root / "landing" / "orders"
    orders.mkdir(parents=True, exist_ok=True)
    written = 0
    for f in range(ORDER_FILES):
        lines = []
        for i in range(ORDERS_PER_FILE):
            n = f * ORDERS_PER_FILE + i
            record = {
                "order_id": f"o{n:07d}",
                "customer_id": f"c{rng.randrange(200):04d}",
                "store_id": f"s{rng.randrange(12):02d}",
                "event_time": f"2026-11-{1 + n % 20:02d}T{n % 24:02d}:{n % 60:02d}:00Z",
                "quantity": rng.randint(1, 5),
                "unit_price": f"{rng.uniform(1, 80):.2f}",
                "status": rng.choice(["new", "paid", "shipped"]),
            }
            if f == 3 and i < 25:
                record["coupon"] = f"SAVE{i}"  # a column the schema does not know: rescued
            lines.append(json.dumps(record))
        if f == 5:
            lines[10] = '{"order_id": "o-broken", "quantity": '  # truncated line
            lines[20] = "<html>gateway timeout</html>"  # not JSON at all
        (orders / f"orders-{f:04d}.json").write_text("\n".join(lines) + "\n")
        written += 1
    (orders / "orders-empty.json").write_bytes(b"")  # an unreadable (empty) file
    customers = root / "landing" / "customers"
    customers.mkdir(parents=True, exist_ok=True)
    rows = ["customer_id,name,segment,country,updated_at"]
    rows += [f"c{c:04d},Customer {c},{rng.choice(['retail', 'business'])},"
             f"{rng.choice(['NL', 'DE', 'FR', 'BE'])},2026-10-01T00:00:00Z" for c in range(200)]
    rows.append("c9999,Bad Row,retail,NL,not-a-timestamp,extra")  # does not fit: quarantined
    (customers / "customers.csv").write_text("\n".join(rows) + "\n")
    stores = root / "landing" / "stores"
    stores.mkdir(parents=True, exist_ok=True)
    (stores / "stores.json").write_text("\n".join(
        json.dumps({"store_id": f"s{s:02d}", "name": f"Store {s}",
                    "region": ["north", "south", "east", "west"][s % 4],
                    "opened_on": f"20{10 + s}-03-01"}) for s in range(12)) + "\n")
    marker.touch()
    return written + 3


def reset(project: ProjectConfig) -> None:
    """Delete the local lakehouse root (``--fresh``)."""
    shutil.rmtree(project.env.root, ignore_errors=True)
