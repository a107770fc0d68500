"""Acquisition: the QEMU harness, captures in the VM and on a host, fio workloads, synthetic runs."""
