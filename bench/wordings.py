"""Can held-out wordings be grounded? What the text encoder knows of the held-out vocabulary, and which entity a
policy's role pointers pick when the same first state is described with other words.

Part 1, the encoder alone (no policy): for every synonym of a vocabulary tier (colours, shapes, sizes,
container and region nouns), is the canonical word it stands for the nearest of that word class, by the
cosine of sentence embeddings ("the {synonym} block" against "the {word} block" for every canonical word) and
by the best token-level cosine of the synonym inside an instruction against each canonical description (what
the policy's token grounding reads)? Chance is one over the class size. And can anything learned on top of the
encoder do better? A linear probe (softmax regression on sentence embeddings of five frames per word) is
trained to name the colour from the canonical and train-tier colour words and tested on the held-out ones.

Part 2, with checkpoints of a run: on the first state of the run's SFT demos, the argmax of each role pointer
(what the instruction moves, where it goes) against the entities the goal names, with the recorded
instruction, a train-tier wording and a held-out wording of the same goal. For each held-out colour, shape,
size or noun word: in how many held-out wordings it appears and how many of those the pointers get wrong.

Writes `bench/results/wordings.json`:

    {"encoder": {tier: {class: {"sentence": acc, "token": acc, "n": int, "chance": float}}},
     "colour_probe": {"heldout_accuracy": float, "train_words": int, "heldout_words": int},
     "pointer": {checkpoint: {"recorded" | "train" | "heldout": {"n", "moved", "destination"}}},
     "heldout_misses": {checkpoint: {word: {"missed", "seen", "rate"}}}, "run": str, "episodes": int}

Usage:
    python bench/wordings.py                                    # encoder only
    python bench/wordings.py --run runs/hl/s0_push_coda --checkpoints round_000 round_004
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from coda.scene import language as L  # noqa: E402

OUT = Path(__file__).parent / "results" / "wordings.json"


def classes(tier: str) -> dict[str, tuple[dict[str, tuple[str, ...]], str]]:
    """Word class -> (canonical word -> synonyms in `tier`, the sentence frame with {w})."""
    return {
        "colour": (L.COLOR_SYNONYMS[tier], "the {w} block"),
        "shape": (L.SHAPE_SYNONYMS[tier], "the red {w}"),
        "size": (L.SIZE_SYNONYMS[tier], "the {w} red block"),
        "container": (L.CONTAINER_NOUNS[tier], "the red {w}"),
        "region": ({"area": L.REGION_NOUNS[tier]}, "the red {w}"),
    }


def encoder_knowledge(text: Any) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for tier in ("train", "heldout"):
        for name, (syn, frame) in classes(tier).items():
            words = list(syn)
            if len(words) < 2:  # one canonical word: nothing to confuse it with
                continue
            canon = text.encode([frame.format(w=w) for w in words])
            canon_tok = [text.encode_tokens([frame.format(w=w)])[0] for w in words]
            hits_s = hits_t = n = 0
            for i, w in enumerate(words):
                for s in syn[w]:
                    n += 1
                    q = text.encode([frame.format(w=s)])[0]
                    hits_s += int(np.argmax(canon @ q) == i)
                    tq = text.encode_tokens([f"move {frame.format(w=s)} to the left"])[0]
                    hits_t += int(np.argmax([float((t @ tq.T).max()) for t in canon_tok]) == i)
            out.setdefault(tier, {})[name] = {"sentence": hits_s / n, "token": hits_t / n, "n": n,
                                               "chance": 1 / len(words)}
    return out


PROBE_FRAMES = ("the {w} block", "push the {w} cube into the area", "a {w} ball", "the large {w} cylinder",
                "put the small {w} box in the bowl")


def colour_probe(text: Any, steps: int = 500, weight_decay: float = 1e-2) -> dict[str, float]:
    """Held-out accuracy of a linear colour classifier on the encoder's sentence embeddings, trained on the
    canonical and train-tier colour words only."""
    import torch

    colours = list(L.COLOR_SYNONYMS["heldout"])

    def embed(word: str) -> np.ndarray:
        return text.encode([f.format(w=word) for f in PROBE_FRAMES])

    train = [(embed(w), i) for i, c in enumerate(colours) for w in (c, *L.COLOR_SYNONYMS["train"][c])]
    test = [(embed(w).mean(0), i) for i, c in enumerate(colours) for w in L.COLOR_SYNONYMS["heldout"][c]]
    x = torch.tensor(np.concatenate([e for e, _ in train]))
    y = torch.tensor([i for e, i in train for _ in range(len(e))])
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1], len(colours), requires_grad=True)
    b = torch.zeros(len(colours), requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.05)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(x @ w + b, y) + weight_decay * (w**2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    xt = torch.tensor(np.stack([e for e, _ in test]))
    yt = torch.tensor([i for _, i in test])
    acc = float(((xt @ w + b).argmax(1) == yt).float().mean())
    return {"heldout_accuracy": acc, "train_words": len(train), "heldout_words": len(test),
            "chance": 1 / len(colours)}


def heldout_words() -> set[str]:
    words: set[str] = set()
    for syn, _ in classes("heldout").values():
        words |= {x for v in syn.values() for x in v}
    return words


def pointer_accuracy(run: Path, checkpoints: list[str], episodes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    from coda.memory.connect import open_memory
    from coda.policy.checkpoint import load_policy
    from coda.policy.data import DemoDataset
    from coda.scene.spec import ScenarioSpec

    mem = open_memory(run, readonly=True)
    specs = {s.spec_id: ScenarioSpec.from_dict(s.spec) for s in mem.list("scenario")}
    eps = list(DemoDataset(run / "demos" / "round_000").episodes())[:episodes]
    vocab = heldout_words()
    acc: dict[str, Any] = {}
    misses: dict[str, Any] = {}
    for name in checkpoints:
        policy = load_policy(run / "checkpoints" / f"{name}.pt")
        per: dict[str, Any] = {}
        missed: Counter[str] = Counter()
        seen: Counter[str] = Counter()
        for tier in ("recorded", "train", "heldout"):
            hits, n = [0, 0], 0
            for ep in eps:
                obs = dict(ep.observations[0])
                if tier != "recorded":
                    w = L.wordings(specs[ep.spec_id], 1, tier)  # type: ignore[arg-type]
                    if not w:
                        continue
                    obs["instruction"] = w[0]
                with torch.no_grad():
                    pointer = policy.encoder.encode(policy._batch(obs), policy.stats).pointer
                picked = pointer[0].argmax(0).tolist()
                ok = [picked[r] == g for r, g in enumerate(ep.goal_rows[:2])]
                hits = [h + int(o) for h, o in zip(hits, ok)]
                n += 1
                if tier == "heldout":
                    words = [t for t in L.tokens(obs["instruction"]) if t in vocab]
                    seen.update(words)
                    if not all(ok):
                        missed.update(words)
            per[tier] = {"n": n, "moved": hits[0] / max(1, n), "destination": hits[1] / max(1, n)}
        acc[name] = per
        misses[name] = {w: {"missed": missed[w], "seen": seen[w], "rate": round(missed[w] / seen[w], 3)}
                        for w in sorted(seen, key=lambda w: -missed[w] / seen[w])}
    mem.close()
    return acc, misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=None, help="a run directory with round-0 demos and checkpoints")
    ap.add_argument("--checkpoints", nargs="+", default=["round_000"], help="checkpoint names under checkpoints/")
    ap.add_argument("--episodes", type=int, default=120, help="SFT demos whose first state is probed")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from coda.policy.text import text_encoder_for

    text = text_encoder_for("minilm")
    result: dict[str, Any] = {"encoder": encoder_knowledge(text), "colour_probe": colour_probe(text)}
    if args.run is not None:
        result["pointer"], result["heldout_misses"] = pointer_accuracy(args.run, args.checkpoints, args.episodes)
        result["run"], result["episodes"] = str(args.run), args.episodes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for tier, cls in result["encoder"].items():
        for name, r in cls.items():
            print(f"{tier:8s} {name:10s} sentence {r['sentence']:.2f} token {r['token']:.2f} "
                  f"(n {r['n']}, chance {r['chance']:.2f})")
    probe = result["colour_probe"]
    print(f"linear colour probe on held-out words: {probe['heldout_accuracy']:.2f} (chance {probe['chance']:.2f})")
    for ck, per in result.get("pointer", {}).items():
        worst = {w: v["rate"] for w, v in list(result["heldout_misses"][ck].items())[:6]}
        print(ck, {t: (round(v["moved"], 2), round(v["destination"], 2)) for t, v in per.items()}, "worst words:", worst)
    print(f"→ {args.out}")


if __name__ == "__main__":
    main()
