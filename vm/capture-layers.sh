#!/usr/bin/env bash
# Capture a layer-by-layer run in the QEMU guest: fio 4 KiB random reads on one storage stack with the layer
# probe (probes/layers.bt) and the NVMe probe beside it, into a run directory of probes/FORMAT.md.
# The guest side is vm/guest/layers-capture.sh; analyse the run with `ztbp layers RUN` and `ztbp opcodes RUN`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
	cat <<EOF
Usage: $0 [options]

Options:
  -o, --out DIR        run directory (default: runs/<UTC time>-layers-<fs>-<engine>)
      --fs STACK       raw (the zoned namespace, default), ext4 (on a second, conventional namespace) or
                       btrfs (mkfs.btrfs -O zoned on the zoned namespace)
      --engine NAME    fio ioengine: psync (default), io_uring or libaio
      --iodepth N      queue depth (default 1 for psync, 4 otherwise)
      --runtime SEC    seconds of random reads (default 5)
      --probes LIST    nvme,layers (default) or layers
      --trace-prep     also trace building the stack (mkfs, prefill) with the NVMe probe
      --bench          first measure fio IOPS without and with the layer probe (raw/bench.json)
      --zones N        zones of the emulated namespace (default 32 × 32 MiB)
  -h, --help           this text
EOF
}

OUT="" FS=raw ENGINE=psync IODEPTH="" RUNTIME=5 PROBES=nvme,layers TRACE_PREP=0 BENCH=0 ZONES=32
while [ $# -gt 0 ]; do
	case "$1" in
		-o|--out) OUT="$2"; shift ;;
		--fs) FS="$2"; shift ;;
		--engine) ENGINE="$2"; shift ;;
		--iodepth) IODEPTH="$2"; shift ;;
		--runtime) RUNTIME="$2"; shift ;;
		--probes) PROBES="$2"; shift ;;
		--trace-prep) TRACE_PREP=1 ;;
		--bench) BENCH=1 ;;
		--zones) ZONES="$2"; shift ;;
		-h|--help) usage; exit 0 ;;
		*) usage >&2; echo "capture-layers: error: unknown option '$1'" >&2; exit 2 ;;
	esac
	shift
done
case "$FS" in raw|ext4|btrfs) ;; *) echo "capture-layers: error: --fs must be raw, ext4 or btrfs" >&2; exit 2 ;; esac
case "$ENGINE" in psync|io_uring|libaio) ;; *) echo "capture-layers: error: --engine must be psync, io_uring or libaio" >&2; exit 2 ;; esac
[[ "$RUNTIME" =~ ^[1-9][0-9]*$ ]] || { echo "capture-layers: error: --runtime must be whole seconds" >&2; exit 2; }
if [ -z "$OUT" ]; then
	OUT="${ZTBP_RUNS:-$REPO/runs}/$(date -u +%Y%m%dT%H%M%SZ)-layers-$FS-$ENGINE"
fi
mkdir -p "$OUT"

args=(-o "$OUT" -q -t 1200 --zones "$ZONES" --zone-size 32M --conv-ns 1G
	--env "ZTBP_FS=$FS" --env "ZTBP_ENGINE=$ENGINE" --env "ZTBP_RUNTIME=$RUNTIME" --env "ZTBP_PROBES=$PROBES"
	--env "ZTBP_TRACE_PREP=$TRACE_PREP" --env "ZTBP_BENCH=$BENCH")
[ -n "$IODEPTH" ] && args+=(--env "ZTBP_IODEPTH=$IODEPTH")
rc=0
bash "$REPO/vm/vmtest.sh" "${args[@]}" -- 'bash /ztbp/src/vm/guest/layers-capture.sh' || rc=$?
grep '^ZTBP: ' "$OUT/console.log" 2>/dev/null | sed 's/^ZTBP: /capture-layers: /' || true
# vmtest.sh's own status can be non-zero when the guest command succeeded: the guest's meta.json decides.
if [ ! -f "$OUT/meta.json" ]; then
	echo "capture-layers: error: the guest wrote no meta.json (vmtest status $rc); see $OUT/console.log" >&2
	exit 1
fi
echo "capture-layers: run written to $OUT"
