# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""Whether a server listens on its port: how to look (``ss`` for TCP, iproute2's ``rdma`` for rdma_cm)
and how to read the answer. Shared by the module fabric_run (on the hosts) and the controller's
direct SSH channel (``fabtune.perf.roundchannel``), so both wait for a server the same way.
"""

from __future__ import annotations

import json

LISTEN_CHECKS = {  # how a server's listening shows: TCP in ss, rdma_cm (-R) in iproute2's rdma
    False: ["ss", "-Hltn"],
    True: ["rdma", "-j", "resource", "show", "cm_id"],
}


def listening_tcp(text: str, port: int) -> bool:
    """Whether ``ss -Hltn`` lists a listening socket on ``port`` (its fourth column, ``ADDR:PORT``)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3].rpartition(":")[2] == str(port):
            return True
    return False


def listening_cm_id(text: str, port: int) -> bool:
    """Whether ``rdma -j resource show cm_id`` lists a LISTEN cm_id on ``port`` (src-addr ``ADDR:PORT``)."""
    try:
        rows = json.loads(text)
    except ValueError:
        return False
    return any(
        isinstance(row, dict) and row.get("state") == "LISTEN"
        and str(row.get("src-addr", "")).rpartition(":")[2] == str(port)
        for row in (rows if isinstance(rows, list) else [])
    )
