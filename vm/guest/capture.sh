#!/bin/bash
# Guest side of a capture (run by `ztbp capture` through vm/vmtest.sh, or by `ztbp capture-host` on a real
# machine): reset the zones, start the NVMe probe, prefill, record the zone report, run the fio workload,
# stop the probe and write the run's raw/ files. Probes are run by probe-lib.sh (its LOSS and STOP rules).
#
# Environment (all optional except ZTBP_WORKLOAD):
#   ZTBP_OUT          run directory to write (default /ztbp/out)
#   ZTBP_DEV          zoned block device (default /dev/nvme0n1)
#   ZTBP_WORKLOAD     fio job file of the workload
#   ZTBP_PREFILL      fio job file that writes what the workload reads (run after the resets)
#   ZTBP_RESET        "FIRST COUNT": zones to reset before the prefill (default: none)
#   ZTBP_PROBE        bpftrace script (default probes/nvme_zone.bt next to this script's repository):
#                     nvme_zone.bt keeps its rows in a BPF map until it stops (the map dump is turned
#                     into CSV by probes/nvme_zone.awk); nvme_zone_stream.bt prints CSV rows as it goes
#   ZTBP_EXPECTED     commands the capture issues: sizes the map of nvme_zone.bt (probe-lib.sh, MAP SIZE;
#                     default 1300000, room for 2000000 rows); ZTBP_MAX_ROWS sets the size itself
#   ZTBP_RB_PAGES     perf ring buffer pages per CPU for a streaming probe (default 32768 = 128 MiB: a whole
#                     1M-read run of nvme_zone_stream.bt, so nothing is lost while its user space lags)
#   ZTBP_STOP_FILE    when this file appears, the workload is stopped early (default /ztbp/ctl/stop)
#   ZTBP_KO, ZTBP_KO_PARAMS   kernel module to insmod first (NVMeVirt) and its parameters
# Progress lines start with "ZTBP:" (parsed by the host). Working files stay in a local temporary folder
# (fast, no 9p traffic while tracing) and are copied to the run directory at the end.
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # also OUT, DEV, STOP_FILE, SRC (the repository)
settings WORKLOAD= PREFILL= RESET= PROBE="$SRC/probes/nvme_zone.bt" EXPECTED=1300000
PROGRESS_SECONDS=5
MAP_ROW_BYTES=256   # kernel memory per row of nvme_zone.bt's map (measured: 405 MB for 2M)

TMP=""
FIO_PID=""
READS_AT_START=0
STATUS="complete"

start_probe() {
	# The map of nvme_zone.bt holds every row until the end: sized for the commands expected.
	local keys=0
	if grep -q '@rows\[' "$PROBE"; then
		probe_map_keys nvme "$EXPECTED" "$MAP_ROW_BYTES"
		keys=$PROBE_KEYS
	fi
	probe_start nvme "$PROBE" "$keys"
}

stop_probe() {
	[ -n "${PROBE_PID[nvme]:-}" ] || return 0
	probe_stop nvme
	local unstamped
	unstamped="$(probe_counter nvme unstamped)"
	if [ "${unstamped:-0}" -gt 0 ]; then
		say "error $unstamped commands had no block-layer issue stamp, so the probe could not time them:" \
			"turn on the queue's I/O statistics with 'echo 2000 > /sys/block/$(basename "$DEV")/queue/wbt_lat_usec'" \
			"and capture again (see probes/nvme_zone.bt, ISSUE STAMP)"
		STATUS="failed"
	fi
}

reset_zones() {
	[ -n "$RESET" ] || return 0
	local first count zone_sectors
	read -r first count <<< "$RESET"
	zone_sectors="$(cat "/sys/block/$(basename "$DEV")/queue/chunk_sectors")"
	say "stage reset zones $first..$((first + count - 1))"
	blkzone reset -o $((first * zone_sectors)) -c "$count" "$DEV"
}

prefill() {
	[ -n "$PREFILL" ] || return 0
	say "stage prefill $(grep -m1 '^; ' "$PREFILL" | sed 's/^; //')"
	local t0=$SECONDS
	fio --eta=never --output-format=json --output="$TMP/prefill.json" "$PREFILL" || { say "error prefill fio failed"; return 1; }
	info prefill_s "$((SECONDS - t0))"
}

device_reads() {
	# Reads completed by the device so far (first field of the block device's stat).
	awk '{print $1}' "/sys/block/$(basename "$DEV")/stat"
}

fio_done() {
	echo $(($(device_reads) - READS_AT_START))
}

watch_progress() {
	# Report the commands traced and the reads done every few seconds (the host turns them into a countdown);
	# stop fio on request.
	while kill -0 "$FIO_PID" 2>/dev/null; do
		if [ -f "$STOP_FILE" ]; then
			say "stage stop requested: stopping the workload"
			kill -INT "$FIO_PID" 2>/dev/null
			echo partial > "$TMP/stopped"
			return
		fi
		say "progress traced=$(probe_traced nvme) fio=$(fio_done)"
		nap "$PROGRESS_SECONDS"
	done
}

run_workload() {
	say "stage workload $(grep -m1 '^; ' "$WORKLOAD" | sed 's/^; //')"
	local t0 rc=0
	t0="$(date +%s.%N)"
	READS_AT_START="$(device_reads)"
	fio --eta=never --output-format=json+ --output="$TMP/fio.json" "$WORKLOAD" &
	FIO_PID=$!
	watch_progress &
	local watcher=$!
	wait "$FIO_PID" || rc=$?
	kill "$watcher" 2>/dev/null
	wait "$watcher" 2>/dev/null
	info workload_s "$(echo "$(date +%s.%N) $t0" | awk '{printf "%.3f", $1 - $2}')"
	info fio_rc "$rc"
	[ -f "$TMP/stopped" ] && STATUS="partial"
	say "stage workload done (fio status $rc)"
	return 0
}

save_outputs() {
	mkdir -p "$OUT/raw" "$OUT/.capture"
	[ -f "$TMP/nvme.csv" ] && cp "$TMP/nvme.csv" "$OUT/raw/nvme.csv"
	# fio writes "fio: terminating on signal 2" into its output when stopped early: keep the JSON only.
	[ -s "$TMP/fio.json" ] && sed -n '/^{/,$p' "$TMP/fio.json" > "$OUT/raw/fio.json"
	[ -f "$TMP/zones.txt" ] && cp "$TMP/zones.txt" "$OUT/raw/zones.txt"
	[ -s "$TMP/prefill.json" ] && cp "$TMP/prefill.json" "$OUT/.capture/prefill-fio.json"
	cp "$TMP/nvme.err" "$OUT/.capture/probe.err" 2>/dev/null
	info status "$STATUS"
	cp "$TMP/guest.env" "$OUT/.capture/guest.env"
	sync
}

on_exit() {
	local rc=$?
	module_unload
	if [ -n "${PROBE_PID[nvme]:-}" ]; then
		STATUS="failed"
		stop_probe
	fi
	[ -n "$TMP" ] && [ -f "$TMP/guest.env" ] && save_outputs
	exit "$rc"
}

main() {
	[ -n "$WORKLOAD" ] || { say "error ZTBP_WORKLOAD must name the fio job file"; return 2; }
	TMP="$(mktemp -d /tmp/ztbp-capture.XXXXXX)"
	: > "$TMP/guest.env"
	trap on_exit EXIT
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	record_versions
	# a module (NVMeVirt) is loaded after the probe attached and unloaded before it stops (probe-lib.sh)
	device_bring_up "$DEV" start_probe || return 1
	reset_zones || return 1
	prefill || return 1
	blkzone report "$DEV" > "$TMP/zones.txt"
	if [ -f "$STOP_FILE" ]; then
		STATUS="partial"
	else
		run_workload
	fi
	module_unload
	stop_probe
	say "stage saving the run"
	return 0
}

# Sourced by bench.sh for its functions; run directly for a capture.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	main "$@"
fi
