"""Grounding: a policy trained on one layout with two different targets goes to the object the instruction
names, also when the instruction calls it by a word it never saw in training; the role pointers follow the
words, not the layout; the pointer and goal-value losses are computed only where the demos record a goal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from coda.policy.data import Episode, run_expert_episode
from coda.policy.features import obs_to_batch
from coda.policy.policy import pointer_loss
from coda.policy.samples import ChunkDataset, TrainBatch
from coda.policy.train import build_policy, train_policy
from coda.scene.spec import ContainerSpec, GoalPredicate, ObjectSpec, ScenarioSpec
from policy_synthetic import tiny_cfg


def _scene(target: str, instruction: str) -> ScenarioSpec:
    """One layout: a red and a blue cube and a gray tray; the goal puts `target` in the tray."""
    return ScenarioSpec(
        family="pick_place",
        objects=(ObjectSpec(name="obj0", shape="box", size=(0.02, 0.02, 0.02), color="red", pos=(0.05, -0.12)),
                 ObjectSpec(name="obj1", shape="box", size=(0.02, 0.02, 0.02), color="blue", pos=(-0.06, 0.1))),
        containers=(ContainerSpec(name="tray", kind="tray", size=(0.07, 0.07, 0.02), color="gray", pos=(0.14, 0.12)),),
        instruction=instruction,
        goal=(GoalPredicate(name="in", args=(target, "tray")),),
    )


def _rows(spec: ScenarioSpec) -> tuple[int, ...]:
    names = [e.name for e in (*spec.objects, *spec.containers)]
    return tuple(names.index(a) for a in spec.goal[0].args)


TRAIN = {"obj0": "put the small red cube in the gray tray", "obj1": "put the small blue cube in the gray tray"}
HELD_OUT = {"obj0": "put the small scarlet cube in the gray tray", "obj1": "put the small azure cube in the gray tray"}


@pytest.fixture(scope="module")
def grounded(minilm):
    """A tiny policy trained on expert demos of both goals in the one layout (canonical words only)."""
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    torch.set_num_threads(1)
    env = TabletopEnv()
    demos: list[Episode] = []
    for target, text in TRAIN.items():
        spec = _scene(target, text)
        for _ in range(2):  # the expert is deterministic: two copies weigh both goals equally
            ep = run_expert_episode(env, spec, expert_for(spec))
            assert ep.success
            ep.goal_rows = _rows(spec)
            demos.append(ep)
    data = ChunkDataset(demos, minilm, chunk_len=8)
    cfg = tiny_cfg(hidden=32, chunk_len=8, n_action_steps=4, batch_size=64, lr=3e-3, text_model="minilm")
    policy = build_policy(cfg, data, minilm)
    train_policy(policy, data, steps=500)
    yield policy, env
    env.close()


def _rollout(policy, env, spec: ScenarioSpec) -> tuple[bool, set[str]]:
    """(success, the objects the gripper grasped) of one episode."""
    from coda.sim.tabletop import predicates as P

    obs, _ = env.reset_to(spec)
    policy.reset()
    grasped: set[str] = set()
    for _ in range(env.config.max_steps):
        obs, _, term, trunc, info = env.step(policy.select_action(obs))
        grasped |= {o.name for o in spec.objects if P.grasped(env.state(), o.name)}
        if term or trunc:
            break
    return bool(info["success"]), grasped


@pytest.mark.parametrize("words", [TRAIN, HELD_OUT], ids=["trained words", "held-out synonym"])
def test_the_policy_moves_the_object_the_instruction_names(grounded, words) -> None:
    policy, env = grounded
    for target, text in words.items():
        success, grasped = _rollout(policy, env, _scene(target, text))
        assert grasped == {target}, f"'{text}': grasped {sorted(grasped)}, not {target}"
        assert success, f"'{text}': the named cube did not end in the tray"


def test_the_role_pointers_follow_the_words_not_the_layout(grounded) -> None:
    policy, env = grounded
    for words in (TRAIN, HELD_OUT):
        for target, text in words.items():
            spec = _scene(target, text)
            obs, _ = env.reset_to(spec)
            with torch.no_grad():
                enc = policy.encoder.encode(obs_to_batch([obs], policy.text), policy.stats)
            picked = enc.pointer[0].argmax(dim=0).tolist()  # per role: the entity row
            assert picked == list(_rows(spec)), f"'{text}': roles point at rows {picked}, want {_rows(spec)}"


def test_pointer_loss_counts_only_the_roles_a_goal_has() -> None:
    logits = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [float("-inf"), float("-inf")]]])  # (B=1, M=3, R=2)
    loss, acc = pointer_loss(logits, torch.tensor([[0, -1]]))  # the second role is absent
    want = -torch.log_softmax(torch.tensor([2.0, 0.0]), dim=0)[0]
    assert loss is not None and torch.isclose(loss, want) and acc == 1.0
    assert pointer_loss(logits, torch.tensor([[-1, -1]])) == (None, pytest.approx(math.nan, nan_ok=True))
    loss, acc = pointer_loss(logits, torch.tensor([[2, 1]]))  # a padding row is never a target
    assert loss is not None and acc == 1.0


def test_batches_carry_the_goal_labels_of_their_episodes(hashing) -> None:
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    env = TabletopEnv()
    specs = [_scene("obj1", TRAIN["obj1"]), _scene("obj0", TRAIN["obj0"])]
    eps = []
    for spec, value in zip(specs, (0.5, float("nan"))):
        ep = run_expert_episode(env, spec, expert_for(spec))
        ep.goal_rows, ep.goal_value = _rows(spec), value
        eps.append(ep)
    env.close()
    data = ChunkDataset(eps, hashing, chunk_len=4)
    batch = data.bc_batch(torch.arange(data.n_bc))
    first = batch.goal_rows[: eps[0].length]
    assert (first == torch.tensor(_rows(specs[0]))).all() and (batch.goal_rows[-1] == torch.tensor(_rows(specs[1]))).all()
    values = batch.goal_value.numpy()
    assert np.all(values[: eps[0].length] == 0.5) and np.isnan(values[-1])


def test_the_goal_value_reads_remembered_wordings_but_never_the_queried_one_itself() -> None:
    from coda.policy.networks import VALUE_BINS, GoalValue, value_of

    g = GoalValue(text_dim=3, entity_dim=2, hidden=8)
    for p in g.prior.parameters():
        torch.nn.init.zeros_(p)  # no prior: the words alone
    mem = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]]), dim=1)
    g.set_memory(mem, torch.tensor([1.0, 1.0, 0.5]))
    entity = torch.zeros(2, 2)
    with torch.no_grad():
        logits = g(torch.stack([mem[0], mem[2]]), entity)
    tau = float(g.log_tau.detach().exp())
    # "open" asked in its own words: its exact copy is left out, its remembered paraphrase (cos 0.8) speaks
    assert float(logits[0, VALUE_BINS.index(1.0)]) == pytest.approx(0.8 * tau)
    assert float(logits[1, VALUE_BINS.index(0.5)]) == pytest.approx(0.0)  # the only "half" wording is itself
    assert value_of(logits)[0].item() == 1.0


def test_in_use_a_remembered_wording_answers_with_its_own_value_over_the_prior() -> None:
    """Training leaves a sample's own wording out; in use (eval mode) a wording remembered with its value
    decides, even where its neighbours' evidence and the prior point elsewhere ("open ... halfway" vs "open ...")."""
    from coda.policy.networks import VALUE_BINS, GoalValue, value_of

    g = GoalValue(text_dim=3, entity_dim=2, hidden=8)
    for p in g.prior.parameters():
        torch.nn.init.zeros_(p)
    torch.nn.init.constant_(g.prior[-1].bias, 0.0)
    with torch.no_grad():
        g.prior[-1].bias[VALUE_BINS.index(1.0)] = 5.0  # a prior fitted to fully opened drawers
    half = torch.nn.functional.normalize(torch.tensor([[1.0, 0.3, 0.0]]), dim=1)
    full = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0, 0.0]]), dim=1)
    g.set_memory(torch.cat([half, full]), torch.tensor([0.5, 1.0]))
    entity = torch.zeros(1, 2)
    g.train()
    assert value_of(g(half, entity)).item() == 1.0  # its own wording left out: the neighbour and the prior win
    g.eval()
    with torch.no_grad():
        assert value_of(g(half, entity)).item() == 0.5
        unseen = torch.nn.functional.normalize(torch.tensor([[1.0, 0.15, 0.2]]), dim=1)
        assert value_of(g(unseen, entity)).item() == 1.0  # an unseen wording: evidence and prior as in training


def test_in_training_the_network_acts_on_the_goal_value_it_is_given(hashing) -> None:
    """The actor reads the demo's own goal value where one is recorded (as it reads the goal's rows), not its
    own reading of it: the same observation with another given value encodes differently, with none (NaN) it
    encodes as with the value it reads itself."""
    from coda.policy.networks import value_of
    from policy_synthetic import expert_episodes, make_specs

    eps = expert_episodes(make_specs(3, 0))
    data = ChunkDataset(eps, hashing, chunk_len=4)
    policy = build_policy(tiny_cfg(frame="gripper"), data, hashing)
    ob = obs_to_batch([eps[0].observations[0]], hashing)
    with torch.no_grad():
        own = policy.encoder.encode(ob, policy.stats)
        read = float(value_of(own.goal_value)[0, 0])
        other = 0.0 if read != 0.0 else 1.0
        same = policy.encoder.encode(ob, policy.stats, values=torch.tensor([read]))
        none = policy.encoder.encode(ob, policy.stats, values=torch.tensor([float("nan")]))
        given = policy.encoder.encode(ob, policy.stats, values=torch.tensor([other]))
    assert torch.equal(same.z, own.z) and torch.equal(none.z, own.z)
    assert not torch.allclose(given.z, own.z)


def test_a_checkpoint_keeps_the_remembered_goals(tmp_path, hashing) -> None:
    from coda.policy.checkpoint import load_policy, save_checkpoint
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    env = TabletopEnv()
    spec = _scene("obj0", TRAIN["obj0"])
    ep = run_expert_episode(env, spec, expert_for(spec))
    env.close()
    ep.goal_rows, ep.goal_value, ep.wordings = _rows(spec), 0.5, ("place the small red cube in the gray plate",)
    data = ChunkDataset([ep], hashing, chunk_len=4)
    emb, values = data.goal_memory()
    assert emb.shape[0] == 2 and values.tolist() == [0.5, 0.5]  # the instruction and its wording
    policy = build_policy(tiny_cfg(), data, hashing)
    save_checkpoint(policy, tmp_path / "p.pt")
    back = load_policy(tmp_path / "p.pt", text=hashing)
    assert torch.equal(back.encoder.goal.memory, policy.encoder.goal.memory) and back.encoder.goal.memory.shape[0] == 2


def test_the_layout_prior_learns_the_data_as_collected_not_as_weighted(hashing) -> None:
    """With `natural_prior`, a sample's gradient to the pointers' layout logits is scaled by (uniform draw
    probability / its draw probability), so the oversampled source teaches the layout prior as much as its
    episodes' share, while its gradient to the language logits, and every logit's value, stay as they are."""
    from coda.sim.tabletop.env import TabletopEnv
    from coda.sim.tabletop.experts import expert_for

    env = TabletopEnv()
    eps = []
    for target in ("obj0", "obj0", "obj0", "obj1"):
        spec = _scene(target, TRAIN[target])
        ep = run_expert_episode(env, spec, expert_for(spec))
        ep.goal_rows = _rows(spec)
        eps.append(ep)
    env.close()
    sources = ["replay", "replay", "replay", "expert"]
    weights = {"replay": 1.0, "expert": 1.0}
    data = ChunkDataset(eps, hashing, chunk_len=4, sources=sources, source_weights=weights, natural_prior=True)
    plain = ChunkDataset(eps, hashing, chunk_len=4, sources=sources, source_weights=weights)
    assert plain.bc_layout_scale is None and data.bc_layout_scale is not None
    new = torch.tensor([s == "expert" for s in data.bc_source])
    share = float(new.float().mean())  # the generated episode's share of the samples
    assert torch.allclose(data.bc_layout_scale[new], torch.tensor(share / 0.5))  # drawn half the time
    assert torch.allclose(data.bc_layout_scale[~new], torch.tensor((1 - share) / 0.5))
    assert float((data.bc_prob * data.bc_layout_scale).sum()) == pytest.approx(1.0)  # uniform over samples

    policy = build_policy(tiny_cfg(frame="task"), data, hashing)
    idx = torch.nonzero(new).flatten()

    def grads(d: ChunkDataset) -> tuple[Tensor, Tensor, float]:
        policy.zero_grad()
        loss, _ = policy(TrainBatch(d.bc_batch(idx)))
        loss.backward()
        flat = lambda m: torch.cat([p.grad.flatten() for p in m.parameters()])  # noqa: E731
        return flat(policy.encoder.layout_pointer), flat(policy.encoder.pointer), float(loss.detach())

    lay, lang, loss = grads(data)
    lay0, lang0, loss0 = grads(plain)
    assert loss == loss0 and torch.equal(lang, lang0)
    assert torch.allclose(lay, lay0 * share / 0.5, atol=1e-7) and float(lay0.abs().sum()) > 0

    # from the round-0 demos alone (`engine.layout_prior = "replay"`): the generated episode teaches it nothing
    only = ChunkDataset(eps, hashing, chunk_len=4, sources=sources, source_weights=weights, natural_prior=True,
                        prior_sources=("replay",))
    assert only.bc_layout_scale is not None and float(only.bc_layout_scale[new].abs().sum()) == 0.0
    assert torch.allclose(only.bc_layout_scale[~new], torch.tensor(1.0 / 0.5))  # a replay sample: drawn half the time
    assert float((only.bc_prob * only.bc_layout_scale).sum()) == pytest.approx(1.0)  # uniform over replay samples
    lay1, lang1, loss1 = grads(only)
    assert loss1 == loss0 and torch.equal(lang1, lang0) and float(lay1.abs().sum()) == 0.0
