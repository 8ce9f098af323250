"""The fabric graph from the inventory, and OpenSM-ftree routing (by destination position on its
leaf) checked on hand-computed cases."""

from __future__ import annotations

import pytest

from fabricops.model.fabric import Fabric, FabricError, dirlink_str, fat_tree, roce_sport


def _two_tier(hosts=8, leaves=4, spines=2, per_spine=1, os_port="swp{n}", hca="mlx5_0", netdev="ibp26s0"):
    """The lab's two-tier shape (SPEC-18 §1): host i on leaf ((i-1) % leaves) + 1, hosts on leaf
    ports 1.., uplinks after them; spine ports 1.. in leaf order."""
    cab, links = [], []
    per_leaf = {}
    for i in range(1, hosts + 1):
        leaf = f"leaf{(i - 1) % leaves + 1}"
        per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
        cab.append(
            {
                "host": f"gpu{i:02d}",
                "hca": hca,
                "port": 1,
                "netdev": netdev,
                "switch": leaf,
                "switch_port": os_port.format(n=per_leaf[leaf]),
            }
        )
    down = max(per_leaf.values())
    for li in range(leaves):
        for s in range(spines):
            for u in range(per_spine):
                links.append(
                    {
                        "switch_a": f"leaf{li + 1}",
                        "port_a": os_port.format(n=down + s * per_spine + u + 1),
                        "switch_b": f"spine{s + 1}",
                        "port_b": os_port.format(n=li * per_spine + u + 1),
                        "tier": "leaf_spine",
                    }
                )
    return cab, links


def _lids(hosts=8, hca="mlx5_0"):
    return {(f"gpu{i:02d}", f"{hca}/1"): i + 1 for i in range(1, hosts + 1)}  # the lab: hosts from LID 2


def test_inventory_builds_one_fabric_with_every_cable():
    cab, links = _two_tier()
    (f,) = Fabric.from_inventory(cab, links, lids=_lids())
    assert f.link_layer == "InfiniBand"
    assert f.leaves == ["leaf1", "leaf2", "leaf3", "leaf4"] and f.spines == ["spine1", "spine2"]
    assert len(f.endpoints) == 8 and len(f.cables) == 8 + 8
    assert len(f.directed()) == 2 * 16
    assert f.leaf_of(("gpu05", "mlx5_0/1")) == "leaf1"
    assert ("leaf1", "swp3") in {d[0] for d in f.uplinks("leaf1")}
    assert [dirlink_str(d) for d in f.uplinks("leaf2")] == [
        "leaf2:swp3>spine1:swp2",
        "leaf2:swp4>spine2:swp2",
    ]


def test_dmodk_hand_computed():
    # gpu02 on leaf2 -> gpu03, leaf3's first host port (pos 0): n_up 2, uplink 0 % 2 = 0 (spine1),
    # one parallel link: k = 0 -> spine1 swp3 -> leaf3 swp3
    cab, links = _two_tier()
    (f,) = Fabric.from_inventory(cab, links, lids=_lids())
    p = f.path(("gpu02", "mlx5_0/1"), ("gpu03", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p] == [
        "gpu02:mlx5_0/1>leaf2:swp1",
        "leaf2:swp3>spine1:swp2",
        "spine1:swp3>leaf3:swp3",
        "leaf3:swp1>gpu03:mlx5_0/1",
    ]
    # gpu03 -> gpu06, leaf2's second host port (pos 1): 1 % 2 = 1 -> spine2
    p = f.path(("gpu03", "mlx5_0/1"), ("gpu06", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p[1:3]] == ["leaf3:swp4>spine2:swp3", "spine2:swp2>leaf2:swp4"]
    # same leaf: straight through the leaf
    p = f.path(("gpu01", "mlx5_0/1"), ("gpu05", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p] == ["gpu01:mlx5_0/1>leaf1:swp1", "leaf1:swp2>gpu05:mlx5_0/1"]


def test_ftree_parallel_links_down_mirror_the_rank_of_the_uplink():
    # 2 links from each leaf to each spine: n_up 4, uplinks sorted (spine, port): idx 0,1 spine1; 2,3 spine2
    cab, links = _two_tier(hosts=8, per_spine=2)
    (f,) = Fabric.from_inventory(cab, links, lids=_lids())
    # gpu02 (leaf2) -> gpu05 (leaf1 swp2, pos 1): 1 % 4 = 1 -> leaf2's second uplink (spine1, leaf port
    # swp4, spine port swp4); rank 1 among leaf2's spine1 uplinks -> k = 1 % 2 = 1 -> spine1's second
    # link to leaf1 (spine ports 1,2 face leaf1 -> swp2 -> leaf1 swp4)
    p = f.path(("gpu02", "mlx5_0/1"), ("gpu05", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p[1:3]] == ["leaf2:swp4>spine1:swp4", "spine1:swp2>leaf1:swp4"]
    # gpu08 (leaf4 swp2, pos 1) from leaf1: uplink 1 (swp4 -> spine1 swp2); k = 1 -> spine1 swp8 -> leaf4 swp4
    p = f.path(("gpu01", "mlx5_0/1"), ("gpu08", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p[1:3]] == ["leaf1:swp4>spine1:swp2", "spine1:swp8>leaf4:swp4"]
    # gpu04 (leaf4 swp1, pos 0) from leaf1: uplink 0 (swp3 -> spine1 swp1); k = 0 -> spine1 swp7 -> leaf4 swp3
    p = f.path(("gpu01", "mlx5_0/1"), ("gpu04", "mlx5_0/1"))
    assert [dirlink_str(d) for d in p[1:3]] == ["leaf1:swp3>spine1:swp1", "spine1:swp7>leaf4:swp3"]


def test_natural_port_order_not_text_order():
    cab, links = _two_tier(hosts=4, leaves=2, spines=1, per_spine=11)
    (f,) = Fabric.from_inventory(cab, links, lids=_lids(4))
    ups = [d[0][1] for d in f.uplinks("leaf1")]
    assert ups[:3] == ["swp3", "swp4", "swp5"] and ups[-1] == "swp13"


def test_roce_cross_leaf_path_is_unknown_same_leaf_known():
    cab, links = _two_tier(hca="mlx5_1", netdev="enp170s0f0np0")
    (f,) = Fabric.from_inventory(cab, links)
    assert f.link_layer == "Ethernet"
    assert f.path(("gpu01", "mlx5_1/1"), ("gpu02", "mlx5_1/1")) is None
    assert len(f.path(("gpu01", "mlx5_1/1"), ("gpu05", "mlx5_1/1"))) == 2
    # with the flow's hash the ECMP choice is flow % n_up
    p = f.path(("gpu01", "mlx5_1/1"), ("gpu02", "mlx5_1/1"), flow=3)
    assert dirlink_str(p[1]) == "leaf1:swp4>spine2:swp1"


def test_ib_path_does_not_depend_on_lids():
    # ftree routes by the destination's position on its leaf: with, without or with other LIDs the
    # path is the same (was: D-mod-k by LID, unknown without one)
    cab, links = _two_tier()
    (bare,) = Fabric.from_inventory(cab, links)
    (lidded,) = Fabric.from_inventory(cab, links, lids=_lids())
    other = {e: 100 + 7 * i for i, e in enumerate(lidded.endpoints)}
    (odd,) = Fabric.from_inventory(cab, links, lids=other)
    ib = "mlx5_0/1"
    for src, dst in [(("gpu01", ib), ("gpu02", ib)), (("gpu03", ib), ("gpu06", ib))]:
        assert bare.path(src, dst) is not None
        assert bare.path(src, dst) == lidded.path(src, dst) == odd.path(src, dst)


def test_rail_families_are_separate_fabrics():
    ib, ib_links = _two_tier()
    roce, roce_links = _two_tier(hca="mlx5_1", netdev="enp170s0f0np0")
    roce = [dict(c, switch="r" + c["switch"]) for c in roce]
    roce_links = [dict(x, switch_a="r" + x["switch_a"], switch_b="r" + x["switch_b"]) for x in roce_links]
    fabrics = Fabric.from_inventory(ib + roce, ib_links + roce_links)
    assert [f.link_layer for f in fabrics] == ["InfiniBand", "Ethernet"]
    # single switch per rail, no ISLs: one fabric per switch
    single = [dict(c, switch="sw1", switch_port=str(i)) for i, c in enumerate(ib)]
    single += [dict(c, switch="sw2", switch_port=str(i)) for i, c in enumerate(roce)]
    assert [len(f.endpoints) for f in Fabric.from_inventory(single, [])] == [8, 8]


@pytest.mark.parametrize(
    "mutate,words",
    [
        (lambda c, lk: c[3].pop("switch_port"), "fabricops_cabling entry 4 (gpu04 mlx5_0) lacks switch_port"),
        (lambda c, lk: c[3].update(switch_port="swp1", switch="leaf1"), "leaf1 port swp1 is used twice"),
        (
            lambda c, lk: lk[0].update(port_a="swp1"),
            "fabricops_switch_links entry 1 (leaf1 swp1 -> spine1 swp1): leaf1 port swp1 is used twice",
        ),
        (lambda c, lk: lk[0].update(tier="spine_core"), "only two-tier (leaf_spine) fabrics are modelled"),
        (lambda c, lk: lk[0].update(switch_b="leaf2", port_b="swp9"), "links leaf1 (leaf) to leaf2 (leaf)"),
        (lambda c, lk: c.append(dict(c[0])), "gpu01 mlx5_0/1 is cabled twice"),
    ],
)
def test_bad_inventory_is_one_sentence_naming_the_entry(mutate, words):
    cab, links = _two_tier()
    mutate(cab, links)
    with pytest.raises(FabricError) as exc:
        Fabric.from_inventory(cab, links)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_fat_tree_shape_and_roce_sport_rule():
    f = fat_tree(64, 8, 2, 4)
    assert len(f.leaves) == 8 and len(f.spines) == 2 and len(f.uplinks("leaf3")) == 8
    assert len(f.directed()) == 2 * (64 + 8 * 8)
    # rdma_calc_flow_label on lqpn*rqpn, folded to 14 bits | 0xC000
    assert 0xC000 <= roce_sport(0x1234, 0x5678) <= 0xFFFF
    v = 0x1234 * 0x5678
    fl = (v ^ (v >> 20) ^ (v >> 40)) & 0xFFFFF
    assert roce_sport(0x1234, 0x5678) == (fl & 0x3FFF) | ((fl & 0xFC000) >> 14) | 0xC000
