"""The tuning loop: decision statistics (pure) and the loop (I/O through the Ansible adapter)."""
