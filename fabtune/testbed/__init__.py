"""The emulated rack: GPU nodes as Linux namespaces with sshd, reachable over real SSH."""
