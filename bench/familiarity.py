"""Can a policy tell which words of an instruction it has never seen? The familiarity of a word piece, and what
the text encoder makes of the unseen ones.

Per family, the training texts are what a policy's SFT data holds: the instructions of the `sft` split's scenes,
their stored train-tier wordings (`coda.scene.language.wordings`, as many as a demo keeps) and the entity
descriptions. The familiarity of a word piece of another sentence is its best cosine to any word piece of the
training texts (MiniLM's contextual word pieces, what the policy's token grounding reads). Measured for:

- `heldout_colour`: the pieces of the held-out tier's colour words (`COLOR_SYNONYMS["heldout"]`), in the
  instructions of the `instruction` split (held-out wordings of training layouts);
- `heldout_word`: the pieces of the other words that only the held-out tier uses (`heldout_only_words`:
  shape, size, container and region synonyms), in the same instructions;
- `shared_word`: the other pieces of the same held-out instructions (template words, and words training
  texts also use);
- `train_new_sentence`: the pieces of training-tier instructions of other `sft` scenes, left out of the
  training texts (a known word in a sentence never seen).

Scenes are the split generators' draws (only their words are read, so the simulator's validity check is not
run). A familiarity threshold separates the held-out colour words from known words in new sentences where
`heldout_colour`'s largest value lies below `train_new_sentence`'s smallest (`separates_at`: the midpoint). For the held-out colour words, also: is the entity description whose colour
piece lies nearest the synonym's pieces the one of the colour it stands for (among the scene's objects), and
by what margin over the next (what a pointer reading the word would do with it).

Writes `bench/results/familiarity.json`:

    {family: {group: {"n", "min", "p10", "median", "p90", "max"}, "separates_at": float | null,  # groups above
              "colour": {"n", "right", "margin_right": [...quantiles], "margin_wrong": [...]}},
     "training_texts": int, "meta": {...}}

Usage:
    python bench/familiarity.py                 # 100 training scenes and 50 held-out ones per family
    python bench/familiarity.py --fast          # 30 and 15
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from _common import machine, write_result  # noqa: E402
from coda.scene.spec import FAMILIES  # noqa: E402

GROUPS = ("heldout_colour", "heldout_word", "shared_word", "train_new_sentence")


def _quantiles(v: list[float]) -> dict[str, float]:
    a = np.asarray(v, np.float64)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "min": float(a.min()), "p10": float(np.percentile(a, 10)),
            "median": float(np.median(a)), "p90": float(np.percentile(a, 90)), "max": float(a.max())}


def _pieces(enc: Any, tok: Any, text: str) -> list[tuple[str, np.ndarray]]:
    """(word, piece embedding) for every word piece the policy reads of `text` (`encode_tokens`: no [CLS] or
    [SEP]), the word found by the piece's character offset."""
    rows = enc.encode_tokens([text])[0]
    spans = tok(text, return_offsets_mapping=True)["offset_mapping"][1:-1]
    starts = _word_starts(text, text.split())
    out = []
    for (start, _), row in zip(spans, rows):
        word = next((w for w, s in starts if s <= start < s + len(w)), "")
        out.append((word.lower().strip(".,!?"), row))
    return out


def _word_starts(text: str, words: list[str]) -> list[tuple[str, int]]:
    out, pos = [], 0
    for w in words:
        pos = text.index(w, pos)
        out.append((w, pos))
        pos += len(w)
    return out


def family_result(family: str, n_train: int, n_eval: int, enc: Any, tok: Any) -> dict[str, Any]:
    from coda.scene.language import COLOR_SYNONYMS, describe, heldout_only_words, wordings
    from coda.scene.splits import build_split

    def words_only(_spec: Any) -> tuple[bool, str, None]:  # only the words are read: no simulator check
        return True, "", None

    train = build_split(family, "sft", n_train, seed=0, check=words_only).valid
    fresh = build_split(family, "sft", n_eval, seed=1, check=words_only).valid
    held = build_split(family, "instruction", n_eval, seed=1, check=words_only).valid
    texts = sorted({t for s in train for t in (s.instruction, *wordings(s, 4, "train"), *(describe(o) for o in s.objects))})
    vocab = np.concatenate([enc.encode_tokens([t])[0] for t in texts])
    unseen = heldout_only_words()
    colour_words = {w for ws in COLOR_SYNONYMS["heldout"].values() for w in ws}
    groups: dict[str, list[float]] = {g: [] for g in GROUPS}
    for s in held:
        for word, row in _pieces(enc, tok, s.instruction):
            group = "heldout_colour" if word in colour_words else ("heldout_word" if word in unseen else "shared_word")
            groups[group].append(float((vocab @ row).max()))
    for s in fresh:
        for t in (s.instruction, *wordings(s, 2, "train")):
            if t not in texts:
                groups["train_new_sentence"].extend(float((vocab @ row).max()) for _, row in _pieces(enc, tok, t))
    out: dict[str, Any] = {g: _quantiles(v) for g, v in groups.items()}
    top = max(groups["heldout_colour"], default=None)
    low = min(groups["train_new_sentence"], default=None)
    out["separates_at"] = None if top is None or low is None or top >= low else (top + low) / 2
    colour_of = {w: c for c, ws in COLOR_SYNONYMS["heldout"].items() for w in ws}
    right, m_right, m_wrong = 0, [], []
    for s in held:
        colours = sorted({o.color for o in s.objects})
        if len(colours) < 2:
            continue
        cols = {c: enc.encode_tokens([describe(next(o for o in s.objects if o.color == c))])[0] for c in colours}
        for word, row in _pieces(enc, tok, s.instruction):
            c = colour_of.get(word)
            if c is None or c not in cols:
                continue
            best = sorted(((float((cols[k] @ row).max()), k) for k in colours), reverse=True)
            margin = best[0][0] - best[1][0]
            if best[0][1] == c:
                right += 1
                m_right.append(margin)
            else:
                m_wrong.append(margin)
    out["colour"] = {"n": right + len(m_wrong), "right": right, "margin_right": _quantiles(m_right),
                     "margin_wrong": _quantiles(m_wrong)}
    out["training_texts"] = len(texts)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="30 training and 15 held-out scenes per family")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = ap.parse_args(argv)
    from coda.policy.text import text_encoder_for

    enc = text_encoder_for("minilm")
    tok = enc._load().tokenizer
    n_train, n_eval = (30, 15) if args.fast else (100, 50)
    result: dict[str, Any] = {f: family_result(f, n_train, n_eval, enc, tok) for f in args.families}
    result["meta"] = {"machine": machine(), "train_scenes": n_train, "eval_scenes": n_eval, "encoder": enc.model_id,
                      "command": "python bench/familiarity.py" + (" --fast" if args.fast else "")}
    path = write_result("familiarity", result)
    for f in args.families:
        r = result[f]
        print(f, {g: (r[g].get("n"), round(r[g].get("max", float("nan")), 3), round(r[g].get("min", float("nan")), 3))
                  for g in GROUPS}, "separates at", r["separates_at"], "colour", r["colour"]["right"], "/", r["colour"]["n"])
    print("->", path)
    return result


if __name__ == "__main__":
    main()
