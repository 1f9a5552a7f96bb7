# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""The desired fabric state: its schema, its couplings, and how ``all`` expands per interface.

Pure Python with no Ansible import, so the same code validates a profile on the controller
(``fabtune.profile``) and on each host (the ``fabric_validate`` module, which also knows the
host's interfaces). The tree (one variable, ``fabric_desired``)::

    nics:                       # RoCE ports, keyed by netdev; ``all`` = every RoCE port of the host
      all: {trust, dscp2prio, pfc, prio_tc, tsa, tcbw, mtu, ecn: {np, rp}, cnp_dscp, cnp_prio,
            roce_tos, roce_mode}
      <netdev>: {... overrides ...}
    nccl: {NCCL_*: value} | null    # /etc/nccl.conf; null = no file
    sm: {<opensm.conf key>: value}  # the subnet manager's opensm.conf keys
    hardware: ...                   # read-only facts, ignored when applied (so a snapshot applies)

A knob that is absent is not managed. ``fabric_facts`` reports the same shape.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

PRIORITIES = 8
DSCP_COUNT = 64
TSA_CHOICES = ("strict", "ets", "vendor")
TRUST_CHOICES = ("pcp", "dscp")
MTU_CHOICES = (1500, 2200, 4200, 9000)
"""Netdev MTUs on RoCE: each fits one RoCE MTU exactly (MTU - 96 bytes of RoCEv2 headers):
1500 -> 1024, 2200 -> 2048, 4200 -> 4096; 9000 is the jumbo MTU that TCP traffic on the same
port may want (RoCE still uses 4096). Other values only waste buffer or are not a RoCE step."""
ROCE_MODES = {1: "IB/RoCE v1", 2: "RoCE v2"}

NIC_KNOBS = ("trust", "dscp2prio", "pfc", "prio_tc", "tsa", "tcbw", "mtu", "ecn", "cnp_dscp",
             "cnp_prio", "roce_tos", "roce_mode")
QOS_KNOBS = ("trust", "dscp2prio", "pfc", "prio_tc", "tsa", "tcbw")
TOP_KEYS = ("nics", "nccl", "sm", "hardware")

GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4")
NCCL_INT_RANGES = {
    "NCCL_IB_GID_INDEX": (-1, 255),
    "NCCL_IB_TC": (0, 255),
    "NCCL_IB_FIFO_TC": (0, 255),
    "NCCL_IB_SL": (0, 15),
    "NCCL_IB_QPS_PER_CONNECTION": (1, 128),
    "NCCL_IB_SPLIT_DATA_ON_QPS": (0, 1),
    "NCCL_IB_ADAPTIVE_ROUTING": (0, 1),
    "NCCL_IB_AR_THRESHOLD": (0, 2 ** 31 - 1),
    "NCCL_IB_TIMEOUT": (1, 31),
    "NCCL_IB_RETRY_CNT": (0, 7),
    "NCCL_IB_DISABLE": (0, 1),
    "NCCL_NET_GDR_READ": (0, 1),
    "NCCL_IB_PCI_RELAXED_ORDERING": (0, 2),
    "NCCL_IB_ECE_ENABLE": (0, 1),
    "NCCL_CROSS_NIC": (0, 2),
    "NCCL_IB_ROCE_VERSION_NUM": (1, 2),
}

# Upstream opensm 3.3 engines (osm_opensm.c routing_modules) and NVIDIA MLNX OpenSM's AR engines.
ROUTING_ENGINES = ("none", "minhop", "updn", "dnup", "file", "ftree", "lash", "dor", "torus-2QoS",
                   "nue", "dfsssp", "sssp", "ar_updn", "ar_ftree", "ar_torus", "ar_dor")
AR_ENGINES = ("ar_updn", "ar_ftree", "ar_torus", "ar_dor")

# Every key Debian's opensm 3.3.23 writes with ``opensm --create-config FILE`` (the keys it knows;
# tests/unit/modules/test_fabric_desired.py compares this list with the real binary's output).
OPENSM_KEYS = frozenset("""
guid m_key m_key_lease_period m_key_protection_level m_key_lookup sm_key sa_key subnet_prefix lmc
lmc_esp0 sm_sl packet_life_time vl_stall_count leaf_vl_stall_count head_of_queue_lifetime
leaf_head_of_queue_lifetime max_op_vls force_link_speed force_link_speed_ext force_link_width fdr10
subnet_timeout local_phy_errors_threshold overrun_errors_threshold use_mfttop partition_config_file
no_partition_enforcement part_enforce allow_both_pkeys keep_pkey_indexes sm_assigned_guid
sweep_interval reassign_lids force_heavy_sweep sweep_on_trap port_profile_switch_nodes
port_prof_ignore_file hop_weights_file port_search_ordering_file routing_engine
avoid_throttled_links connect_roots use_ucast_cache lid_matrix_dump_file lfts_file root_guid_file
cn_guid_file io_guid_file quasi_ftree_indexing max_reverse_hops ids_guid_file
guid_routing_order_file do_mesh_analysis lash_start_vl nue_max_num_vls nue_include_switches
port_shifting scatter_ports guid_routing_order_no_scatter sa_db_file sa_db_dump torus_config
sm_priority ignore_other_sm sminfo_polling_timeout polling_retry_number honor_guid2lid_file
max_wire_smps max_wire_smps2 max_smps_timeout transaction_timeout transaction_retries
long_transaction_timeout max_msg_fifo_timeout single_thread daemon sm_inactive
babbling_port_policy drop_event_subscriptions ipoib_mcgroup_creation_validation
mcgroup_join_validation use_original_extended_sa_rates_only use_optimized_slvl
fsync_high_avail_files perfmgr perfmgr_redir perfmgr_sweep_time_s perfmgr_max_outstanding_queries
perfmgr_ignore_cas perfmgr_rm_nodes perfmgr_log_errors perfmgr_query_cpi perfmgr_xmit_wait_log
perfmgr_xmit_wait_threshold event_db_dump_file event_plugin_name event_plugin_options
node_name_map_name log_flags force_log_flush log_file log_max_size accum_log_file
per_module_logging_file dump_files_dir enable_quirks no_clients_rereg disable_multicast
exit_on_fatal console console_port qos qos_policy_file suppress_sl2vl_mad_status_errors
qos_max_vls qos_high_limit qos_vlarb_high qos_vlarb_low qos_sl2vl qos_ca_max_vls
qos_ca_high_limit qos_ca_vlarb_high qos_ca_vlarb_low qos_ca_sl2vl qos_sw0_max_vls
qos_sw0_high_limit qos_sw0_vlarb_high qos_sw0_vlarb_low qos_sw0_sl2vl qos_swe_max_vls
qos_swe_high_limit qos_swe_vlarb_high qos_swe_vlarb_low qos_swe_sl2vl qos_rtr_max_vls
qos_rtr_high_limit qos_rtr_vlarb_high qos_rtr_vlarb_low qos_rtr_sl2vl congestion_control cc_key
cc_max_outstanding_mads cc_sw_cong_setting_control_map cc_sw_cong_setting_victim_mask
cc_sw_cong_setting_credit_mask cc_sw_cong_setting_threshold cc_sw_cong_setting_packet_size
cc_sw_cong_setting_credit_starvation_threshold cc_sw_cong_setting_credit_starvation_return_delay
cc_sw_cong_setting_marking_rate cc_ca_cong_setting_port_control cc_ca_cong_setting_control_map
cc_ca_cong_setting_ccti_timer cc_ca_cong_setting_ccti_increase
cc_ca_cong_setting_trigger_threshold cc_ca_cong_setting_ccti_min cc_cct prefix_routes_file
consolidate_ipv6_snm_req log_prefix
""".split())  # noqa: SIM905 (the keys as opensm --create-config writes them: easy to compare)

# Keys only NVIDIA's MLNX OpenSM knows (written only when ``sm_flavor`` is ``mlnx``):
# adaptive_timeout_sl_mask, new in MLNXSM 5.10 (release notes, formats.md 7.2). Adaptive routing
# itself has no on/off key: it comes with the ar_* routing engines and is on by default there
# (NVIDIA "InfiniBand Cluster Bring-up Procedure - Adaptive Routing", formats.md 7.2). No public
# source names an "ar_enable" or "adaptive_routing_enable" key, so none is written.
MLNX_AR_KEYS = frozenset(("adaptive_timeout_sl_mask",))

# opensm reads these only at start: a change needs a restart (the rest are re-read on SIGHUP).
SM_RESTART_KEYS = frozenset(("guid", "lmc", "lmc_esp0", "max_op_vls", "routing_engine", "qos",
                             "qos_policy_file", "sm_priority", "daemon", "log_file",
                             "single_thread", "subnet_prefix", "sm_key", "m_key"))
# max_op_vls is PortInfo's OperationalVLs encoding, not a count: 1 VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7,
# 5 VL0-14 (opensm's default, OSM_DEFAULT_MAX_OP_VLS in include/opensm/osm_base.h). opensm caps a
# port's encoded op_vls with it (osm_physp_calc_link_op_vls, opensm/osm_port.c), so a larger number
# limits nothing. qos_max_vls (opensm/osm_qos.c) is a count of VLs.
OP_VLS_COUNT = {1: 1, 2: 2, 3: 4, 4: 8, 5: 15}
SM_INT_RANGES = {"lmc": (0, 7), "sm_priority": (0, 15), "max_op_vls": (1, 5),
                 "qos_max_vls": (0, 15), "qos_high_limit": (0, 255), "sm_sl": (0, 15),
                 "sweep_interval": (0, 3600)}
SM_BOOL_KEYS = ("qos", "reassign_lids", "force_heavy_sweep", "sweep_on_trap", "congestion_control",
                "use_ucast_cache")
SM_FLAVORS = ("upstream", "mlnx")


class _Problems:
    """Collects every problem with the path of the field it concerns."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, value: object, why: str) -> None:
        self.items.append(f"{path}: {_show(value)} {why}")

    def note(self, text: str) -> None:
        self.items.append(text)


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: object) -> int | None:
    """An int from an int or a decimal string (extra vars arrive as JSON), else None."""
    if isinstance(value, int) and _is_int(value):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _int_in(p: _Problems, path: str, value: object, low: int, high: int, *,
            what: str = "must be an integer") -> int | None:
    number = as_int(value)
    if number is None or not low <= number <= high:
        p.add(path, value, f"{what} in {low:d}..{high:d}")
        return None
    return number


def _prio_list(p: _Problems, path: str, value: object) -> list[int] | None:
    if not isinstance(value, list):
        p.add(path, value, "must be a list of priorities (0..7)")
        return None
    out: list[int] = []
    for i, item in enumerate(value):
        prio = _int_in(p, f"{path}[{i:d}]", item, 0, PRIORITIES - 1, what="is not a priority: must be")
        if prio is not None and prio not in out:
            out.append(prio)
    return sorted(out)


def _eight(p: _Problems, path: str, value: object,
           check: Callable[[str, Any], Any]) -> list[Any] | None:
    if not isinstance(value, list) or len(value) != PRIORITIES:
        p.add(path, value, "must be a list of 8 values (one per priority or traffic class)")
        return None
    out = [check(f"{path}[{i:d}]", item) for i, item in enumerate(value)]
    return None if any(v is None for v in out) else out


def _dscp_map(p: _Problems, path: str, value: object) -> dict[int, int] | None:
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping of DSCP (0..63) to priority (0..7)")
        return None
    out: dict[int, int] = {}
    for key, prio in value.items():
        dscp = _int_in(p, f"{path} key", key, 0, DSCP_COUNT - 1, what="is not a DSCP: must be")
        number = _int_in(p, f"{path}.{key}", prio, 0, PRIORITIES - 1, what="is not a priority: must be")
        if dscp is not None and number is not None:
            out[dscp] = number
    return out


def _ecn(p: _Problems, path: str, value: object) -> dict[str, list[int]] | None:
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping with np and/or rp (lists of priorities)")
        return None
    out: dict[str, list[int]] = {}
    for key, item in value.items():
        if key not in ("np", "rp"):
            p.add(f"{path}.{key}", item, "is not a known key (np, rp)")
            continue
        prios = _prio_list(p, f"{path}.{key}", item)
        if prios is not None:
            out[key] = prios
    return out


def _tos(p: _Problems, path: str, value: object) -> int | None:
    tos = _int_in(p, path, value, 0, 255, what="is not a ToS byte: must be")
    if tos is not None and tos & 3 == 3:
        p.add(path, value, "sets ECN bits 11 (CE, congestion experienced): use ECT (tos & 3 = 1 or 2) or 0")
        return None
    return tos


def _trust(p: _Problems, path: str, value: object) -> object:
    if value not in TRUST_CHOICES:
        p.add(path, value, "must be one of pcp, dscp")
        return None
    return value


def _prio_tc(p: _Problems, path: str, value: object) -> list[Any] | None:
    return _eight(p, path, value, lambda sub, v: _int_in(p, sub, v, 0, PRIORITIES - 1,
                                                         what="is not a traffic class: must be"))


def _tsa(p: _Problems, path: str, value: object) -> list[Any] | None:
    def one(sub: str, v: object) -> object:
        if v not in TSA_CHOICES:
            p.add(sub, v, "must be one of strict, ets, vendor")
            return None
        return v
    return _eight(p, path, value, one)


def _tcbw(p: _Problems, path: str, value: object) -> list[Any] | None:
    return _eight(p, path, value, lambda sub, v: _int_in(p, sub, v, 0, 100, what="must be a percentage"))


def _mtu(p: _Problems, path: str, value: object) -> int | None:
    mtu = as_int(value)
    if mtu not in MTU_CHOICES:
        p.add(path, value, f"must be one of {', '.join(str(m) for m in MTU_CHOICES)} "
              "(each fits a RoCE MTU of 1024/2048/4096)")
        return None
    return mtu


def _cnp_dscp(p: _Problems, path: str, value: object) -> int | None:
    return _int_in(p, path, value, 0, DSCP_COUNT - 1, what="is not a DSCP: must be")


def _cnp_prio(p: _Problems, path: str, value: object) -> int | None:
    return _int_in(p, path, value, 0, PRIORITIES - 1, what="is not a priority: must be")


def _roce_mode(p: _Problems, path: str, value: object) -> int | None:
    mode = as_int(value)
    if mode not in ROCE_MODES:
        p.add(path, value, "must be 1 (RoCE v1) or 2 (RoCE v2)")
        return None
    return mode


# Each NIC knob's check: its normal form, or None (the problem added).
_NIC_FIELDS: dict[str, Callable[[_Problems, str, Any], Any]] = {
    "trust": _trust, "dscp2prio": _dscp_map, "pfc": _prio_list, "prio_tc": _prio_tc, "tsa": _tsa,
    "tcbw": _tcbw, "mtu": _mtu, "ecn": _ecn, "cnp_dscp": _cnp_dscp, "cnp_prio": _cnp_prio,
    "roce_tos": _tos, "roce_mode": _roce_mode,
}


def _nic_field(p: _Problems, path: str, key: str, value: object) -> Any:
    """Check one NIC knob; return its normal form or None."""
    check = _NIC_FIELDS.get(key)
    if check is None:
        p.add(path, value, f"is not a known NIC knob ({', '.join(NIC_KNOBS)})")
        return None
    return check(p, path, value)


def _nic_entry(p: _Problems, path: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping of NIC knobs")
        return {}
    out: dict[str, Any] = {}
    for key in sorted(value):
        checked = _nic_field(p, f"{path}.{key}", key, value[key])
        if checked is not None:
            out[key] = checked
    _check_ets(p, path, out)
    return out


def check_nic(value: object, path: str) -> tuple[list[str], dict[str, Any]]:
    """One NIC entry's knobs, each checked (ranges, 8 values, ETS shares): ``(problems, normal)``.

    No rule between a port's entries (``all`` and its own) or with NCCL: :func:`validate` has those.
    """
    p = _Problems()
    out = _nic_entry(p, path, value)
    return p.items, out


def _check_ets(p: _Problems, path: str, nic: Mapping[str, Any]) -> None:
    tsa, bw = nic.get("tsa"), nic.get("tcbw")
    if tsa is None or bw is None:
        return
    for tc in range(PRIORITIES):
        if tsa[tc] != "ets" and bw[tc] != 0:
            p.add(f"{path}.tcbw[{tc:d}]", bw[tc], f"must be 0: traffic class {tc:d} is {tsa[tc]}, not ets")
    total = sum(b for b, t in zip(bw, tsa) if t == "ets")
    if "ets" in tsa and total != 100:
        p.add(f"{path}.tcbw", bw, f"must sum to 100 over the ets traffic classes (sums to {total:d})")


def roce_priority(nic: Mapping[str, Any]) -> int | None:
    """The priority RoCE data lands in: ``dscp2prio[roce_tos >> 2]`` under DSCP trust, else None."""
    tos, dmap = nic.get("roce_tos"), nic.get("dscp2prio") or {}
    if nic.get("trust") != "dscp" or tos is None:
        return None
    prio: int | None = dmap.get(tos >> 2)
    return prio


def couplings(path: str, nic: Mapping[str, Any], nccl_tc: int | None = None) -> list[str]:
    """Problems between coupled knobs of one effective NIC entry (see the module docstring).

    Rules: under DSCP trust, the RoCE ToS's DSCP (``tos >> 2``) must be in dscp2prio; when any
    PFC priority is on, the RoCE priority must be one of them (lossless class that the RoCE
    traffic misses); the CNP priority must not be the RoCE data priority (CNPs would wait behind
    the data they are meant to slow down), and under DSCP trust the CNP DSCP must map to the CNP
    priority; NCCL_IB_TC must equal the RoCE ToS; RoCE v1 has no IP header, so DSCP trust cannot
    classify it.
    """
    out = []
    tos: Any = nic.get("roce_tos")  # an int when prio is not None
    trust, dmap = nic.get("trust"), nic.get("dscp2prio")
    prio = roce_priority(nic)
    if trust == "dscp" and tos is not None and dmap is not None and (tos >> 2) not in dmap:
        out.append(f"{path}: roce_tos {tos:d} is DSCP {tos >> 2:d}, which dscp2prio does not map: "
                   f"add {tos >> 2:d}: <priority>")
    pfc = nic.get("pfc")
    if prio is not None and pfc and prio not in pfc:
        out.append(f"{path}: roce_tos {tos:d} (DSCP {tos >> 2:d}) maps to priority {prio:d}, but PFC is on "
                   f"only for priorities {pfc}: RoCE traffic would miss the lossless class")
    cnp = nic.get("cnp_prio")
    if cnp is not None and prio is not None and cnp == prio:
        out.append(f"{path}: cnp_prio {cnp:d} is the RoCE data priority (roce_tos {tos:d} -> "
                   f"DSCP {tos >> 2:d} -> priority {prio:d}): "
                   "CNPs would queue behind the traffic they throttle")
    cnp_dscp = nic.get("cnp_dscp")
    if trust == "dscp" and cnp is not None and cnp_dscp is not None and dmap and cnp_dscp in dmap \
            and dmap[cnp_dscp] != cnp:
        out.append(f"{path}: cnp_dscp {cnp_dscp:d} maps to priority {dmap[cnp_dscp]:d} in dscp2prio, "
                   f"not to cnp_prio {cnp:d}")
    if tos is not None and cnp_dscp is not None and cnp_dscp == tos >> 2 and (pfc or cnp is not None):
        out.append(f"{path}: cnp_dscp {cnp_dscp:d} is the RoCE data DSCP (roce_tos {tos:d}): "
                   "CNPs and data would share one class")
    if nccl_tc is not None and tos is not None and nccl_tc != tos:
        out.append(f"{path}: roce_tos {tos:d} differs from nccl.NCCL_IB_TC {nccl_tc:d}: NCCL and rdma_cm "
                   "traffic would land in different classes")
    if nic.get("roce_mode") == 1 and trust == "dscp":
        out.append(f"{path}: roce_mode 1 (RoCE v1) carries no IP header, so trust dscp cannot classify it: "
                   "use roce_mode 2")
    if trust == "dscp" and tos is not None and prio is None and dmap is None and pfc:
        out.append(f"{path}: trust dscp with PFC on {pfc} and roce_tos {tos:d} needs dscp2prio to say where "
                   f"DSCP {tos >> 2:d} goes")
    return out


def _nccl(p: _Problems, value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        p.add("nccl", value, "must be a mapping of NCCL_* variables (or null: no /etc/nccl.conf)")
        return None
    out: dict[str, Any] = {}
    for key in sorted(value):
        item, path = value[key], f"nccl.{key}"
        if not isinstance(key, str) or not key.startswith("NCCL_") or not key.replace("_", "").isalnum():
            p.add(path, key, "is not an NCCL_* variable name")
            continue
        if isinstance(item, (dict, list)) or item is None or isinstance(item, bool):
            p.add(path, item, "must be a string or an integer")
            continue
        if key in NCCL_INT_RANGES:
            low, high = NCCL_INT_RANGES[key]
            number = _int_in(p, path, item, low, high)
            if number is not None:
                out[key] = number
            continue
        text = str(item)
        if key in ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL") and text not in GDR_LEVELS:
            p.add(path, item, "must be one of LOC, PIX, PXB, PHB, SYS")
            continue
        if "\n" in text or "=" in key:
            p.add(path, item, "must be one line")
            continue
        out[key] = text
    return out


def _routing_engine(p: _Problems, path: str, value: object, flavor: str) -> str | None:
    engines = [e.strip() for e in str(value).split(",")]
    for engine in engines:
        if engine not in ROUTING_ENGINES:
            p.add(path, value,
                  f"names unknown routing engine {engine!r} (known: {', '.join(ROUTING_ENGINES)})")
            return None
        if engine in AR_ENGINES and flavor != "mlnx":
            p.add(path, value, f"names {engine}, an NVIDIA MLNX OpenSM engine: set sm_flavor: mlnx")
            return None
    return ",".join(engines)


def _sm_bool(p: _Problems, path: str, value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).upper()
    if text not in ("TRUE", "FALSE"):
        p.add(path, value, "must be true or false")
        return None
    return text == "TRUE"


def _sl2vl(p: _Problems, path: str, value: object) -> str | None:
    parts = str(value).split(",")
    if len(parts) != 16 or any(as_int(x) is None or not 0 <= int(x) <= 15 for x in parts):
        p.add(path, value, "must be 16 comma-separated VLs (0..15), one per SL")
        return None
    return ",".join(str(int(x)) for x in parts)


def _sm_single(p: _Problems, path: str, value: object) -> object:
    if isinstance(value, (dict, list)) or "\n" in str(value):
        p.add(path, value, "must be a single value")
        return None
    return value


def _sm_value(p: _Problems, key: str, value: object, flavor: str) -> object:
    path = f"sm.{key}"
    if key not in OPENSM_KEYS and not (flavor == "mlnx" and key in MLNX_AR_KEYS):
        extra = " (an NVIDIA MLNX OpenSM key: set sm_flavor: mlnx)" if key in MLNX_AR_KEYS else ""
        p.add(path, value, f"is not a key opensm knows{extra}")
        return None
    if key == "routing_engine":
        return _routing_engine(p, path, value, flavor)
    if key in SM_INT_RANGES:
        low, high = SM_INT_RANGES[key]
        return _int_in(p, path, value, low, high)
    if key in SM_BOOL_KEYS:
        return _sm_bool(p, path, value)
    if key.endswith("sl2vl"):
        return _sl2vl(p, path, value)
    return _sm_single(p, path, value)


def _sm(p: _Problems, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        p.add("sm", value, "must be a mapping of opensm.conf keys")
        return {}
    flavor = value.get("sm_flavor", "upstream")
    if flavor not in SM_FLAVORS:
        p.add("sm.sm_flavor", flavor, "must be upstream or mlnx")
        flavor = "upstream"
    out: dict[str, Any] = {"sm_flavor": flavor} if "sm_flavor" in value else {}
    for key in sorted(value):
        if key == "sm_flavor":
            continue
        checked = _sm_value(p, key, value[key], flavor)
        if checked is not None:
            out[key] = checked
    qos_vls, op_vls = as_int(out.get("qos_max_vls")), as_int(out.get("max_op_vls"))
    if qos_vls and op_vls in OP_VLS_COUNT and qos_vls > OP_VLS_COUNT[op_vls]:
        p.add("sm.qos_max_vls", qos_vls, f"exceeds the {OP_VLS_COUNT[op_vls]:d} VLs of max_op_vls {op_vls:d} "
              f"(VL0-{OP_VLS_COUNT[op_vls] - 1:d})")
    return out


def effective_nics(nics: Mapping[str, Mapping[str, Any]],
                   netdevs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per netdev, ``all`` merged with the netdev's own entry (its keys win)."""
    base = nics.get("all", {})
    return {dev: dict(base, **nics.get(dev, {})) for dev in netdevs}


def _raw_nics(p: _Problems, desired: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``nics`` section, each entry checked (``all`` or a netdev name to NIC knobs)."""
    raw_nics = desired.get("nics") or {}
    if not isinstance(raw_nics, dict):
        p.add("nics", raw_nics, "must be a mapping of netdev (or all) to NIC knobs")
        raw_nics = {}
    return {str(name): _nic_entry(p, f"nics.{name}", raw_nics[name]) for name in sorted(raw_nics, key=str)}


def _check_scope(
    p: _Problems, scope: dict[str, dict[str, Any]], nccl: dict[str, Any] | None, enforce_couplings: bool
) -> None:
    """What each port's knobs say together: a DSCP map without DSCP trust; the couplings (PFC, ToS,
    NCCL_IB_TC) unless a snapshot is restored exactly; one RoCE ToS where NCCL uses one NCCL_IB_TC."""
    nccl_tc = (nccl or {}).get("NCCL_IB_TC")
    for name in sorted(scope):
        if "dscp2prio" in scope[name] and scope[name].get("trust") != "dscp":
            p.note("nics.{}: dscp2prio is given but trust is {}: the map applies only with trust dscp "
                   "(set trust: dscp, or drop dscp2prio)".format(name, scope[name].get("trust", "not set")))
    if not enforce_couplings:
        return
    tos_values: set[int] = set()
    for name in sorted(scope):
        for problem in couplings(f"nics.{name}", scope[name], nccl_tc):
            p.note(problem)
        if "roce_tos" in scope[name]:
            tos_values.add(scope[name]["roce_tos"])
    if nccl_tc is None and nccl and len(tos_values) > 1:
        p.note(f"nics: roce_tos differs between ports ({sorted(tos_values)}) but NCCL uses one "
               "NCCL_IB_TC")


def validate(
        desired: object, roce_netdevs: Collection[str] | None = None, other_netdevs: Collection[str] = (),
        enforce_couplings: bool = True) -> tuple[list[str], dict[str, Any]]:
    """Validate a desired state; return ``(problems, normal_form)``.

    Args:
        desired: the ``fabric_desired`` tree.
        roce_netdevs: this host's RoCE netdevs (None on the controller: no host-side checks).
        other_netdevs: this host's other netdevs (InfiniBand ports, plain Ethernet).
        enforce_couplings: check the couplings; False only to restore a snapshot exactly.

    Returns:
        A list of problem strings (empty when valid) and the tree in normal form, with
        ``nics`` expanded per RoCE netdev when ``roce_netdevs`` is given.
    """
    p = _Problems()
    if desired is None:
        desired = {}
    if not isinstance(desired, dict):
        p.add("fabric_desired", desired, "must be a mapping with nics, nccl, sm")
        return p.items, {}
    for key in desired:
        if key not in TOP_KEYS:
            p.add(str(key), desired[key], "is not a known section (nics, nccl, sm, hardware)")
    nics = _raw_nics(p, desired)
    nccl = _nccl(p, desired.get("nccl")) if "nccl" in desired else None
    if roce_netdevs is not None:
        _check_names(p, nics, roce_netdevs, other_netdevs)
        scope = effective_nics(nics, sorted(roce_netdevs))
    else:
        scope = {"all" if n == "all" else n: dict(nics.get("all", {}), **nics[n]) for n in nics}
    _check_scope(p, scope, nccl, enforce_couplings)
    out: dict[str, Any] = {"nics": scope if roce_netdevs is not None else nics}
    if "nccl" in desired:
        out["nccl"] = nccl
    if "sm" in desired and desired["sm"] is not None:
        out["sm"] = _sm(p, desired["sm"])
    return p.items, out


def _hca_items(value: object) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """NCCL_IB_HCA parsed: ``(exclude, exact, [(dev, port or None)])`` (NCCL's list grammar)."""
    text = str(value).strip()
    exclude = text.startswith("^")
    body = text[1:] if exclude else text
    exact = body.startswith("=")
    items: list[tuple[str, int | None]] = []
    for item in (body[1:] if exact else body).split(","):
        dev, _, port = item.strip().partition(":")
        if dev:
            items.append((dev, int(port) if port.isdigit() else None))
    return exclude, exact, items


def _hca_hit(item: tuple[str, int | None], exact: bool, dev: str, port: int | None) -> bool:
    name, want = item
    return (dev == name if exact else dev.startswith(name)) and want in (None, port)


def hca_check(value: object, ports: Sequence[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """NCCL_IB_HCA against this host's RDMA ports ``[(dev, port)]``: ``(problems, unmatched)``.

    A list that selects none of the host's ports leaves NCCL without RDMA (it falls back to TCP
    sockets): a problem. Entries of an include list that match no port here are returned as
    unmatched (one profile may serve hosts with fewer NICs). A host without RDMA ports is not judged.
    """
    if not ports:
        return [], []
    exclude, exact, items = _hca_items(value)
    selected = [(dev, port) for dev, port in ports
                if any(_hca_hit(i, exact, dev, port) for i in items) != exclude]
    names = ", ".join(f"{dev}:{port:d}" for dev, port in ports)
    problems = []
    if not selected:
        problems.append(f"nccl.NCCL_IB_HCA: {_show(value)} selects none of this host's RDMA ports ({names}): "
                        "NCCL would fall back to TCP sockets")
    unmatched = [] if exclude else [
        dev + ("" if port is None else f":{port:d}") for dev, port in items
        if not any(_hca_hit((dev, port), exact, d, q) for d, q in ports)]
    return problems, unmatched


def _check_names(p: _Problems, nics: Mapping[str, Any], roce_netdevs: Collection[str],
                 other_netdevs: Collection[str]) -> None:
    for name in nics:
        if name == "all" or name in roce_netdevs:
            continue
        if name in other_netdevs:
            p.add(f"nics.{name}", name, "is not a RoCE port of this host (RoCE ports: %s)"
                  % (", ".join(sorted(roce_netdevs)) or "none"))
        else:
            p.add(f"nics.{name}", name, "does not exist on this host (RoCE ports: %s)"
                  % (", ".join(sorted(roce_netdevs)) or "none"))
