"""LoCoMo's train half (``../shared/data/locomo/``) as ``bench_quality.py`` reads it.

Stored exactly as the data's README says the held-out figure is taken: every turn one
memory (``table="messages"``, ``room_id`` its conversation, ``created_at`` its session's
date, its ``dia_id`` in metadata), as ``"Speaker: text"`` with ``" [shares a photo:
caption]"`` where the turn has a caption (``plain``), or as a conversation store would
keep it (the text alone, ``speaker`` set, ``session_id`` per session: ``store``). Each
question of categories 1-4 searches its own conversation with ``k=20``; recall@k is the
share of its evidence turns among the first k hits. Category 5 (adversarial) has no
evidence and is left out. The data is CC BY-NC 4.0: measured here, never shipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
FILE = LOCOMO / "locomo-train.json"

#: The README's names of categories 1-4.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
#: The depth every question searches at, as the held-out procedure does.
K = 20

_SESSION = re.compile(r"session_(\d+)$")


@dataclass(frozen=True)
class Turn:
    id: str  # conversation and dia_id: "conv-26/D1:3"
    conversation: str
    session: str
    speaker: str
    dia_id: str
    text: str  # the text alone
    plain: str  # "Speaker: text [shares a photo: caption]"
    at: float


@dataclass(frozen=True)
class Question:
    id: str
    conversation: str
    text: str
    evidence: tuple[str, ...]  # turn ids, as given (a malformed dia_id matches nothing)
    category: str


def available() -> bool:
    return FILE.is_file()


def parse_date(text: str) -> float:
    """ "1:56 pm on 8 May, 2023" as Unix seconds (read as UTC)."""
    at = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return at.replace(tzinfo=UTC).timestamp()


def load(conversations: int | None = None) -> tuple[list[Turn], list[Question]]:
    """The turns and the questions with evidence of the first ``conversations``
    conversations (all five by default)."""
    data = json.loads(FILE.read_text(encoding="utf-8"))[:conversations]
    turns: list[Turn] = []
    questions: list[Question] = []
    for conv in data:
        cid = conv["sample_id"]
        c = conv["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in c if (m := _SESSION.match(key)) and c[key]
        )
        for n, key in sessions:
            at = parse_date(c[f"{key}_date_time"])
            for t in c[key]:
                caption = t.get("blip_caption")
                plain = f"{t['speaker']}: {t['text']}"
                if caption:
                    plain += f" [shares a photo: {caption}]"
                turns.append(
                    Turn(
                        f"{cid}/{t['dia_id']}",
                        cid,
                        f"{cid}/session_{n}",
                        t["speaker"],
                        t["dia_id"],
                        t["text"],
                        plain,
                        at,
                    )
                )
        for i, qa in enumerate(conv["qa"]):
            if qa.get("category") not in CATEGORIES or not qa.get("evidence"):
                continue
            questions.append(
                Question(
                    f"{cid}/q{i}",
                    cid,
                    qa["question"],
                    tuple(f"{cid}/{e}" for e in qa["evidence"]),
                    CATEGORIES[qa["category"]],
                )
            )
    return turns, questions
