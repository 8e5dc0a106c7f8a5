"""Text embeddings: real MiniLM, the per-string cache, the store shared by processes, and the hashing stand-in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coda.policy.text import (
    MINILM_ID,
    UNFAMILIAR_WORDS,
    HashingTextEncoder,
    TextEncoderError,
    text_encoder_for,
    unfamiliar_variants,
)
from coda.scene.language import TIERS, vocabulary
from coda.scene.spec import PALETTE


def test_minilm_embeds_and_grounds_descriptions(minilm) -> None:
    texts = ["put the small red cube in the tray", "small red cube", "large blue cylinder", ""]
    emb = minilm.encode(texts)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb[:3], axis=1), 1.0, atol=1e-5)
    assert not emb[3].any(), "padding embeds to zeros"
    # the instruction is closer to the object it names than to another one: grounding in one space
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.1
    assert minilm.model_id == MINILM_ID


def test_cache_returns_identical_rows_and_counts_distinct_strings(minilm) -> None:
    n0 = len(minilm)
    a = minilm.encode(["a green ball", "a green ball", "a brown block"])
    assert len(minilm) == n0 + 2
    np.testing.assert_array_equal(a[0], a[1])
    np.testing.assert_array_equal(minilm.encode(["a green ball"])[0], a[0])


def test_minilm_embeddings_do_not_depend_on_the_batch() -> None:
    """A string embeds to the same bits alone, among others, or in another order (resume sees the same)."""
    from coda.policy.text import TextEncoder

    target = "place the crimson cube onto the azure plate"
    others = ["a", "stack the small green block on the large yellow block please, carefully and slowly", "tray"]
    alone, crowd, reordered = TextEncoder(), TextEncoder(), TextEncoder()
    a = alone.encode([target])[0]
    b = crowd.encode([*others, target])[-1]
    c = reordered.encode([target, *reversed(others)])[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    ta = alone.encode_tokens([target])[0]
    tb = crowd.encode_tokens([*others, target])[-1]
    np.testing.assert_array_equal(ta, tb)


def test_one_model_pass_gives_both_embeddings_bit_for_bit() -> None:
    """A text new to both caches is embedded once for its sentence and token rows; they are the bits the
    two separate passes give (the sentence normalised as `normalize_embeddings` does, [CLS]/[SEP] dropped)."""
    import torch

    from coda.policy.text import TextEncoder

    enc = TextEncoder()
    texts = ["push the jade block to the navy zone", "a", "tray"]
    calls = []
    run = enc._run
    enc._run = lambda text, **kw: calls.append(kw.get("output_value", "sentence_embedding")) or run(text, **kw)
    sentences, tokens = enc.encode(texts), enc.encode_tokens(texts)
    assert calls == [None, None, None]  # one pass per text, nothing for the second cache
    for t, s, tok in zip(texts, sentences, tokens, strict=True):
        alone = run(t, normalize_embeddings=True, convert_to_numpy=True)
        np.testing.assert_array_equal(s, alone)
        rows = run(t, output_value="token_embeddings")
        rows = np.asarray(rows.detach().numpy() if isinstance(rows, torch.Tensor) else rows, np.float32)[1:-1]
        rows = rows if len(rows) else alone.reshape(1, -1)
        np.testing.assert_array_equal(tok, rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12))


def test_minilm_embeddings_do_not_depend_on_threads_and_loading_leaves_the_rng_alone() -> None:
    import torch

    from coda.policy.text import TextEncoder

    target = "put the small yellow cylinder into the left drawer"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.manual_seed(7)
        two = TextEncoder().encode([target])[0]
        after_load = torch.rand(3)
        torch.set_num_threads(1)
        torch.manual_seed(7)
        one = TextEncoder().encode([target])[0]
    finally:
        torch.set_num_threads(threads)
    torch.manual_seed(7)
    np.testing.assert_array_equal(one, two)
    assert torch.equal(after_load, torch.rand(3))  # building the model drew nothing from the global generator


def test_hashing_is_deterministic_and_rejects_non_strings() -> None:
    a = HashingTextEncoder().encode(["small red cube"])
    b = HashingTextEncoder().encode(["small red cube"])
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TextEncoderError, match=r"text 1 must be a str, got int \(3\)"):
        HashingTextEncoder().encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TextEncoderError, match="unknown text model 'bert'"):
        text_encoder_for("bert")


def test_unfamiliar_words_are_no_scene_word_and_variants_swap_some_words() -> None:
    """The stand-in words name nothing a scene, tier or palette uses; each variant keeps the text's length and
    replaces at least one of its words, and only with stand-ins; about the asked share of words is replaced;
    the same text gives the same variants."""
    scene_words = set(PALETTE).union(*(vocabulary(t) for t in TIERS))
    assert len(set(UNFAMILIAR_WORDS)) == len(UNFAMILIAR_WORDS) and not set(UNFAMILIAR_WORDS) & scene_words
    text = "stack the small red cube on the large blue block"
    variants = unfamiliar_variants(text, 200)
    assert variants == unfamiliar_variants(text, 200) and variants[:3] == unfamiliar_variants(text, 3)
    swapped = []
    for v in variants:
        diff = [i for i, (a, b) in enumerate(zip(text.split(), v.split())) if a != b]
        assert len(v.split()) == len(text.split()) and diff
        assert all(v.split()[i] in UNFAMILIAR_WORDS for i in diff)
        swapped.append(len(diff) / len(text.split()))
    assert 0.3 < float(np.mean(swapped)) < 0.5  # a third of the words, plus the one always replaced
    assert unfamiliar_variants("", 3) == () and unfamiliar_variants(text, 0) == ()


def test_a_shared_store_gives_back_the_bits_without_running_the_model(tmp_path: Path, monkeypatch) -> None:
    from coda.policy.text import EmbeddingStore

    texts = ["push the red cube to the left", "red cube", "", "a blue bowl"]
    first = HashingTextEncoder()
    first.store = EmbeddingStore(tmp_path / "t.sqlite", first.model_id, first.dim)
    sentences, tokens = first.encode(texts), first.encode_tokens(texts)
    assert first.embedded == 3 and len(first.store) == 3  # "" is never embedded nor stored

    later = HashingTextEncoder()  # another process: an empty memory cache, the same file
    later.store = EmbeddingStore(tmp_path / "t.sqlite", later.model_id, later.dim)
    monkeypatch.setattr(later, "_embed_both", lambda t: pytest.fail(f"the model ran on {t!r}"))
    np.testing.assert_array_equal(later.encode_tokens(texts[:2])[1], tokens[1])  # tokens first, then sentences
    np.testing.assert_array_equal(later.encode(texts), sentences)
    for a, b in zip(later.encode_tokens(texts), tokens):
        np.testing.assert_array_equal(a, b)
    assert later.embedded == 0

    other = EmbeddingStore(tmp_path / "t.sqlite", "another/model", first.dim)  # another model's rows are not read
    assert other.get(texts) == {} and len(other) == 0


def test_a_store_that_is_not_sqlite_is_a_one_line_error(tmp_path: Path) -> None:
    from coda.policy.text import EmbeddingStore

    bad = tmp_path / "t.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    enc = HashingTextEncoder()
    enc.store = EmbeddingStore(bad, enc.model_id, enc.dim)
    with pytest.raises(TextEncoderError, match="text cache .*t.sqlite") as e:
        enc.encode(["a red cube"])
    assert "\n" not in str(e.value)


def test_use_text_cache_gives_the_shared_minilm_encoder_its_store(tmp_path: Path) -> None:
    from coda.policy.text import text_cache_path, use_text_cache
    from coda.runtime.config import RuntimeConfig, text_cache_file

    assert text_cache_file(RuntimeConfig(), tmp_path / "runs" / "r1") == (tmp_path / "runs" / ".text_cache.sqlite").resolve()
    assert text_cache_file(RuntimeConfig(text_cache="off"), tmp_path / "r1") is None
    assert RuntimeConfig.model_validate({"text_cache": False}).text_cache is None  # `--set runtime.text_cache=off`, read as YAML
    assert text_cache_file(RuntimeConfig(text_cache="~/c.sqlite"), tmp_path) == Path("~/c.sqlite").expanduser()
    before = text_cache_path()
    try:
        use_text_cache(tmp_path / "c.sqlite")
        enc = text_encoder_for("minilm")  # made lazily: loading the model waits for a string to embed
        assert enc.store is not None and enc.store.path == tmp_path / "c.sqlite"
        assert text_encoder_for("hashing").store is None  # the stand-in is cheaper than a lookup
        use_text_cache(None)
        assert enc.store is None and text_cache_path() is None
    finally:
        use_text_cache(before)
