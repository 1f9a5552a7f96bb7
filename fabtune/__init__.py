"""fabtune: Ansible-driven RDMA fabric tuning for multi-node GPU clusters."""

__version__ = "0.1.0"
