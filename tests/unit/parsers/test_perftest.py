"""perftest parsers against real captures (tests/fixtures/perftest-*/) and edge cases."""

from __future__ import annotations

import pytest
from captures import fixture_names, read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import get_parser, to_data
from fabricops.parsers.perftest import parse_bw, parse_lat
from fabricops_lab.emul import perftest as emul


def bw(name):
    return parse_bw(read_fixture("perftest-bw", name))


def lat(name):
    return parse_lat(read_fixture("perftest-lat", name))


@pytest.mark.parametrize("name", fixture_names("perftest-bw"))
def test_every_bw_capture_parses_with_results(name):
    rec = bw(name)
    assert rec.results and rec.test.endswith("BW Test") and rec.device


@pytest.mark.parametrize("name", fixture_names("perftest-lat"))
def test_every_lat_capture_parses_with_results(name):
    rec = lat(name)
    assert rec.results and rec.test.endswith("Latency Test")


def test_ndr_write_bw_gbits_with_cpu_warning_inside_table():
    rec = bw("csegpu_ndr_write_bw_gbits_client.txt")
    assert rec.test == "RDMA_Write BW Test"
    assert (rec.device, rec.link_type, rec.side, rec.units) == ("mlx5_0", "IB", "client", "Gb/sec")
    assert rec.cpu_freq_warning is True
    assert rec.qps == 1 and rec.mtu == 4096 and rec.connection_type == "RC" and rec.gid_index is None
    assert rec.tx_depth == 128 and rec.cq_moderation == 1 and rec.rdma_cm is False
    assert rec.header["CQE Poll Batch"] == "Dynamic" and rec.header["Lock-free"] == "OFF"
    assert len(rec.results) == 1
    r = rec.results[0]
    assert (r.bytes, r.iterations, r.bw_peak, r.bw_average, r.msg_rate_mpps) == (65536, 5000, 392.38, 392.34,
                                                                                0.748336)
    assert rec.local_addresses[0].lid == "0x01" and rec.local_addresses[0].rkey == "0x1fff00"
    assert rec.remote_addresses[0].qpn == "0x0049" and rec.remote_addresses[0].vaddr == "0x007778e64eb000"


def test_send_bw_mib_units_and_leading_message():
    rec = bw("csegpu_ndr_send_bw_mibsec_client.txt")
    assert rec.test == "Send BW Test" and rec.units == "MiB/sec"
    assert rec.results[0].bw_average == 46557.03 and rec.results[0].iterations == 1000
    assert rec.messages == ["Disabling dynamic polling"]
    assert rec.local_addresses[0].rkey is None  # send tests print no RKey/VAddr


def test_multi_qp_rdma_cm_capture():
    rec = bw("spark_write_bw_q4_rdmacm_gbits_client.txt")
    assert rec.qps == 4 and rec.rdma_cm is True and rec.data_exchange_method == "rdma_cm"
    assert rec.mtu == 1024 and rec.units == "Gb/sec"
    assert [a.qpn for a in rec.local_addresses] == ["0x03ec", "0x03ed", "0x03ee", "0x03ef"]
    assert len(rec.remote_addresses) == 4
    assert rec.results[0].iterations == 20000 and rec.results[0].bw_average == 111.71


def test_sweep_mb_with_warning_between_every_row():
    rec = bw("a100_hdr_write_bw_sweep_mbsec_client.txt")
    assert rec.units == "MB/sec" and rec.cpu_freq_warning
    assert [r.bytes for r in rec.results] == [1 << i for i in range(1, 24)]
    assert rec.results[0].bw_average == 4.94
    assert rec.results[-1].bw_peak == 23326.82 and rec.results[-1].msg_rate_mpps == 0.002915
    assert rec.cq_moderation == 100


def test_server_and_client_of_the_same_run():
    srv = bw("comet_write_bw_mbsec_server.txt")
    cli = bw("comet_write_bw_mbsec_client.txt")
    assert srv.side == "server" and cli.side == "client"
    assert srv.tx_depth is None and cli.tx_depth == 128
    assert srv.local_addresses[0].qpn == cli.remote_addresses[0].qpn == "0x0a1b"
    assert srv.local_addresses[0].lid == "0x11" and cli.local_addresses[0].lid == "0x3c"
    assert srv.results[0].bw_average == cli.results[0].bw_average == 6033.76
    assert srv.mtu == 2048


def test_post_list_roce_capture_without_address_lines():
    rec = bw("issue273_write_postlist_gbits_client.txt")
    assert rec.test == "RDMA_Write Post List BW Test"
    assert rec.link_type == "Ethernet" and rec.gid_index == 2 and rec.post_list == 128
    assert rec.header["PCIe relax order"] == "Unsupported"
    assert rec.results[0].iterations == 224958464 and rec.results[0].bw_peak == 0.0
    assert rec.local_addresses == []


def test_driver_warning_between_dashes_is_kept_as_message():
    rec = bw("pib4_atomic_bw_mbsec_client.txt")
    assert rec.messages == ["Device not recognized to implement inline feature. Disabling it"]
    assert rec.outstanding_reads == 16 and rec.results[0].bw_average == 1.67


def test_lat_with_percentiles_and_cpu_warnings():
    rec = lat("csegpu_ndr_send_lat_client.txt")
    assert rec.test == "Send Latency Test" and rec.cpu_freq_warning and rec.max_inline_data == 236
    r = rec.results[0]
    assert (r.bytes, r.iterations, r.t_min_us, r.t_max_us, r.t_typical_us) == (2, 1000, 1.24, 5.19, 1.27)
    assert (r.t_avg_us, r.t_stdev_us, r.p99_us, r.p99_9_us) == (1.27, 0.0, 1.37, 5.19)


def test_lat_rdma_cm_capture():
    rec = lat("spark_write_lat_rdmacm_client.txt")
    assert rec.rdma_cm and rec.tx_depth == 1 and rec.mode == "iterations"
    assert rec.results[0].p99_us == 1.57 and rec.results[0].t_typical_us == 1.47


# Old perftest (the RESULT_FMT_LAT header of perftest 2.x/3.x) has no t_avg/stdev/percentile
# columns. Constructed from that header string; no full public capture was found.
OLD_LAT = """------------------------------------------------------------------
                    RDMA_Write Latency Test
 Number of qps   : 1
 Connection type : RC
 Mtu             : 2048B
 Link type       : IB
 Max inline data : 400B
 Data ex. method : Ethernet
------------------------------------------------------------------
 local address: LID 0x03 QPN 0x004c PSN 0x9e1b5b RKey 0x001604 VAddr 0x000000017c1002
 remote address: LID 0x04 QPN 0x004a PSN 0x0d8dc3 RKey 0x00e604 VAddr 0x00000001ea4002
------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]
 2       1000          1.16           15.47        1.21
------------------------------------------------------------------
"""


def test_old_lat_without_percentile_columns():
    rec = parse_lat(OLD_LAT.replace("\n", "\r\n"))
    r = rec.results[0]
    assert (r.t_min_us, r.t_max_us, r.t_typical_us) == (1.16, 15.47, 1.21)
    assert r.t_avg_us is None and r.p99_us is None and r.p99_9_us is None
    assert rec.mtu == 2048 and rec.max_inline_data == 400 and rec.device is None


def test_lat_duration_mode_columns():
    text = OLD_LAT.replace(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n"
                           " 2       1000          1.16           15.47        1.21\n",
                           " #bytes        #iterations       t_avg[usec]    tps average\n"
                           " 2             9153201           1.09           917034.41\n")
    rec = parse_lat(text)
    assert rec.mode == "duration"
    assert rec.results[0].t_avg_us == 1.09 and rec.results[0].tps_average == 917034.41
    assert rec.results[0].t_min_us is None


def test_old_write_server_prints_header_only():
    text = """
************************************
* Waiting for client to connect... *
************************************
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 CQ Moderation   : 100
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x05 QPN 0x0123 PSN 0x111111 RKey 0x001234 VAddr 0x007f0000000000
 remote address: LID 0x06 QPN 0x0456 PSN 0x222222 RKey 0x005678 VAddr 0x007f1000000000
---------------------------------------------------------------------------------------
"""
    rec = parse_bw(text)
    assert rec.side == "server" and rec.results == [] and rec.device == "mlx5_0"


def test_duration_peak_warning_and_bidirectional_title():
    text = (" WARNING: BW peak won't be measured in this run.\n"
            + read_fixture("perftest-bw", "spark_write_bw_q4_rdmacm_gbits_client.txt")
            .replace("RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test"))
    rec = parse_bw(text)
    assert rec.bidirectional and not rec.peak_measured and rec.mode == "duration"


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_input_raises(text):
    with pytest.raises(ParseError, match="empty input"):
        parse_bw(text)
    with pytest.raises(ParseError, match="empty input"):
        parse_lat(text)


def test_wrong_tool_raises():
    with pytest.raises(ParseError, match="perftest-lat"):
        parse_bw(read_fixture("perftest-lat", "spark_write_lat_rdmacm_client.txt"))
    with pytest.raises(ParseError, match="perftest-bw"):
        parse_lat(read_fixture("perftest-bw", "comet_write_bw_mbsec_client.txt"))
    ibstat = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
    with pytest.raises(ParseError, match="no test title"):
        parse_bw(ibstat)


def test_truncated_client_output_raises():
    full = read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt")
    cut = full[: full.index(" 65536      5000")]
    with pytest.raises(ParseError, match="truncated"):
        parse_bw(cut)
    lat_full = read_fixture("perftest-lat", "spark_write_lat_rdmacm_client.txt")
    with pytest.raises(ParseError, match="truncated"):
        parse_lat(lat_full[: lat_full.index(" 2       1000")])


def test_registered_in_parser_table_and_serialisable():
    rec = get_parser("perftest-bw")(read_fixture("perftest-bw", "csegpu_ndr_write_bw_gbits_client.txt"))
    data = to_data(rec)
    assert data["results"][0]["bw_average"] == 392.34 and data["units"] == "Gb/sec"
    assert get_parser("perftest-lat") is parse_lat


def test_emulator_rendering_parses_back():
    opts = emul.Options(verb="read", kind="bw", report_gbits=True, qps=2)
    facts = {"device": "mlx5_1", "link_layer": "Ethernet", "mtu": 4096, "gid_index": 3, "lid": 0,
             "gid": [0] * 10 + [255, 255, 10, 0, 0, 7]}
    qps = [{"qpn": 0x100 + k, "psn": 0xABC, "rkey": 0x1FFF00, "vaddr": 0x7F0000001000} for k in range(2)]
    lines = emul.render_header(opts, facts, server_side=False)
    lines += emul._address_lines(opts, facts, qps, "local") + emul._address_lines(opts, facts, qps, "remote")
    lines += [emul.RESULT_LINE, emul.table_header(opts),
              emul.render_row(opts, {"bytes": 65536, "iterations": 10000, "avg_gbps": 384.12,
                                     "peak_gbps": 384.3}), emul.RESULT_LINE]
    rec = parse_bw("\n".join(lines))
    assert rec.test == "RDMA_Read BW Test" and rec.outstanding_reads == 16 and rec.gid_index == 3
    assert rec.local_addresses[1].qpn == "0x0101" and rec.local_addresses[0].out == "0x10"
    assert rec.local_addresses[0].gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:07"
    assert rec.results[0].bw_average == 384.12
    assert rec.results[0].msg_rate_mpps == pytest.approx(0.732651, abs=1e-6)
