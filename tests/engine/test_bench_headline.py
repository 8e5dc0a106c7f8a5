"""bench/headline.py's bookkeeping: the sizes it reports are the ones the runs used, and its table shows each
strategy's paired difference to coda; its figure pools each split over the families."""

from __future__ import annotations

from types import ModuleType

import pytest

from bench_module import load_bench
from coda.policy.stats import wilson_interval

SPLITS = ("sft", "position", "instruction", "task", "object", "distractor", "physics")


@pytest.fixture(scope="module")
def headline() -> ModuleType:
    return load_bench("headline")


def test_sizes_are_the_last_override_of_each_field(headline) -> None:
    got = headline.sizes([*headline.SIZES, "engine.rounds=6", "engine.demo_budget=8"])
    assert got["rounds"] == 6 and got["labels_per_round"] == 8
    assert got["generation_budget_per_round"] == 64 and got["eval_scenes_per_split"] == 30
    assert headline.sizes([])["rounds"] is None


def test_coda_sparse_runs_only_where_the_actor_reads_the_critic(headline) -> None:
    chosen, left_out = headline.default_strategies(headline.SIZES)
    assert "coda-sparse" not in chosen and "coda" in chosen and set(left_out) == {"coda-sparse"}
    assert "by construction" in left_out["coda-sparse"]
    for extra in ("engine.improvement=awr", "engine.value_guided_samples=4"):
        chosen, left_out = headline.default_strategies([*headline.SIZES, extra])
        assert chosen == list(headline.CLOSED_LOOP) and left_out == {}


def _strategy(ood: float, paired: dict | None = None) -> dict:
    r = {"ood_success": ood, "ci95": [ood - 0.05, ood + 0.05], "id_success": 0.9,
         "per_family": {"push": {sp: ood for sp in SPLITS}}, "ood_per_seed": [ood]}
    if paired:
        r["paired_vs_coda"] = paired
    return r


def test_table_shows_the_paired_difference_to_coda(headline) -> None:
    result = {"strategies": {"coda": _strategy(0.5), "dr": _strategy(0.4, {"diff": -0.1, "ci95": [-0.2, -0.02],
                                                                            "p": 0.012, "n": 180})},
              "seeds": 1, "wall_seconds": 60.0, "sft_to_coda_ratio": None, "best_closed_loop": "dr",
              "coda_minus_best_closed_loop_pp": 10.0, **headline.sizes(headline.SIZES)}
    md = headline.markdown(result, "python bench/headline.py")
    row = next(line for line in md.splitlines() if line.startswith("| dr |"))
    assert "-10.0 [-20.0, -2.0], p=0.012" in row
    assert next(line for line in md.splitlines() if line.startswith("| coda |")).count("–") == 1
    assert "coda − best closed-loop baseline (dr): 10.0 points" in md


def test_table_has_each_familys_splits(headline) -> None:
    coda, dr = _strategy(0.5), _strategy(0.4)
    dr["per_family"]["drawer"] = {sp: 0.25 for sp in SPLITS}
    result = {"strategies": {"coda": coda, "dr": dr}, "seeds": 1, "wall_seconds": 60.0, "sft_to_coda_ratio": None,
              "best_closed_loop": "dr", "coda_minus_best_closed_loop_pp": 10.0, **headline.sizes(headline.SIZES)}
    md = headline.markdown(result, "python bench/headline.py").split("Per family")[1]
    drawer = md.split("**drawer**")[1].split("**push**")[0]
    assert "| dr | " + " | ".join(["0.25"] * len(SPLITS)) + " |" in drawer
    assert "| coda | " + " | ".join(["nan"] * len(SPLITS)) + " |" in drawer  # coda has no drawer runs
    assert "| coda | " + " | ".join(["0.50"] * len(SPLITS)) + " |" in md.split("**push**")[1]


def test_the_figure_pools_each_split_over_families_with_its_interval(tmp_path, headline) -> None:
    plot = load_bench("headline_plot")
    coda, dr = _strategy(0.5), _strategy(0.4, {"diff": -0.1, "ci95": [-0.2, -0.02], "p": 0.012, "n": 180})
    coda["per_family"] = {"push": {sp: 1.0 for sp in SPLITS}, "drawer": {sp: 0.5 for sp in SPLITS}}
    rates = plot.split_rates(coda, n_split=120)
    assert rates["task"][0] == 0.75 and rates["task"][1:] == wilson_interval(90, 120)
    result = {"strategies": {"coda": coda, "dr": dr}, "seeds": 1, **headline.sizes(headline.SIZES)}
    plot.draw(result, tmp_path / "h.png")
    from PIL import Image

    assert Image.open(tmp_path / "h.png").size == (1650, 528)


def test_the_wall_time_sums_every_invocation_killed_ones_up_to_their_last_finished_run(tmp_path, headline) -> None:
    import json

    assert headline.read_invocations(tmp_path) == []  # --report on runs that no invocation finished
    (tmp_path / "invocations.jsonl").write_text(json.dumps({"argv": [], "wall_seconds": 10.0}) + "\n")
    (tmp_path / "invocations").mkdir()
    (tmp_path / "invocations" / "20261208T010000-1.json").write_text(
        json.dumps({"argv": [], "wall_seconds": 30.0, "finished": False}))
    (tmp_path / "invocations" / "20261208T020000-2.json").write_text(
        json.dumps({"argv": [], "wall_seconds": 5.0, "finished": True}))
    got = headline.read_invocations(tmp_path)
    assert [i["wall_seconds"] for i in got] == [10.0, 30.0, 5.0] and sum(i["wall_seconds"] for i in got) == 45.0
