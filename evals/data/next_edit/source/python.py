"""Hand-written next-edit cases: Python (see scripts/build_curated_next_edit.py for the format)."""

SETTINGS_PY = '''import json
from pathlib import Path


def load_settings(path: Path) -> dict:
    raw = path.read_text(encoding="utf-8")
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object")
    data.setdefault("theme", "light")
    data.setdefault("font_size", 12)
    return data


def save_settings(path: Path, settings: dict) -> None:
    text = json.dumps(settings, indent=2, sort_keys=True)
    path.write_text(text + "\\n", encoding="utf-8")


def merge_settings(base: dict, override: dict) -> dict:
    merged = dict(base)
    merged.update(override)
    return merged
'''

INVENTORY_PY = '''from collections import defaultdict


class Inventory:
    def __init__(self):
        self.items = defaultdict(int)
        self.log = []

    def add(self, sku, count):
        self.items[sku] += count
        self.log.append(("add", sku, count))

    def restock(self, deliveries):
        for delivery in deliveries:
            sku = delivery["sku"]
            count = delivery["count"]
            if count <= 0:
                continue
            self.add(sku, count)

    def total(self):
        return sum(self.items.values())
'''

REPORT_PY = '''import csv
import io


def rows_to_csv(rows):
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["id", "name", "email"])
    for row in rows:
        user_id = row["id"]
        writer.writerow([user_id, row["name"], row["email"]])
    return buf.getvalue()


def count_domains(rows):
    domains = {}
    for row in rows:
        domain = row["email"].rsplit("@", 1)[-1]
        domains[domain] = domains.get(domain, 0) + 1
    return domains
'''

TIMING_PY = '''import logging
import time

log = logging.getLogger(__name__)


def run_job(job):
    start = time.monotonic()
    log.info("starting %s", job.name)
    try:
        job.run()
    except Exception:
        log.exception("job %s failed", job.name)
        raise
    elapsed = time.monotonic() - start
    log.info("done %s in %.1fs", job.name, elapsed)
    return job.result


def run_all(jobs):
    return [run_job(job) for job in jobs]
'''

FETCH_PY = '''import requests

DEFAULT_TIMEOUT = 10


def make_session():
    session = requests.Session()
    session.headers["User-Agent"] = "fetcher/1.0"
    return session


def fetch_page(session, url, timeout=DEFAULT_TIMEOUT):
    response = session.get(url, timeout=timeout)
    response.raise_for_status()
    return response.text


def fetch_all(session, urls):
    pages = {}
    for url in urls:
        pages[url] = fetch_page(session, url)
    return pages
'''

STORE_PY = '''import sqlite3


class UserStore:
    def __init__(self, path):
        self.conn = sqlite3.connect(path)
        self.conn.row_factory = sqlite3.Row

    def get_user(self, user_id):
        cur = self.conn.execute("SELECT * FROM users WHERE id = ?", (user_id,))
        row = cur.fetchone()
        return dict(row) if row else None

    def add_user(self, name, email):
        cur = self.conn.execute(
            "INSERT INTO users (name, email) VALUES (?, ?)", (name, email)
        )
        self.conn.commit()
        return cur.lastrowid

    def close(self):
        self.conn.close()
'''

VIEWS_PY = '''from http import HTTPStatus

from store import UserStore

store = UserStore("app.db")


def show_user(request, uid):
    user = store.get_user(uid)
    if user is None:
        return {"status": HTTPStatus.NOT_FOUND, "body": "no such user"}
    return {"status": HTTPStatus.OK, "body": user}


def create_user(request):
    data = request.json()
    uid = store.add_user(data["name"], data["email"])
    return {"status": HTTPStatus.CREATED, "body": {"id": uid}}
'''

SHAPES_PY = '''import math
from enum import Enum


class Shape(Enum):
    CIRCLE = "circle"
    SQUARE = "square"


def parse_shape(name: str) -> Shape:
    try:
        return Shape(name.lower())
    except ValueError:
        raise ValueError(f"unknown shape {name!r}") from None


def area(shape: Shape, size: float) -> float:
    if shape is Shape.CIRCLE:
        return math.pi * size * size
    return size * size


def perimeter(shape: Shape, size: float) -> float:
    if shape is Shape.CIRCLE:
        return 2 * math.pi * size
    return 4 * size


def describe(shape: Shape, size: float) -> str:
    return f"{LABELS[shape]} of size {size}: area {area(shape, size):.2f}"


LABELS = {
    Shape.CIRCLE: "Circle",
    Shape.SQUARE: "Square",
}
'''

CLIENT_PY = '''import requests


class ApiClient:
    """A small client for the billing API."""

    def __init__(self, base_url, timeout=5.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()

    def url(self, path):
        return f"{self.base_url}/{path.lstrip('/')}"

    def get(self, path, **params):
        response = self._session.get(self.url(path), params=params, timeout=self.timeout)
        response.raise_for_status()
        return response.json()

    def close(self):
        self._session.close()
'''

PATHS_PY = '''import os
from pathlib import Path


def project_paths(root: Path) -> dict[str, Path]:
    """The well-known folders of a project checkout."""
    return {
        "src": os.path.join(root, "src"),
        "tests": os.path.join(root, "tests"),
        "docs": os.path.join(root, "docs"),
        "build": os.path.join(root, "build"),
    }


def ensure_dirs(root: Path) -> None:
    for path in project_paths(root).values():
        Path(path).mkdir(parents=True, exist_ok=True)
'''

RECT_PY = '''class Rect:
    def __init__(self, width, height):
        self._width = width
        self._height = height

    @property
    def width(self):
        return self._width

    def area(self):
        return self._width * self._height

    def scaled(self, factor):
        return Rect(self._width * factor, self._height * factor)

    def __repr__(self):
        return f"Rect({self._width}, {self._height})"
'''

CACHE_PY = '''import time


class TTLCache:
    def __init__(self, ttl=60.0):
        self.ttl = ttl
        self._data = {}

    def get(self, key):
        entry = self._data.get(key)
        if entry is None:
            return None
        value, stamp = entry
        # Retrun the cached value only while it is fresh
        if time.monotonic() - stamp < self.ttl:
            return value
        del self._data[key]
        return None

    def put(self, key, value):
        self._data[key] = (value, time.monotonic())
'''

SEARCH_PY = '''def find_words(lines, prefix):
    result = []
    for line in lines:
        for word in line.split():
            if word.startswith(prefix):
                result.append(word)
    return result


def longest_line(lines):
    result = ""
    for line in lines:
        if len(line) > len(result):
            result = line
    return result


def count_blank(lines):
    return sum(1 for line in lines if not line.strip())
'''

CONFIG_PY = '''"""Runtime flags of the worker."""

DEBUG = True
MAX_WORKERS = 4
QUEUE_SIZE = 256


def worker_options(verbose=True):
    return {
        "debug": DEBUG,
        "workers": MAX_WORKERS,
        "queue": QUEUE_SIZE,
        "verbose": verbose,
        "daemon": True,
    }


def describe():
    flags = worker_options()
    return ", ".join(f"{k}={v}" for k, v in flags.items())
'''

CASES = [
    {
        "id": "py-below-rename-local",
        "category": "next-edit/below",
        "language": "python",
        "files_before": {"settings.py": SETTINGS_PY},
        "steps": [{"path": "settings.py", "old": "    data = json.loads(raw)", "new": "    config = json.loads(raw)"}],
        "cursor": {"path": "settings.py", "after": "    config"},
        "expected": [
            {"path": "settings.py", "old": "isinstance(data, dict)", "new": "isinstance(config, dict)"},
            {"path": "settings.py", "old": '    data.setdefault("theme"',
             "new": '    config.setdefault("theme"'},
            {"path": "settings.py", "old": '    data.setdefault("font_size"',
             "new": '    config.setdefault("font_size"'},
            {"path": "settings.py", "old": "    return data\n", "new": "    return config\n"},
        ],
        "note": "renamed data -> config at its assignment; every remaining use (the isinstance check, both "
                "setdefault lines, the return) is in the editable region, so all four are renamed together",
    },
    {
        "id": "py-below-rename-loop-local",
        "category": "next-edit/below",
        "language": "python",
        "files_before": {"inventory.py": INVENTORY_PY},
        "steps": [{"path": "inventory.py", "old": '            count = delivery["count"]',
                   "new": '            quantity = delivery["count"]'}],
        "cursor": {"path": "inventory.py", "after": "            quantity"},
        "expected": [
            {"path": "inventory.py", "old": "if count <= 0:", "new": "if quantity <= 0:"},
            {"path": "inventory.py", "old": "            self.add(sku, count)",
             "new": "            self.add(sku, quantity)"},
        ],
        "note": "local count renamed to quantity in restock; its two remaining uses (the check and the add call) "
                "are right below, in the region (add()'s own parameter count is another scope and stays)",
    },
    {
        "id": "py-below-rename-loop-var",
        "category": "next-edit/below",
        "language": "python",
        "files_before": {"report.py": REPORT_PY},
        "steps": [{"path": "report.py", "old": "    for row in rows:\n        user_id",
                   "new": "    for user in rows:\n        user_id"}],
        "cursor": {"path": "report.py", "after": "    for user"},
        "expected": [
            {"path": "report.py", "old": '        user_id = row["id"]',
             "new": '        user_id = user["id"]'},
            {"path": "report.py", "old": '[user_id, row["name"], row["email"]]',
             "new": '[user_id, user["name"], user["email"]]'},
        ],
        "note": "loop variable row -> user in rows_to_csv; its remaining uses are user_id's line and the writerow "
                "line, both in the region; count_domains' own row loop (also partly in the region) is untouched",
    },
    {
        "id": "py-above-rename-at-use",
        "category": "next-edit/above",
        "language": "python",
        "files_before": {"timing.py": TIMING_PY},
        "steps": [{"path": "timing.py", "old": "job.name, elapsed)", "new": "job.name, duration)"}],
        "cursor": {"path": "timing.py", "after": "job.name, duration"},
        "expected": {"path": "timing.py", "old": "    elapsed = time.monotonic() - start",
                     "new": "    duration = time.monotonic() - start"},
        "note": "the user renamed the local at its use; no other use below, the assignment one line above "
                "still says elapsed",
    },
    {
        "id": "py-above-param-in-signature",
        "category": "next-edit/above",
        "language": "python",
        "files_before": {"fetch.py": FETCH_PY},
        "steps": [{"path": "fetch.py", "old": "session.get(url, timeout=timeout)",
                   "new": "session.get(url, timeout=timeout, headers=headers)"}],
        "expected": {"path": "fetch.py", "old": "def fetch_page(session, url, timeout=DEFAULT_TIMEOUT):",
                     "new": "def fetch_page(session, url, timeout=DEFAULT_TIMEOUT, headers=None):"},
        "note": "the body now passes headers, which fetch_page does not take: the signature one line above "
                "gets an optional headers parameter",
    },
    {
        "id": "py-jump-method-rename-other-file",
        "category": "next-edit/jump",
        "language": "python",
        "files_before": {"store.py": STORE_PY, "views.py": VIEWS_PY},
        "steps": [{"path": "store.py", "old": "    def get_user(self, user_id):", "new": "    def find_user(self, user_id):"}],
        "cursor": {"path": "store.py", "after": "    def find_user"},
        "expected": {"path": "views.py", "old": "store.get_user(uid)", "new": "store.find_user(uid)"},
        "note": "method renamed at its definition; its only caller is show_user in views.py",
    },
    {
        "id": "py-jump-enum-member-label",
        "category": "next-edit/jump",
        "language": "python",
        "files_before": {"shapes.py": SHAPES_PY},
        "steps": [{"path": "shapes.py", "old": '    SQUARE = "square"\n', "new": '    SQUARE = "square"\n    TRIANGLE = "triangle"\n'}],
        "cursor": {"path": "shapes.py", "after": '    TRIANGLE = "triangle"'},
        "expected": {"path": "shapes.py", "old": '    Shape.SQUARE: "Square",\n',
                     "new": '    Shape.SQUARE: "Square",\n    Shape.TRIANGLE: "Triangle",\n'},
        "note": "a new enum member; LABELS at the end of the file (about 30 lines below) maps every member and "
                "describe() would KeyError without it; area/perimeter fall through to a default",
    },
    {
        "id": "py-complete-init-assign",
        "category": "next-edit/complete",
        "language": "python",
        "files_before": {"client.py": CLIENT_PY},
        "steps": [{"path": "client.py", "old": "def __init__(self, base_url, timeout=5.0):",
                   "new": "def __init__(self, base_url, timeout=5.0, retries=3):"}],
        "cursor": {"path": "client.py", "after": "retries=3"},
        "expected": {"path": "client.py", "old": "        self.timeout = timeout\n",
                     "new": "        self.timeout = timeout\n        self.retries = retries\n"},
        "note": "a new constructor parameter; like its neighbours it is stored on self, after self.timeout",
    },
    {
        "id": "py-complete-pathlib-pattern",
        "category": "next-edit/complete",
        "language": "python",
        "files_before": {"paths.py": PATHS_PY},
        "steps": [
            {"path": "paths.py", "old": '"src": os.path.join(root, "src"),', "new": '"src": root / "src",'},
            {"path": "paths.py", "old": '"tests": os.path.join(root, "tests"),', "new": '"tests": root / "tests",'},
        ],
        "expected": [
            {"path": "paths.py", "old": '"docs": os.path.join(root, "docs"),',
             "new": '"docs": root / "docs",'},
            {"path": "paths.py", "old": '"build": os.path.join(root, "build"),',
             "new": '"build": root / "build",'},
        ],
        "note": "two of four os.path.join entries converted to pathlib's /; the other two (docs, build) are right "
                "below, in the region (the then unused import os is outside it)",
    },
    {
        "id": "py-complete-pasted-property",
        "category": "next-edit/complete",
        "language": "python",
        "files_before": {"rect.py": RECT_PY},
        "steps": [
            {"path": "rect.py", "old": "        return self._width\n\n",
             "new": "        return self._width\n\n    @property\n    def width(self):\n        return self._width\n\n"},
            {"path": "rect.py", "old": "    def width(self):", "new": "    def height(self):", "occurrence": 2},
        ],
        "cursor": {"path": "rect.py", "after": "    def height"},
        "expected": {"path": "rect.py", "old": "        return self._width\n", "new": "        return self._height\n",
                     "occurrence": 2},
        "note": "the width property was copy-pasted and renamed height; its body still returns _width",
    },
    {
        "id": "py-noise-comment-typo",
        "category": "no-edit/noise",
        "language": "python",
        "files_before": {"cache.py": CACHE_PY},
        "steps": [{"path": "cache.py", "old": "# Retrun the cached", "new": "# Return the cached"}],
        "expected": None,
        "note": "a typo fixed in a comment; nothing follows from it",
    },
    {
        "id": "py-noise-rename-other-scope",
        "category": "no-edit/noise",
        "language": "python",
        "files_before": {"search.py": SEARCH_PY},
        "steps": [
            {"path": "search.py", "old": "    result = []", "new": "    matches = []"},
            {"path": "search.py", "old": "                result.append(word)", "new": "                matches.append(word)"},
            {"path": "search.py", "old": "    return result\n\n\ndef longest", "new": "    return matches\n\n\ndef longest"},
        ],
        "cursor": {"path": "search.py", "after": "    return matches"},
        "expected": None,
        "note": "find_words' result renamed to matches at all three uses; longest_line has its own result "
                "local, which must stay",
    },
    {
        "id": "py-noise-flag-literal",
        "category": "no-edit/noise",
        "language": "python",
        "files_before": {"config.py": CONFIG_PY},
        "steps": [{"path": "config.py", "old": "DEBUG = True", "new": "DEBUG = False"}],
        "expected": None,
        "note": "a flag flipped True -> False; the other True literals (verbose, daemon) are unrelated",
    },
]
