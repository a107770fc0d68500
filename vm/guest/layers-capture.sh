#!/bin/bash
# Guest side of `ztbp capture-layers` (`just capture-layers`): build one storage stack, run fio 4 KiB random
# reads on it with the layer probe (probes/layers.bt) and the streaming NVMe probe (probes/nvme_zone_stream.bt)
# beside it, and write the raw/ files of a run directory (probes/FORMAT.md) plus .capture/guest.env, from which
# the host writes meta.json. Probes are run by probe-lib.sh (its LOSS and STOP rules).
#
# Environment (all optional):
#   ZTBP_OUT        run directory to write (default /ztbp/out)
#   ZTBP_FS         raw (the zoned namespace itself, default), ext4 (on the conventional namespace
#                   /dev/nvme0n2: boot with vmtest.sh --conv-ns) or btrfs (mkfs.btrfs -O zoned on the zoned one)
#   ZTBP_ENGINE     fio ioengine: psync (default), io_uring or libaio
#   ZTBP_IODEPTH    queue depth (default 1 for psync, 4 otherwise)
#   ZTBP_JOBS       fio jobs reading at once (default 1)
#   ZTBP_RUNTIME    seconds of random reads (default 5)
#   ZTBP_READS      this many reads instead (READS / JOBS per job, rounded up; no time bound): a count that does
#                   not depend on how fast the machine is
#   ZTBP_SIZE       size of the file / device region read (default 256M)
#   ZTBP_PROBES     comma list of probes to run: nvme,layers (default both)
#   ZTBP_EXPECTED   requests in flight at once: sizes the layer probe's maps (probe-lib.sh, MAP SIZE; default
#                   jobs x iodepth); ZTBP_MAX_ROWS sets the size itself (a tiny one tests the loss counting)
#   ZTBP_TRACE_PREP 1: start the NVMe probe before the stack is built, so raw/nvme.csv also holds the zone
#                   resets, writes and zone appends of mkfs and of the prefill (for `ztbp opcodes`)
#   ZTBP_BENCH      1: before the capture, measure fio IOPS without and with the layer probe (same boot)
#                   and write raw/bench.json
#   ZTBP_BENCH_ROUNDS  rounds of that bench, each fio without then with the probe (default 2)
# Progress lines start with "ZTBP:".
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # also OUT, DEV, STOP_FILE, SRC (the repository)
settings FS=raw ENGINE=psync JOBS=1 RUNTIME=5 READS=0 SIZE=256M PROBES=nvme,layers BENCH=0 TRACE_PREP=0
if [ "$ENGINE" = "psync" ]; then IODEPTH="${ZTBP_IODEPTH:-1}"; else IODEPTH="${ZTBP_IODEPTH:-4}"; fi
EXPECTED="${ZTBP_EXPECTED:-$((JOBS * IODEPTH))}"
stack_namespaces            # ZNS, CONV, MNT
BENCH_ROUNDS="${ZTBP_BENCH_ROUNDS:-2}"
# The streaming NVMe probe: its device time starts at nvme_setup_cmd, like the layer probe's.
NVME_PROBE="$SRC/probes/nvme_zone_stream.bt"
LAYERS_PROBE="$SRC/probes/layers.bt"
LAYERS_KEY_BYTES=2048   # kernel memory per map key of layers.bt (~30 maps of 8-byte keys and values)

TMP=""
TARGET=""
FS_DEV=""
ZONE_SECTORS=0
ZONED_KDEV=0
STATUS="complete"

usage() {
	cat <<EOF
Usage: ZTBP_FS=raw|ext4|btrfs ZTBP_ENGINE=psync|io_uring|libaio ... bash $0

Run in the guest by \`ztbp capture-layers\` (see its --help); the environment variables are listed at the top
of this script. Writes OUT/raw/{layers,nvme}.csv, fio.json, zones.txt (bench.json) and OUT/.capture/guest.env.
EOF
}


# kernel dev_t as the block tracepoints print it: (major << 20) | minor
kdev() { local mm; mm="$(stat -L -c '%Hr %Lr' "$1")"; echo $(( (${mm% *} << 20) | ${mm#* } )); }

prepare_stack() {
	record_device "$ZNS" || die "$ZNS is not a zoned namespace"
	modprobe ext4; modprobe btrfs
	ZONE_SECTORS="$(sys_queue "$ZNS" chunk_sectors)"
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
			# inode tables and journal zeroed now, not by a kernel thread while the probes run
			mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$CONV" || die "mkfs.ext4 failed"
			mkdir -p "$MNT" && mount -t ext4 -o noatime "$CONV" "$MNT" || die "mount ext4 failed"
			TARGET="$MNT/data"; FS_DEV="$CONV" ;;
		btrfs)
			say "stage stack btrfs -O zoned on $ZNS"
			blkzone reset "$ZNS" || die "blkzone reset failed"
			mkfs.btrfs -q -f -O zoned -m single -d single "$ZNS" > "$TMP/mkfs.txt" 2>&1 ||
				die "mkfs.btrfs -O zoned failed: $(tr '\n' ' ' < "$TMP/mkfs.txt")"
			mkdir -p "$MNT" && mount -t btrfs -o noatime "$ZNS" "$MNT" || die "mount btrfs failed: $(dmesg | tail -3)"
			TARGET="$MNT/data"; FS_DEV="$ZNS" ;;
		*) die "ZTBP_FS must be raw, ext4 or btrfs, not '$FS'" ;;
	esac
	if [ "$FS" != raw ]; then
		fio --name=fill --filename="$TARGET" --rw=write --bs=1M --direct=1 --size="$SIZE" \
			--output-format=terse > /dev/null || die "writing $TARGET failed"
	fi
	sync  # written out now: a sync while the probes run would be traced (a flush, a file system's commit)
	ZONED_KDEV="$(kdev "$ZNS")"
	info fs_device "$(basename "$FS_DEV")"
	info iodepth "$IODEPTH"
}

cold_caches() { # the file system's blocks and metadata out of memory, so the reads that follow find them on the
	# device as after a boot; just before the workload, once the probes are attached: started after dropping the
	# caches, a probe's compile took twice as long under TCG on a busy host (nvme_zone.bt 34-36 s against 17-18 s).
	# Clean pages only: prepare_stack wrote everything out, so dropping them issues no I/O
	echo 3 > /proc/sys/vm/drop_caches
}

start_layers() {
	probe_map_keys layers "$EXPECTED" "$LAYERS_KEY_BYTES"
	probe_start layers "$LAYERS_PROBE" "$PROBE_KEYS" "$ZONE_SECTORS" "$ZONED_KDEV" || die "the layer probe did not start"
}

start_nvme() {
	probe_start nvme "$NVME_PROBE" 0 || die "the NVMe probe did not start"
}

run_fio() { # output.json: fio's JSON with latency histograms (json+), so meta.json gets exact percentiles
	local amount=(--runtime="$RUNTIME" --time_based)
	[ "$READS" -gt 0 ] && amount=(--number_ios=$(((READS + JOBS - 1) / JOBS)))
	fio --name=randread --filename="$TARGET" --rw=randread --bs=4k --direct=1 --ioengine="$ENGINE" \
		--iodepth="$IODEPTH" --numjobs="$JOBS" --size="$SIZE" "${amount[@]}" \
		--randrepeat=0 --output-format=json+ --output="$1" > /dev/null || die "fio failed"
}

amount_text() { # what run_fio reads, for progress lines
	if [ "$READS" -gt 0 ]; then echo "$(((READS + JOBS - 1) / JOBS)) reads per job"; else echo "${RUNTIME}s"; fi
}

iops() { # fio.json -> read IOPS, summed over the jobs (the first "iops" inside each job's "read" object)
	awk '/"read" : \{/ {inside = 1} inside && /"iops" :/ {gsub(/,/, "", $3); s += $3; inside = 0}
		END {printf "%.1f", s}' "$1"
}

bench() {
	say "stage bench: fio without and with the layer probe, $BENCH_ROUNDS rounds each, $(amount_text) per round"
	local r without=() with=() lost=()
	for r in $(seq 1 "$BENCH_ROUNDS"); do
		run_fio "$TMP/bench-off-$r.json"; without+=("$(iops "$TMP/bench-off-$r.json")")
		start_layers
		run_fio "$TMP/bench-on-$r.json"; with+=("$(iops "$TMP/bench-on-$r.json")")
		probe_stop layers
		lost+=("$PROBE_LOST")
	done
	printf '{"engine": "%s", "iodepth": %s, "jobs": %s, "fs": "%s", "runtime_s": %s, "iops_without": [%s], "iops_with": [%s], "lost_events_with": [%s]}\n' \
		"$ENGINE" "$IODEPTH" "$JOBS" "$FS" "$RUNTIME" "$(IFS=,; echo "${without[*]}")" \
		"$(IFS=,; echo "${with[*]}")" "$(IFS=,; echo "${lost[*]}")" > "$TMP/bench.json"
	say "bench $(cat "$TMP/bench.json")"
}

save_outputs() {
	save_probe_files ${PROBES//,/ }
	[ -s "$TMP/fio.json" ] && cp "$TMP/fio.json" "$OUT/raw/fio.json"
	[ -f "$TMP/zones.txt" ] && cp "$TMP/zones.txt" "$OUT/raw/zones.txt"
	[ -f "$TMP/bench.json" ] && cp "$TMP/bench.json" "$OUT/raw/bench.json"
	save_status
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	local name t0
	TMP="$(mktemp -d /tmp/ztbp-layers.XXXXXX)"
	: > "$TMP/guest.env"
	trap capture_on_exit EXIT
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	record_versions
	for name in ${PROBES//,/ }; do
		case "$name" in nvme|layers) ;; *) die "unknown probe '$name' (nvme, layers)" ;; esac
	done
	if [ "$TRACE_PREP" = 1 ] && [[ ",$PROBES," == *,nvme,* ]]; then start_nvme; fi
	prepare_stack
	[ "$BENCH" = 1 ] && { cold_caches; bench; }
	# one after the other: two bpftraces attaching at once locked up the guest kernel under TCG (both CPUs
	# stuck in soft lockups, seen once)
	for name in ${PROBES//,/ }; do
		[ -n "${PROBE_PID[$name]:-}" ] || "start_$name"
	done
	cold_caches
	say "stage workload fio randread 4k $ENGINE iodepth $IODEPTH jobs $JOBS on $FS ($TARGET): $(amount_text)"
	t0="$(date +%s.%N)"
	run_fio "$TMP/fio.json"
	info workload_s "$(echo "$(date +%s.%N) $t0" | awk '{printf "%.3f", $1 - $2}')"
	say "stage workload done: $(iops "$TMP/fio.json") IOPS; stopping the probes"
	for name in ${PROBES//,/ }; do probe_stop "$name"; done
	blkzone report "$ZNS" > "$TMP/zones.txt"
	say "stage saving the run"
}

main "$@"
