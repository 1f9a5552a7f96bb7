"""Every number the model uses, with its row in ``/work/shared/calibration.md`` (cal §x).

Tags as in calibration.md: [S] sourced, [D] derived from sourced numbers, [E] estimate.
``docs/model.md`` lists the same parameters with their URLs.
"""

from __future__ import annotations

# --- §1b/1c: per-packet overhead and the physical ceiling ------------------------------------
# In the product's fabtune.linkrate (HDR_*, IB_LINK_EFF, ROCE_MTU_HEADROOM, IB_MTUS), with the same
# source comments: the acceptance thresholds of fabtune.perf use them too.

# --- §1a: perftest message rate and the single-QP shortfall ----------------------------------
QP_MSG_RATE = 2.90e6  # [D] cal §1a row 7: 380.0 Gb/s at 16 KiB with 1 QP => 2.90 M msg/s
QP_LARGE_CAP_GBPS = 284.4  # [S] cal §1a row 7: 1 QP, 1 MiB on 400G RoCE
QP_FREE_GBPS = 392.1  # [S] cal §1a row 7: 1 QP, 128 KiB
QP_CAP_FREE_BYTES = 128 * 1024  # [S] cal §1a row 7: 1 QP reaches line rate at 128 KiB
QP_CAP_FULL_BYTES = 1024 * 1024  # [S] cal §1a row 7: shortfall measured at 1 MiB
BASE_LATENCY_US = 1.6  # [E] formats/peers ngc threshold 2.5 us for write latency
HOP_LATENCY_US = 0.3  # [E] per switch hop (cut-through)

# --- §2: NCCL per-rail goodput, NVLink caps, size roll-off ----------------------------------
NCCL_NET_EFF = 47.0 / (397.5 / 8)  # [D] cal §2a: 47 GB/s per 400G NDR NIC / IB ceiling in GB/s
B_INTRA_RING = 370.0  # [S] cal §2a: H100 ring NVLink cap (nccl-tests#212, nccl#1455)
B_NVLS = 480.0  # [S] cal §2a: H100 NVLS single node
NVLS_TREE_2NODE = 0.98  # [S/D] cal §8: 2 nodes, default algo: 0.98 x B_NVLS (470)
ROLL_OFF_HALF_BYTES = 0.120 * 2**30  # [D] fitted to cal §2b AWS p5 4N: 8 GiB and 32 MiB rows
ROLL_OFF_EXP = 0.79  # [D] same fit
LAT_BASE_US = 10.0  # [E] small-message floor of a multi-node collective
LAT_PER_LOG2_RANK_US = 2.0  # [E] tree/ring latency growth per doubling of ranks
CHANNELS_PER_NIC = 2  # [E] NCCL rings per NIC on H100-class nodes

# --- §2c / §6: transport fallback, GDR, affinity ---------------------------------------------
SOCKET_EFF_ETH = 0.5  # [S/E] cal §8: TCP fallback busbw = 0.5 x wire GB/s (nccl#209 < 60%)
SOCKET_EFF_IPOIB = 0.32  # [S] cal §2c nccl#465: IPoIB 4 GB/s on 100G (12.5 GB/s)
F_NOGDR = {"all_reduce": 0.83, "all_gather": 0.87, "reduce_scatter": 0.83, "alltoall": 0.88}
# [S] cal §6 nccl#1579: 79.72/96.07, 82.23/94.48, 27.24/30.86; reduce_scatter [E] = all_reduce
F_GDR_FAR = {"PIX": 1.0, "PXB": 1.0, "PHB": 0.8, "NODE": 0.8, "SYS": 0.5}
# [S] PIX/PXB nccl#2409; [E] PHB/NODE cal §8 f_aff 0.8; [S] SYS perftest#241 0.48 -> 0.5
F_STAGED_SYS = 0.9  # [E] host bounce buffer on the far socket when GDR is off at SYS
DIST_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 3, "SYS": 4}
# [S] formats §8: NODE is PHB-or-worse for NCCL; levels LOC<PIX<PXB<PHB<SYS
GDR_LEVELS = {"LOC": 0, "PIX": 1, "PXB": 2, "PHB": 3, "SYS": 4}  # [S] formats §3
NCCL_DEFAULT_GDR_LEVEL = 2  # [E] NCCL's built-in default PXB (src/graph/paths.cc), not in cal

# --- §3: congestion control -------------------------------------------------------------------
LOSSY_GAMMA = 2.18  # [D] cal §3 perftest#219: 2:1 lossy incast -> 0.22 x; 2**-2.18 = 0.22
LOSSY_NO_CONGESTION = 0.95  # [E] cal §8 f_cc: PFC off, no congestion (collectives)
DCQCN_LOSSY_RESIDUAL = 0.1  # [E] DCQCN keeps 10% of the overload when PFC is absent
PFC_ONLY_CONGESTED = 0.9  # [E] cal §8 f_cc: PFC-only pause storms / HoL under congestion
DCQCN_MISTUNED = 0.85  # [E] cal §8 f_cc: DCQCN mis-tuned (CNPs share the data class)
ALLTOALL_INCAST = 2.0  # [E] transient overload of an all-to-all receiver
PAUSE_QUANTA_BITS = 65535 * 512  # [S] 802.1Qbb: pause time in 512-bit quanta
CNP_INTERVAL_US = 4.0  # [E] mlx5 NP: at most one CNP per QP per ~4 us
ECN_MARK_FRACTION = 0.05  # [E] share of packets marked while DCQCN holds a queue at Kmin

# --- §4/§5: routing ------------------------------------------------------------------------
ECMP_ALPHA = 0.5  # [E] cal §4: eff = prior**alpha, alpha 0.5 maps 0.36 -> 0.60
ECMP_TRIALS = 4000  # [E] cal §4 Monte-Carlo, 4000 trials
F_ROUTE_AR = 0.95  # [E] cal §8: IB AR / RoCE AR beyond one leaf
F_ROUTE_FTREE_SHIFT = 0.95  # [E] cal §8: ftree on ring/shift collectives
F_ROUTE_STATIC = 0.58  # [S] cal §4 Hoefler'08 55-60% effective bisection
F_ROUTE_BALANCED = 0.58 * 1.4  # [S/D] cal §4 Hoefler'09: balanced static routing +40%
AR_ENGINES = frozenset({"ar_updn", "ar_ftree", "ar_torus", "ar_dor"})  # [S] formats §7.2
FTREE_ENGINES = frozenset({"ftree", "ar_ftree"})
BALANCED_ENGINES = frozenset({"dfsssp", "sssp"})

# --- §7: noise ---------------------------------------------------------------------------------
CV_P2P = 0.005  # [E] cal §7: ib_write_bw CV 0.5%
CV_BUSBW = 0.02  # [E] cal §7: nccl-tests busbw, same allocation, 2%
CV_MIDSIZE_MULT = 2.5  # [E] cal §7: 1-64 MiB CV is 2-3x the large-message CV
OUTLIER_P = 0.02  # [E] cal §7: occasional slow run (other tenants, stas00)
OUTLIER_RANGE = (0.5, 0.9)  # [E] cal §7: bad-node mixture at 0.5x as the low end
