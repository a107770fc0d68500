"""ZTBP workbench: trace, analyse and cache-tune zoned (ZNS) NVMe SSDs.

Data flows one way: probe CSV (raw/) -> typed Parquet (derived/) -> metrics, clusters, cache model ->
figures and reports -> cache-config.json -> the ztbp-ctl ioctl helper. The run-directory contract is
documented in probes/FORMAT.md.
"""

__version__ = "0.1.0"
