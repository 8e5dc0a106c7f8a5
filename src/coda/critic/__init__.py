"""Critics diagnose failed episodes; the verifier accepts a diagnosis only after checks that do not trust them.

- `coda.critic.diagnosis` — the `Diagnosis` schema, its strict JSON schema and parser, `DiagnosisRejected`.
- `coda.critic.base` — `EpisodeRecord`, the `Critic` protocol, `FallbackCritic`, the `CRITICS` registry
  (`privileged`, `vlm`, `noisy`) and `make_critic(cfg)`.
- `coda.critic.vlm` — any OpenAI-compatible chat-completions endpoint with image input.
- `coda.critic.privileged` — diagnoses from the simulator's state trace (`coda.critic.trace`).
- `coda.critic.noisy` — corrupts a seeded fraction of another critic's diagnoses (ground truth for benches).
- `coda.critic.verify` — `Verifier.check(diagnosis, episode, ...) -> Verdict` (its records in
  `coda.critic.verdict`; the counterfactual scene edits are the simulator's: `coda.sim.tabletop.factors`).
- `coda.critic.libero` — diagnoses and verification on LIBERO scenes (scene factors in
  `coda.sim.libero.factors`).

Importing this package is cheap: heavy modules (the openai client, MuJoCo) load only when used.
"""
