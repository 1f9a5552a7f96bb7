# -*- coding: utf-8 -*-
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
""".split())

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


class _Problems(object):
    """Collects every problem with the path of the field it concerns."""

    def __init__(self):
        self.items = []

    def add(self, path, value, why):
        self.items.append("%s: %s %s" % (path, _show(value), why))

    def note(self, text):
        self.items.append(text)


def _show(value):
    return repr(value) if isinstance(value, str) else str(value)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value):
    """An int from an int or a decimal string (extra vars arrive as JSON), else None."""
    if _is_int(value):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _int_in(p, path, value, low, high, what="must be an integer"):
    number = as_int(value)
    if number is None or not low <= number <= high:
        p.add(path, value, "%s in %d..%d" % (what, low, high))
        return None
    return number


def _prio_list(p, path, value):
    if not isinstance(value, list):
        p.add(path, value, "must be a list of priorities (0..7)")
        return None
    out = []
    for i, item in enumerate(value):
        prio = _int_in(p, "%s[%d]" % (path, i), item, 0, PRIORITIES - 1, "is not a priority: must be")
        if prio is not None and prio not in out:
            out.append(prio)
    return sorted(out)


def _eight(p, path, value, check):
    if not isinstance(value, list) or len(value) != PRIORITIES:
        p.add(path, value, "must be a list of 8 values (one per priority or traffic class)")
        return None
    out = [check("%s[%d]" % (path, i), item) for i, item in enumerate(value)]
    return None if any(v is None for v in out) else out


def _dscp_map(p, path, value):
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping of DSCP (0..63) to priority (0..7)")
        return None
    out = {}
    for key, prio in value.items():
        dscp = _int_in(p, "%s key" % path, key, 0, DSCP_COUNT - 1, "is not a DSCP: must be")
        number = _int_in(p, "%s.%s" % (path, key), prio, 0, PRIORITIES - 1, "is not a priority: must be")
        if dscp is not None and number is not None:
            out[dscp] = number
    return out


def _ecn(p, path, value):
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping with np and/or rp (lists of priorities)")
        return None
    out = {}
    for key, item in value.items():
        if key not in ("np", "rp"):
            p.add("%s.%s" % (path, key), item, "is not a known key (np, rp)")
            continue
        prios = _prio_list(p, "%s.%s" % (path, key), item)
        if prios is not None:
            out[key] = prios
    return out


def _tos(p, path, value):
    tos = _int_in(p, path, value, 0, 255, "is not a ToS byte: must be")
    if tos is not None and tos & 3 == 3:
        p.add(path, value, "sets ECN bits 11 (CE, congestion experienced): use ECT (tos & 3 = 1 or 2) or 0")
        return None
    return tos


def _nic_field(p, path, key, value):
    """Check one NIC knob; return its normal form or None."""
    if key == "trust":
        if value not in TRUST_CHOICES:
            p.add(path, value, "must be one of pcp, dscp")
            return None
        return value
    if key == "dscp2prio":
        return _dscp_map(p, path, value)
    if key in ("pfc",):
        return _prio_list(p, path, value)
    if key == "prio_tc":
        return _eight(p, path, value, lambda sub, v: _int_in(p, sub, v, 0, PRIORITIES - 1,
                                                             "is not a traffic class: must be"))
    if key == "tsa":
        def one(sub, v):
            if v not in TSA_CHOICES:
                p.add(sub, v, "must be one of strict, ets, vendor")
                return None
            return v
        return _eight(p, path, value, one)
    if key == "tcbw":
        return _eight(p, path, value, lambda sub, v: _int_in(p, sub, v, 0, 100, "must be a percentage"))
    if key == "mtu":
        mtu = as_int(value)
        if mtu not in MTU_CHOICES:
            p.add(path, value, "must be one of %s (each fits a RoCE MTU of 1024/2048/4096)"
                  % ", ".join(str(m) for m in MTU_CHOICES))
            return None
        return mtu
    if key == "ecn":
        return _ecn(p, path, value)
    if key == "cnp_dscp":
        return _int_in(p, path, value, 0, DSCP_COUNT - 1, "is not a DSCP: must be")
    if key == "cnp_prio":
        return _int_in(p, path, value, 0, PRIORITIES - 1, "is not a priority: must be")
    if key == "roce_tos":
        return _tos(p, path, value)
    if key == "roce_mode":
        mode = as_int(value)
        if mode not in ROCE_MODES:
            p.add(path, value, "must be 1 (RoCE v1) or 2 (RoCE v2)")
            return None
        return mode
    p.add(path, value, "is not a known NIC knob (%s)" % ", ".join(NIC_KNOBS))
    return None


def _nic_entry(p, path, value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        p.add(path, value, "must be a mapping of NIC knobs")
        return {}
    out = {}
    for key in sorted(value):
        checked = _nic_field(p, "%s.%s" % (path, key), key, value[key])
        if checked is not None:
            out[key] = checked
    _check_ets(p, path, out)
    return out


def _check_ets(p, path, nic):
    tsa, bw = nic.get("tsa"), nic.get("tcbw")
    if tsa is None or bw is None:
        return
    for tc in range(PRIORITIES):
        if tsa[tc] != "ets" and bw[tc] != 0:
            p.add("%s.tcbw[%d]" % (path, tc), bw[tc], "must be 0: traffic class %d is %s, not ets" % (tc, tsa[tc]))
    total = sum(b for b, t in zip(bw, tsa) if t == "ets")
    if "ets" in tsa and total != 100:
        p.add("%s.tcbw" % path, bw, "must sum to 100 over the ets traffic classes (sums to %d)" % total)


def roce_priority(nic):
    """The priority RoCE data lands in: ``dscp2prio[roce_tos >> 2]`` under DSCP trust, else None."""
    tos, dmap = nic.get("roce_tos"), nic.get("dscp2prio") or {}
    if nic.get("trust") != "dscp" or tos is None:
        return None
    return dmap.get(tos >> 2)


def couplings(path, nic, nccl_tc=None):
    """Problems between coupled knobs of one effective NIC entry (see the module docstring).

    Rules: under DSCP trust, the RoCE ToS's DSCP (``tos >> 2``) must be in dscp2prio; when any
    PFC priority is on, the RoCE priority must be one of them (lossless class that the RoCE
    traffic misses); the CNP priority must not be the RoCE data priority (CNPs would wait behind
    the data they are meant to slow down), and under DSCP trust the CNP DSCP must map to the CNP
    priority; NCCL_IB_TC must equal the RoCE ToS; RoCE v1 has no IP header, so DSCP trust cannot
    classify it.
    """
    out = []
    tos, trust, dmap = nic.get("roce_tos"), nic.get("trust"), nic.get("dscp2prio")
    prio = roce_priority(nic)
    if trust == "dscp" and tos is not None and dmap is not None and (tos >> 2) not in dmap:
        out.append("%s: roce_tos %d is DSCP %d, which dscp2prio does not map: add %d: <priority>"
                   % (path, tos, tos >> 2, tos >> 2))
    pfc = nic.get("pfc")
    if prio is not None and pfc:
        if prio not in pfc:
            out.append("%s: roce_tos %d (DSCP %d) maps to priority %d, but PFC is on only for "
                       "priorities %s: RoCE traffic would miss the lossless class"
                       % (path, tos, tos >> 2, prio, pfc))
    cnp = nic.get("cnp_prio")
    if cnp is not None and prio is not None and cnp == prio:
        out.append("%s: cnp_prio %d is the RoCE data priority (roce_tos %d -> DSCP %d -> priority %d): "
                   "CNPs would queue behind the traffic they throttle" % (path, cnp, tos, tos >> 2, prio))
    cnp_dscp = nic.get("cnp_dscp")
    if trust == "dscp" and cnp is not None and cnp_dscp is not None and dmap and cnp_dscp in dmap \
            and dmap[cnp_dscp] != cnp:
        out.append("%s: cnp_dscp %d maps to priority %d in dscp2prio, not to cnp_prio %d"
                   % (path, cnp_dscp, dmap[cnp_dscp], cnp))
    if tos is not None and cnp_dscp is not None and cnp_dscp == tos >> 2 and (pfc or cnp is not None):
        out.append("%s: cnp_dscp %d is the RoCE data DSCP (roce_tos %d): CNPs and data would share one class"
                   % (path, cnp_dscp, tos))
    if nccl_tc is not None and tos is not None and nccl_tc != tos:
        out.append("%s: roce_tos %d differs from nccl.NCCL_IB_TC %d: NCCL and rdma_cm traffic would land in "
                   "different classes" % (path, tos, nccl_tc))
    if nic.get("roce_mode") == 1 and trust == "dscp":
        out.append("%s: roce_mode 1 (RoCE v1) carries no IP header, so trust dscp cannot classify it: "
                   "use roce_mode 2" % path)
    if trust == "dscp" and tos is not None and prio is None and dmap is None and pfc:
        out.append("%s: trust dscp with PFC on %s and roce_tos %d needs dscp2prio to say where DSCP %d goes"
                   % (path, pfc, tos, tos >> 2))
    return out


def _nccl(p, value):
    if value is None:
        return None
    if not isinstance(value, dict):
        p.add("nccl", value, "must be a mapping of NCCL_* variables (or null: no /etc/nccl.conf)")
        return None
    out = {}
    for key in sorted(value):
        item, path = value[key], "nccl.%s" % key
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


def _sm_value(p, key, value, flavor):
    path = "sm.%s" % key
    if key not in OPENSM_KEYS and not (flavor == "mlnx" and key in MLNX_AR_KEYS):
        extra = " (an NVIDIA MLNX OpenSM key: set sm_flavor: mlnx)" if key in MLNX_AR_KEYS else ""
        p.add(path, value, "is not a key opensm knows%s" % extra)
        return None
    if key == "routing_engine":
        engines = [e.strip() for e in str(value).split(",")]
        for engine in engines:
            if engine not in ROUTING_ENGINES:
                p.add(path, value, "names unknown routing engine %r (known: %s)" % (engine, ", ".join(ROUTING_ENGINES)))
                return None
            if engine in AR_ENGINES and flavor != "mlnx":
                p.add(path, value, "names %s, an NVIDIA MLNX OpenSM engine: set sm_flavor: mlnx" % engine)
                return None
        return ",".join(engines)
    if key in SM_INT_RANGES:
        low, high = SM_INT_RANGES[key]
        return _int_in(p, path, value, low, high)
    if key in SM_BOOL_KEYS:
        if isinstance(value, bool):
            return value
        text = str(value).upper()
        if text not in ("TRUE", "FALSE"):
            p.add(path, value, "must be true or false")
            return None
        return text == "TRUE"
    if key.endswith("sl2vl"):
        parts = str(value).split(",")
        if len(parts) != 16 or any(as_int(x) is None or not 0 <= int(x) <= 15 for x in parts):
            p.add(path, value, "must be 16 comma-separated VLs (0..15), one per SL")
            return None
        return ",".join(str(int(x)) for x in parts)
    if isinstance(value, (dict, list)) or "\n" in str(value):
        p.add(path, value, "must be a single value")
        return None
    return value


def _sm(p, value):
    if not isinstance(value, dict):
        p.add("sm", value, "must be a mapping of opensm.conf keys")
        return {}
    flavor = value.get("sm_flavor", "upstream")
    if flavor not in SM_FLAVORS:
        p.add("sm.sm_flavor", flavor, "must be upstream or mlnx")
        flavor = "upstream"
    out = {"sm_flavor": flavor} if "sm_flavor" in value else {}
    for key in sorted(value):
        if key == "sm_flavor":
            continue
        checked = _sm_value(p, key, value[key], flavor)
        if checked is not None:
            out[key] = checked
    qos_vls, op_vls = as_int(out.get("qos_max_vls")), as_int(out.get("max_op_vls"))
    if qos_vls and op_vls in OP_VLS_COUNT and qos_vls > OP_VLS_COUNT[op_vls]:
        p.add("sm.qos_max_vls", qos_vls, "exceeds the %d VLs of max_op_vls %d (VL0-%d)"
              % (OP_VLS_COUNT[op_vls], op_vls, OP_VLS_COUNT[op_vls] - 1))
    return out


def effective_nics(nics, netdevs):
    """Per netdev, ``all`` merged with the netdev's own entry (its keys win)."""
    base = nics.get("all", {})
    return dict((dev, dict(base, **nics.get(dev, {}))) for dev in netdevs)


def validate(desired, roce_netdevs=None, other_netdevs=(), enforce_couplings=True):
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
    out = {}
    nics = {}
    raw_nics = desired.get("nics") or {}
    if not isinstance(raw_nics, dict):
        p.add("nics", raw_nics, "must be a mapping of netdev (or all) to NIC knobs")
        raw_nics = {}
    for name in sorted(raw_nics, key=str):
        nics[str(name)] = _nic_entry(p, "nics.%s" % name, raw_nics[name])
    nccl = _nccl(p, desired.get("nccl")) if "nccl" in desired else None
    nccl_tc = (nccl or {}).get("NCCL_IB_TC")
    if roce_netdevs is not None:
        _check_names(p, nics, roce_netdevs, other_netdevs)
        scope = effective_nics(nics, sorted(roce_netdevs))
    else:
        scope = dict(("all" if n == "all" else n, dict(nics.get("all", {}), **nics[n])) for n in nics)
    for name in sorted(scope):
        if "dscp2prio" in scope[name] and scope[name].get("trust") != "dscp":
            p.note("nics.%s: dscp2prio is given but trust is %s: the map applies only with trust dscp "
                   "(set trust: dscp, or drop dscp2prio)" % (name, scope[name].get("trust", "not set")))
    if enforce_couplings:
        tos_values = set()
        for name in sorted(scope):
            for problem in couplings("nics.%s" % name, scope[name], nccl_tc):
                p.note(problem)
            if "roce_tos" in scope[name]:
                tos_values.add(scope[name]["roce_tos"])
        if nccl_tc is None and nccl and len(tos_values) > 1:
            p.note("nics: roce_tos differs between ports (%s) but NCCL uses one NCCL_IB_TC"
                   % sorted(tos_values))
    out["nics"] = scope if roce_netdevs is not None else nics
    if "nccl" in desired:
        out["nccl"] = nccl
    if "sm" in desired and desired["sm"] is not None:
        out["sm"] = _sm(p, desired["sm"])
    return p.items, out


def _hca_items(value):
    """NCCL_IB_HCA parsed: ``(exclude, exact, [(dev, port or None)])`` (NCCL's list grammar)."""
    text = str(value).strip()
    exclude = text.startswith("^")
    body = text[1:] if exclude else text
    exact = body.startswith("=")
    items = []
    for item in (body[1:] if exact else body).split(","):
        dev, _, port = item.strip().partition(":")
        if dev:
            items.append((dev, int(port) if port.isdigit() else None))
    return exclude, exact, items


def _hca_hit(item, exact, dev, port):
    name, want = item
    return (dev == name if exact else dev.startswith(name)) and want in (None, port)


def hca_check(value, ports):
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
    names = ", ".join("%s:%d" % port for port in ports)
    problems = []
    if not selected:
        problems.append("nccl.NCCL_IB_HCA: %s selects none of this host's RDMA ports (%s): NCCL would "
                        "fall back to TCP sockets" % (_show(value), names))
    unmatched = [] if exclude else [
        "%s%s" % (dev, "" if port is None else ":%d" % port) for dev, port in items
        if not any(_hca_hit((dev, port), exact, d, q) for d, q in ports)]
    return problems, unmatched


def _check_names(p, nics, roce_netdevs, other_netdevs):
    for name in nics:
        if name == "all" or name in roce_netdevs:
            continue
        if name in other_netdevs:
            p.add("nics.%s" % name, name, "is not a RoCE port of this host (RoCE ports: %s)"
                  % (", ".join(sorted(roce_netdevs)) or "none"))
        else:
            p.add("nics.%s" % name, name, "does not exist on this host (RoCE ports: %s)"
                  % (", ".join(sorted(roce_netdevs)) or "none"))
