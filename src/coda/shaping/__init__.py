"""Text2potential and potential-based shaping.

- `coda.shaping.math` — per-step and per-chunk shaping terms, shaped returns, the Φ(terminal) = 0 convention.
- `coda.shaping.program` — `StageProgram`, the typed stage plan (data, never code).
- `coda.shaping.text2potential` — plans in words → programs → `StagedPotential`; `canonical_plan(spec)`.
- `coda.shaping.stages` — the registered stage kinds (predicate + progress) over the simulator's predicates.
- `coda.shaping.resolve` — object phrases → scene entities.
"""
