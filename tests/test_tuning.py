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
