"""Tile choice: the committed H200 table answers nearby shapes without autotuning."""
from zyfa.triton_kernels import tuning


def test_tuning_table_covers_nearby_shapes():
    key = tuning.tuning_key("sm90", True, 128, 128, False, 3000)
    near = tuning.nearest_table_entry(key)
    assert near is not None and near.startswith("sm90|fp8|128|128|"), near
    assert tuning.nearest_table_entry(tuning.tuning_key("sm80", True, 128, 128, True, 4096)) is None


def test_tile_config_parse():
    assert tuning.TileConfig.parse("64,128,4,3") == tuning.TileConfig(64, 128, 4, 3)
    for bad in ("64,128,4", "64,128,4,3,168", "a,b,c,d"):
        try:
            tuning.TileConfig.parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_autotune_off_takes_the_default_tile_without_benchmarking(monkeypatch):
    """ZYFA_TRITON_AUTOTUNE=0: a key the table does not cover gets the default tile and no
    candidate is compiled or timed; without it the candidates are timed and the fastest kept."""
    from zyfa.triton_kernels import tuning
    monkeypatch.setattr(tuning, "interpreter_active", lambda: False)
    monkeypatch.setattr(tuning.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tuning, "_CACHE", {})
    key = tuning.tuning_key("sm90", False, 96, 96, True, 4096)       # no table entry for d96
    assert tuning.nearest_table_entry(key) is None
    timed = []

    def bench(cfg):
        timed.append(cfg)
        return 1.0 if cfg == tuning.TileConfig(64, 64, 4, 2) else 2.0
    monkeypatch.setenv("ZYFA_TRITON_AUTOTUNE", "0")
    assert tuning.choose(key, 96, 96, False, bench) == (tuning.TileConfig(128, 64, 8, 2), "default")
    assert timed == []
    monkeypatch.delenv("ZYFA_TRITON_AUTOTUNE")
    assert tuning.choose(key, 96, 96, False, bench) == (tuning.TileConfig(64, 64, 4, 2), "tuned")
    assert len(timed) == sum(tuning.keep(c, 96, 96, False) for c in tuning.CANDIDATES)
