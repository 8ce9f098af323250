"""nccl-tests parser: real captures (text, several versions), -J JSON, edge cases."""

import json

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.model.collectives import busbw_factor
from fabricops.parsers import parse as parse_tool
from fabricops.parsers import to_data
from fabricops.parsers.nccl_tests import parse

TOOL = "nccl-tests"


def test_h100_two_nodes_16_ranks():
    rec = parse(read_fixture(TOOL, "h100-16rank-2node-allreduce.txt"))
    assert rec.format == "text"
    assert rec.ranks == 16 and len(rec.devices) == 16
    d8 = rec.devices[8]
    assert (d8.rank, d8.group, d8.pid, d8.host, d8.device, d8.bus_id, d8.name) == (
        8,
        0,
        6733,
        "ztan-mig-gq73",
        0,
        "0000:04:00",
        "NVIDIA H100 80GB HBM3",
    )
    assert (rec.nthreads, rec.ngpus, rec.min_bytes, rec.max_bytes, rec.warmup_iters, rec.iters) == (
        1,
        1,
        8,
        8589934592,
        5,
        20,
    )
    assert len(rec.results) == len(rec.results_in_place) == 31
    last = rec.results[-1]
    assert (last.bytes, last.count, last.type, last.redop, last.root) == (
        8589934592,
        2147483648,
        "float",
        "sum",
        -1,
    )
    assert (last.time_us, last.algbw, last.busbw, last.wrong) == (47535.0, 180.71, 338.82, 0)
    ip = rec.results_in_place[-1]
    assert (ip.time_us, ip.algbw, ip.busbw) == (47743.0, 179.92, 337.35)
    assert rec.results[0].bytes == 8 and rec.results[0].time_us == 135.8
    assert rec.avg_busbw == 70.742 and rec.out_of_bounds == 0 and rec.complete
    # no binary name printed: inferred from busbw/algbw = 2(n-1)/n with n = 16 and redop sum
    assert (rec.collective, rec.collective_from) == ("all_reduce", "inferred")
    assert last.busbw / last.algbw == pytest.approx(busbw_factor("all_reduce", 16), rel=0.01)


def test_a100_old_format_redop_no_root_error_column():
    rec = parse(read_fixture(TOOL, "a100-8gpu-allreduce-old-error-column.txt"))
    assert rec.ranks == 8 and rec.devices[0].group is None and rec.devices[0].bus_id == "0x00"
    assert rec.devices[7].name == "A100-SXM4-40GB" and rec.devices[7].host == "localhost"
    assert len(rec.results) == 34
    row = rec.results[-1]
    assert (row.bytes, row.redop, row.root, row.time_us, row.algbw, row.busbw, row.wrong) == (
        8589934592,
        "sum",
        None,
        63896.0,
        134.44,
        235.26,
        None,
    )  # N/A: validation off
    assert rec.results[0].bytes == 0
    assert rec.notes == ["hostname:3442:3442 [0] NCCL INFO Launch mode Parallel"]
    assert rec.avg_busbw == 68.4048
    assert rec.collective == "all_reduce"


def test_a100_old_allgather_without_redop_column():
    rec = parse(read_fixture(TOOL, "a100-8gpu-allgather-old-no-redop.txt"))
    row = rec.results[-1]
    assert (row.bytes, row.count, row.type, row.redop, row.root) == (
        8589934592,
        268435456,
        "float",
        None,
        None,
    )
    assert (row.time_us, row.algbw, row.busbw) == (33646.0, 255.31, 223.39)
    assert rec.results_in_place[-1].busbw == 230.07
    assert rec.avg_busbw == 58.2651
    # (n-1)/n fits all_gather, reduce_scatter and alltoall: no guess
    assert rec.collective is None and rec.collective_from is None


def test_v2_18_tagged_mpirun_output():
    rec = parse(read_fixture(TOOL, "rtx5090-2rank-tagged-v2.18.txt"))
    assert (rec.version, rec.nccl_version, rec.program) == ("2.18.0", 22907, "all_reduce_perf_mpi")
    assert (rec.collective, rec.collective_from) == ("all_reduce", "header")
    assert rec.ranks == 2 and [d.pid for d in rec.devices] == [2994447, 2994448]
    assert rec.devices[1].bus_id == "0000:02:00"
    assert len(rec.results) == 8
    assert (rec.results[5].time_us, rec.results[5].busbw) == (14977.1, 2.24)
    assert rec.results_in_place[-1].algbw == 2.31
    assert (rec.avg_busbw, rec.iters, rec.warmup_iters) == (1.57614, 50, 10)
    assert rec.notes == []


def test_crlf_and_tabs():
    text = read_fixture(TOOL, "h100-16rank-2node-allreduce.txt").replace("\n", "\r\n").replace("     ", "\t")
    rec = parse(text)
    assert len(rec.results) == 31 and rec.avg_busbw == 70.742


def test_cli_registry_and_to_data():
    data = to_data(parse_tool("nccl-tests", read_fixture(TOOL, "rtx5090-2rank-tagged-v2.18.txt")))
    assert data["results"][0] == {
        "bytes": 1048576,
        "count": 262144,
        "type": "float",
        "redop": "sum",
        "root": -1,
        "time_us": 4366.46,
        "algbw": 0.24,
        "busbw": 0.24,
        "wrong": 0,
    }
    json.dumps(data)


def test_interrupted_run_keeps_rows_but_is_not_complete():
    text = read_fixture(TOOL, "h100-16rank-2node-allreduce.txt")
    cut = text[: text.index("  1073741824")]
    rec = parse(cut)
    assert len(rec.results) == 27 and rec.avg_busbw is None and not rec.complete


# --- edge cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\n", None])
def test_empty(text):
    with pytest.raises(ParseError, match="empty input"):
        parse(text)


def test_wrong_tool():
    perftest = (
        "---------------------------------------------------------------------------------------\n"
        "                    RDMA_Write BW Test\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        " 65536      5000             385.12             384.96              0.734268\n"
    )
    with pytest.raises(ParseError, match="not nccl-tests output"):
        parse(perftest)


def test_truncated_before_table():
    text = read_fixture(TOOL, "h100-16rank-2node-allreduce.txt")
    head = text[: text.index("#                                                              out-of-place")]
    with pytest.raises(ParseError, match="truncated: no results table"):
        parse(head + "test.cu:954 NCCL failure common.cu 'unhandled system error'\n")


def test_truncated_after_header():
    text = read_fixture(TOOL, "h100-16rank-2node-allreduce.txt")
    head = text[: text.index("           8             2")]
    with pytest.raises(ParseError, match="header but no result rows"):
        parse(head)


# --- -J JSON ------------------------------------------------------------------------------
# No published -J file was found; this document follows the writer in NVIDIA/nccl-tests src/util.cu
# (JSON_FILE_VERSION 2): devices inside "config", root as a padded string, nwrong as a double.
JSON_DOC = {
    "version": 2,
    "start_time": "2025-06-01 10:00:00",
    "args": ["./build/all_reduce_perf", "-b", "1G", "-e", "2G", "-g", "8", "-J", "out.json"],
    "env": ["NCCL_DEBUG=WARN"],
    "nccl_version": 22703,
    "config": {
        "nthreads": 1,
        "ngpus": 8,
        "minimum_bytes": 1073741824,
        "maximum_bytes": 2147483648,
        "step_factor": 2,
        "warmup_iters": 5,
        "iterations": 20,
        "aggregated_iterations": 1,
        "validation": 1,
        "graph": 0,
        "blocking_collectives": "false",
        "per_iter_timing": "false",
        "parallel_init": "false",
        "devices": [
            {
                "rank": r,
                "group": 0,
                "pid": 100,
                "hostname": "gpu01",
                "device": r,
                "device_hex": f"0000:{r:02x}:00",
                "device_info": "NVIDIA H100 80GB HBM3",
            }
            for r in range(8)
        ],
    },
    "results": [
        {
            "size": 1073741824,
            "count": 268435456,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
            "out_of_place": {"time": 4027.3, "alg_bw": 266.61, "bus_bw": 466.57, "nwrong": 0.0},
            "in_place": {"time": 4029.1, "alg_bw": 266.5, "bus_bw": 466.37, "nwrong": 0.0},
            "actual_iterations": 20,
            "experiment_name": "",
        },
        {
            "size": 2147483648,
            "count": 536870912,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
            "out_of_place": {"time": 7983.5, "alg_bw": 268.99, "bus_bw": 470.73, "nwrong": None},
            "in_place": {"time": 7985.2, "alg_bw": 268.93, "bus_bw": 470.63, "nwrong": None},
            "actual_iterations": 20,
            "experiment_name": "",
        },
    ],
    "out_of_bounds": {"count": 0, "okay": "true"},
    "average_bus_bandwidth": {"bandwidth": 468.575, "okay": "unchecked"},
    "errors": [],
    "end_time": "2025-06-01 10:00:10",
}


def test_json():
    rec = parse(json.dumps(JSON_DOC))
    assert rec.format == "json"
    assert (rec.collective, rec.collective_from, rec.program) == ("all_reduce", "header", "all_reduce_perf")
    assert rec.nccl_version == 22703 and rec.ranks == 8 and rec.devices[3].bus_id == "0000:03:00"
    assert (rec.ngpus, rec.min_bytes, rec.iters, rec.warmup_iters) == (8, 1073741824, 20, 5)
    r0 = rec.results[0]
    assert (r0.bytes, r0.root, r0.time_us, r0.algbw, r0.busbw, r0.wrong) == (
        1073741824,
        -1,
        4027.3,
        266.61,
        466.57,
        0,
    )
    assert rec.results[1].wrong is None
    assert rec.results_in_place[1].busbw == 470.63
    assert rec.avg_busbw == 468.575 and rec.out_of_bounds == 0 and rec.complete


def test_json_edge_cases():
    with pytest.raises(ParseError, match="invalid JSON"):
        parse(json.dumps(JSON_DOC)[:300])
    with pytest.raises(ParseError, match="'results'"):
        parse('{"name": "something else"}')
    with pytest.raises(ParseError, match="lacks nccl-tests keys"):
        parse('{"results": []}')
    with pytest.raises(ParseError, match="no measurements"):
        parse(json.dumps({**JSON_DOC, "results": []}))
