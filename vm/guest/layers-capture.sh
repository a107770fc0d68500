#!/bin/bash
# Guest side of `just capture-layers`: build one storage stack, run fio 4 KiB random reads on it with the
# layer probe (probes/layers.bt) and the streaming NVMe probe (probes/nvme_zone_stream.bt) beside it, and write
# a run directory in the contract of probes/FORMAT.md (meta.json, raw/layers.csv, raw/nvme.csv, raw/fio.json).
#
# Environment (all optional):
#   ZTBP_OUT       run directory to write (default /ztbp/out)
#   ZTBP_FS        raw (the zoned namespace itself, default), ext4 (on the conventional namespace
#                  /dev/nvme0n2: boot with vmtest.sh --conv-ns) or btrfs (mkfs.btrfs -O zoned on the zoned one)
#   ZTBP_ENGINE    fio ioengine: psync (default), io_uring or libaio
#   ZTBP_IODEPTH   queue depth (default 1 for psync, 4 otherwise)
#   ZTBP_RUNTIME   seconds of random reads (default 5)
#   ZTBP_SIZE      size of the file / device region read (default 256M)
#   ZTBP_PROBES    comma list of probes to run: nvme,layers (default both)
#   ZTBP_TRACE_PREP 1: start the NVMe probe before the stack is built, so raw/nvme.csv also holds the zone
#                  resets, writes and zone appends of mkfs and of the prefill (for `ztbp opcodes`)
#   ZTBP_BENCH     1: before the capture, measure fio IOPS without and with the layer probe (same boot)
#                  and write raw/bench.json
# Progress lines start with "ZTBP:".
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
OUT="${ZTBP_OUT:-/ztbp/out}"
FS="${ZTBP_FS:-raw}"
ENGINE="${ZTBP_ENGINE:-psync}"
RUNTIME="${ZTBP_RUNTIME:-5}"
SIZE="${ZTBP_SIZE:-256M}"
PROBES="${ZTBP_PROBES:-nvme,layers}"
BENCH="${ZTBP_BENCH:-0}"
TRACE_PREP="${ZTBP_TRACE_PREP:-0}"
if [ "$ENGINE" = "psync" ]; then IODEPTH="${ZTBP_IODEPTH:-1}"; else IODEPTH="${ZTBP_IODEPTH:-4}"; fi
ZNS=/dev/nvme0n1
CONV=/dev/nvme0n2
MNT=/mnt/ztbp
RB_PAGES=4096
# The streaming NVMe probe: its device time starts at nvme_setup_cmd, like this script's layer probe.
NVME_PROBE="$SRC/probes/nvme_zone_stream.bt"
ATTACH_TIMEOUT=300
STOP_TIMEOUT=60

TMP="$(mktemp -d /tmp/ztbp-layers.XXXXXX)"
declare -A BT_PID=()

say() { echo "ZTBP: $*"; }
die() { say "error $*"; exit 1; }

sysq() { cat "/sys/block/$(basename "$1")/queue/$2"; }

# kernel dev_t as the block tracepoints print it: (major << 20) | minor
kdev() { local mm; mm="$(stat -L -c '%Hr %Lr' "$1")"; echo $(( (${mm% *} << 20) | ${mm#* } )); }

prepare_stack() {
	[ -b "$ZNS" ] || die "$ZNS is not a block device"
	[ "$(sysq "$ZNS" zoned)" = "host-managed" ] || die "$ZNS is not a host-managed zoned namespace"
	modprobe ext4; modprobe btrfs
	local zone_sectors
	zone_sectors="$(sysq "$ZNS" chunk_sectors)"
	case "$FS" in
		raw)
			say "stage stack raw zoned namespace $ZNS: reset, write $SIZE sequentially"
			blkzone reset "$ZNS" || die "blkzone reset failed"
			fio --name=fill --filename="$ZNS" --rw=write --bs=1M --direct=1 --zonemode=zbd --size="$SIZE" \
				--output-format=terse > /dev/null || die "prefill of $ZNS failed"
			TARGET="$ZNS"; FS_DEV="$ZNS" ;;
		ext4)
			[ -b "$CONV" ] || die "$CONV missing: ext4 needs the conventional namespace (vmtest.sh --conv-ns 1G)"
			say "stage stack ext4 on the conventional namespace $CONV"
			mkfs.ext4 -q -F "$CONV" || die "mkfs.ext4 failed"
			mkdir -p "$MNT" && mount -t ext4 "$CONV" "$MNT" || die "mount ext4 failed"
			TARGET="$MNT/data"; FS_DEV="$CONV" ;;
		btrfs)
			say "stage stack btrfs -O zoned on $ZNS"
			blkzone reset "$ZNS" || die "blkzone reset failed"
			mkfs.btrfs -q -f -O zoned -m single -d single "$ZNS" > "$TMP/mkfs.txt" 2>&1 ||
				die "mkfs.btrfs -O zoned failed: $(tr '\n' ' ' < "$TMP/mkfs.txt")"
			mkdir -p "$MNT" && mount -t btrfs "$ZNS" "$MNT" || die "mount btrfs failed: $(dmesg | tail -3)"
			TARGET="$MNT/data"; FS_DEV="$ZNS" ;;
		*) die "ZTBP_FS must be raw, ext4 or btrfs, not '$FS'" ;;
	esac
	if [ "$FS" != raw ]; then
		fio --name=fill --filename="$TARGET" --rw=write --bs=1M --direct=1 --size="$SIZE" \
			--output-format=terse > /dev/null || die "writing $TARGET failed"
		sync
	fi
	echo 3 > /proc/sys/vm/drop_caches
	ZONE_SECTORS="$zone_sectors"
	ZONED_KDEV="$(kdev "$ZNS")"
}

start_probe() { # name script args...
	local name="$1" script="$2"; shift 2
	rm -f "$TMP/$name.out" "$TMP/$name.err"
	BPFTRACE_PERF_RB_PAGES="$RB_PAGES" bpftrace "$script" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
	BT_PID[$name]=$!
	local t0=$SECONDS
	until grep -q "^# ztbp $name v1" "$TMP/$name.out" 2>/dev/null; do
		kill -0 "${BT_PID[$name]}" 2>/dev/null || die "bpftrace $name exited: $(tr '\n' ' ' < "$TMP/$name.err")"
		[ $((SECONDS - t0)) -lt "$ATTACH_TIMEOUT" ] || die "bpftrace $name did not attach in $ATTACH_TIMEOUT s"
		sleep 0.5
	done
	say "stage probe $name attached after $((SECONDS - t0)) s"
}

stop_probe() { # name -> raw/<name>.csv, LOST_<name>
	local name="$1" lost pid t0=$SECONDS
	pid="${BT_PID[$name]}"
	kill -INT "$pid" 2>/dev/null
	local resent=0
	while kill -0 "$pid" 2>/dev/null; do
		# bpftrace sometimes misses the first SIGINT (seen under TCG, waiting in epoll_wait): ask again
		if [ "$resent" = 0 ] && [ $((SECONDS - t0)) -ge 10 ]; then
			kill -INT "$pid" 2>/dev/null; resent=1
		elif [ "$resent" = 1 ] && [ $((SECONDS - t0)) -ge 20 ]; then
			say "warning bpftrace $name ignored SIGINT twice: sending SIGTERM"
			kill -TERM "$pid" 2>/dev/null; resent=2
		fi
		if [ $((SECONDS - t0)) -ge "$STOP_TIMEOUT" ]; then
			say "warning bpftrace $name still running $STOP_TIMEOUT s after SIGINT (wchan $(cat "/proc/$pid/wchan" 2>/dev/null)): killing it"
			cat "/proc/$pid/stack" 2>/dev/null | head -12 | sed 's/^/ZTBP:   /'
			kill -KILL "$pid" 2>/dev/null
			break
		fi
		sleep 0.5
	done
	wait "$pid" 2>/dev/null
	unset "BT_PID[$name]"
	lost="$(grep -h -o -E '^Lost [0-9]+ events' "$TMP/$name.out" "$TMP/$name.err" | awk '{s += $2} END {print s + 0}')"
	# from the version line on, without bpftrace's messages, END counters ("@name: N") and blank lines
	sed -n "/^# ztbp $name v1\$/,\$p" "$TMP/$name.out" | grep -v -E '^(Lost [0-9]+ events|@[a-z_]+: [0-9]+)?$' \
		> "$TMP/$name.csv"
	echo "$lost" > "$TMP/$name.lost"
	say "stage probe $name stopped: $(($(wc -l < "$TMP/$name.csv") - 2)) rows, $lost lost events"
}

run_fio() { # output.json
	fio --name=randread --filename="$TARGET" --rw=randread --bs=4k --direct=1 --ioengine="$ENGINE" \
		--iodepth="$IODEPTH" --size="$SIZE" --runtime="$RUNTIME" --time_based --randrepeat=0 \
		--output-format=json --output="$1" > /dev/null || die "fio failed"
}

iops() { grep -m1 -o '"iops" : [0-9.]*' "$1" | awk '{print $3}'; }

bench() {
	say "stage bench: fio without and with the layer probe, 2 rounds each, ${RUNTIME}s per round"
	local r without=() with=()
	for r in 1 2; do
		run_fio "$TMP/bench-off-$r.json"; without+=("$(iops "$TMP/bench-off-$r.json")")
		start_probe layers "$SRC/probes/layers.bt" "$ZONE_SECTORS" "$ZONED_KDEV"
		run_fio "$TMP/bench-on-$r.json"; with+=("$(iops "$TMP/bench-on-$r.json")")
		sleep 1; stop_probe layers
		cp "$TMP/layers.lost" "$TMP/bench-lost-$r"
	done
	printf '{"engine": "%s", "iodepth": %s, "fs": "%s", "runtime_s": %s, "iops_without": [%s], "iops_with": [%s], "lost_events_with": [%s, %s]}\n' \
		"$ENGINE" "$IODEPTH" "$FS" "$RUNTIME" "$(IFS=,; echo "${without[*]}")" "$(IFS=,; echo "${with[*]}")" \
		"$(cat "$TMP/bench-lost-1")" "$(cat "$TMP/bench-lost-2")" > "$TMP/bench.json"
	say "bench $(cat "$TMP/bench.json")"
}

write_meta() {
	local lba zone_lba cap_lba nr lost_json="" probes_json="" name sep=""
	lba="$(sysq "$ZNS" logical_block_size)"
	zone_lba=$((ZONE_SECTORS * 512 / lba))
	cap_lba=$(( $(blkzone report -c 1 "$ZNS" | sed -n 's/.*cap \(0x[0-9a-f]*\).*/\1/p') * 512 / lba ))
	nr="$(sysq "$ZNS" nr_zones)"
	for name in ${PROBES//,/ }; do
		lost_json+="$sep\"$name\": $(cat "$TMP/$name.lost")"
		local file="raw/$name.csv" attach="tracepoint"
		[ "$name" = layers ] && attach="tracepoint+kfunc"
		probes_json+="$sep\"$name\": {\"file\": \"$file\", \"version\": 1, \"attach\": \"$attach\"}"
		sep=", "
	done
	cat > "$OUT/meta.json" <<EOF
{
  "format": "ztbp-run/1",
  "device": "$(basename "$ZNS")",
  "lba_bytes": $lba,
  "zone_size_lba": $zone_lba,
  "zone_cap_lba": $cap_lba,
  "nr_zones": $nr,
  "synthetic": false,
  "workload": {"name": "layers-$FS-$ENGINE", "fio": "randread bs=4k direct=1", "engine": "$ENGINE",
               "iodepth": $IODEPTH, "runtime_s": $RUNTIME, "size": "$SIZE", "fs": "$FS",
               "fs_device": "$(basename "$FS_DEV")"},
  "lost_events": {$lost_json},
  "probes": {$probes_json},
  "backend": "qemu",
  "complete": true,
  "created": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "versions": {"kernel": "$(uname -r)", "bpftrace": "$(bpftrace --version | head -n 1)",
               "fio": "$(fio --version | head -n 1)"}
}
EOF
}

main() {
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	local name early=0
	if [ "$TRACE_PREP" = 1 ] && [[ ",$PROBES," == *,nvme,* ]]; then
		start_probe nvme "$NVME_PROBE"
		early=1
	fi
	prepare_stack
	[ "$BENCH" = 1 ] && bench
	for name in ${PROBES//,/ }; do
		case "$name" in
			nvme) [ "$early" = 1 ] || start_probe nvme "$NVME_PROBE" ;;
			layers) start_probe layers "$SRC/probes/layers.bt" "$ZONE_SECTORS" "$ZONED_KDEV" ;;
			*) die "unknown probe '$name' (nvme, layers)" ;;
		esac
	done
	say "stage workload fio randread 4k $ENGINE iodepth $IODEPTH on $FS ($TARGET) for ${RUNTIME}s"
	run_fio "$TMP/fio.json"
	say "stage workload done: $(iops "$TMP/fio.json") IOPS; stopping the probes"
	sleep 2
	for name in ${PROBES//,/ }; do stop_probe "$name"; done
	blkzone report "$ZNS" > "$TMP/zones.txt"
	mkdir -p "$OUT/raw"
	for name in ${PROBES//,/ }; do cp "$TMP/$name.csv" "$OUT/raw/$name.csv"; done
	cp "$TMP/fio.json" "$OUT/raw/fio.json"
	cp "$TMP/zones.txt" "$OUT/raw/zones.txt"
	[ -f "$TMP/bench.json" ] && cp "$TMP/bench.json" "$OUT/raw/bench.json"
	write_meta
	[ "$FS" != raw ] && umount "$MNT"
	say "stage done: $(iops "$TMP/fio.json") IOPS"
}

main "$@"
