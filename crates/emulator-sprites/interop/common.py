"""What the Sprites client checks share: the emulator's environment (SPRITES_API_URL,
SPRITE_TOKEN, EXECSEAM_SANDBOX, the default sprite), `check` (prints `ok <name>`, or `FAIL` and
exits 1), and a client of the official SDK (sprites-py, pinned in requirements.txt).
"""

import os
import sys

from sprites import SpritesClient

URL = os.environ["SPRITES_API_URL"]
TOKEN = os.environ["SPRITE_TOKEN"]
NAME = os.environ["EXECSEAM_SANDBOX"]


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name}: {detail}", flush=True)
        sys.exit(1)
    print(f"ok {name}", flush=True)


client = SpritesClient(TOKEN, base_url=URL)
