#!/bin/bash
# Guest side of a capture (run by `ztbp capture` through vm/vmtest.sh, or by `ztbp capture-host` on a real
# machine): reset the zones, start the NVMe probe, prefill, record the zone report, run the fio workload,
# stop the probe and write the run's raw/ files.
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
#   ZTBP_MAX_ROWS     rows the map of nvme_zone.bt can hold (BPFTRACE_MAP_KEYS_MAX; default 2000000):
#                     more than the commands the capture issues, or the excess is counted as lost
#   ZTBP_RB_PAGES     perf ring buffer pages per CPU for bpftrace (default 32768 = 128 MiB: a whole
#                     1M-read run of nvme_zone_stream.bt, so nothing is lost while its user space lags)
#   ZTBP_STOP_FILE    when this file appears, the workload is stopped early (default /ztbp/ctl/stop)
#   ZTBP_KO, ZTBP_KO_PARAMS   kernel module to insmod first (NVMeVirt) and its parameters
# Progress lines start with "ZTBP:" (parsed by the host). Working files stay in a local temporary folder
# (fast, no 9p traffic while tracing) and are copied to the run directory at the end.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${ZTBP_OUT:-/ztbp/out}"
DEV="${ZTBP_DEV:-/dev/nvme0n1}"
WORKLOAD="${ZTBP_WORKLOAD:-}"
PREFILL="${ZTBP_PREFILL:-}"
RESET="${ZTBP_RESET:-}"
PROBE="${ZTBP_PROBE:-$HERE/../../probes/nvme_zone.bt}"
RB_PAGES="${ZTBP_RB_PAGES:-32768}"
MAX_ROWS="${ZTBP_MAX_ROWS:-2000000}"
TO_CSV="$(dirname "$PROBE")/nvme_zone.awk"
STOP_FILE="${ZTBP_STOP_FILE:-/ztbp/ctl/stop}"
PROGRESS_SECONDS=5
ATTACH_TIMEOUT=180
DRAIN_TIMEOUT=900
STOP_TIMEOUT=120
DUMP_TIMEOUT=1800
MAP_ROW_BYTES=256

TMP=""
BT_PID=""
FIO_PID=""
MAP_PROBE=0
READS_AT_START=0
STATUS="complete"

say() { echo "ZTBP: $*"; }
info() { echo "$1=$2" >> "$TMP/guest.env"; }

load_module() {
	[ -n "${ZTBP_KO:-}" ] || return 0
	say "stage module insmod $(basename "$ZTBP_KO") ${ZTBP_KO_PARAMS:-}"
	# shellcheck disable=SC2086  # the parameters are separate words
	insmod "$ZTBP_KO" ${ZTBP_KO_PARAMS:-} || { say "error insmod failed (see console.log)"; return 1; }
	local i
	for i in $(seq 1 300); do
		[ -b "$DEV" ] && return 0
		sleep 0.1
	done
	say "error $DEV did not appear after loading the module"
	return 1
}

check_device() {
	local name zoned
	[ -b "$DEV" ] || { say "error $DEV is not a block device"; return 1; }
	name="$(basename "$DEV")"
	zoned="$(cat "/sys/block/$name/queue/zoned" 2>/dev/null || echo none)"
	[ "$zoned" = "host-managed" ] || [ "$zoned" = "host-aware" ] || {
		say "error $DEV is not zoned (queue/zoned = $zoned)"; return 1; }
	info device "$name"
	info lba_bytes "$(cat "/sys/block/$name/queue/logical_block_size")"
	info zone_sectors "$(cat "/sys/block/$name/queue/chunk_sectors")"
	info nr_zones "$(cat "/sys/block/$name/queue/nr_zones")"
	info max_open_zones "$(cat "/sys/block/$name/queue/max_open_zones" 2>/dev/null || echo 0)"
	info max_active_zones "$(cat "/sys/block/$name/queue/max_active_zones" 2>/dev/null || echo 0)"
	info zoned "$zoned"
	# zone capacity of the first zone, in 512-byte sectors (blkzone: "cap 0x...")
	info zone_cap_sectors "$(( $(blkzone report -c 1 "$DEV" | sed -n 's/.*cap \(0x[0-9a-f]*\).*/\1/p') ))"
}

record_versions() {
	info kernel "$(uname -r)"
	info kernel_version "$(uname -v)"
	info bpftrace "$(bpftrace --version 2>&1 | head -n 1)"
	info fio "$(fio --version 2>&1 | head -n 1)"
	info nvme_cli "$(nvme version 2>&1 | head -n 1)"
	info blkzone "$(blkzone --version 2>&1 | head -n 1)"
}

limit_map_rows() {
	# bpftrace preallocates every map for BPFTRACE_MAP_KEYS_MAX keys: ~200 bytes of kernel memory per row of
	# nvme_zone.bt (measured: 405 MB for 2M). Keep it to a quarter of the memory available.
	local avail_kb cap
	avail_kb="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
	cap=$((avail_kb * 1024 / 4 / MAP_ROW_BYTES))
	if [ "$MAX_ROWS" -gt "$cap" ]; then
		say "stage probe room for $cap rows only (a quarter of the memory available, not the $MAX_ROWS asked" \
			"for): commands beyond that are counted as lost; trace fewer reads or use nvme_zone_stream.bt"
		MAX_ROWS=$cap
	fi
	info probe_max_rows "$MAX_ROWS"
}

start_probe() {
	say "stage probe starting bpftrace $(basename "$PROBE") (compiling under emulation takes a while)"
	# stdout, not -o: bpftrace line-buffers stdout, so the BEGIN header shows when the probes are attached
	# (with -o it sits in a full buffer). The file is on the guest's tmpfs, not on 9p. nice 19: bpftrace's
	# user space (formatting streamed rows, printing the map at the end) yields the CPUs to the workload.
	# A probe that fills @rows is dumped at exit (map mode): its map is sized (BPFTRACE_MAP_KEYS_MAX) and its
	# perf buffer, which carries only the progress counter, stays small. A streaming probe gets bpftrace's
	# default map size and a perf buffer for the whole run (see wait_for_drain).
	local -a tune
	if grep -q '@rows\[' "$PROBE"; then MAP_PROBE=1; else MAP_PROBE=0; fi
	if [ "$MAP_PROBE" = 1 ]; then
		limit_map_rows
		tune=(BPFTRACE_MAP_KEYS_MAX="$MAX_ROWS" BPFTRACE_PERF_RB_PAGES=64)
		info probe_mode map
	else
		tune=(BPFTRACE_STRLEN=16 BPFTRACE_PERF_RB_PAGES="$RB_PAGES")
		info probe_mode stream
	fi
	env "${tune[@]}" nice -n 19 bpftrace "$PROBE" > "$TMP/probe.out" 2> "$TMP/probe.err" &
	BT_PID=$!
	local t0=$SECONDS
	# BEGIN prints the version line once every probe is attached.
	until grep -q '^# ztbp nvme v1' "$TMP/probe.out" 2>/dev/null; do
		if ! kill -0 "$BT_PID" 2>/dev/null; then
			say "error bpftrace exited: $(tr '\n' ' ' < "$TMP/probe.err")"
			return 1
		fi
		if [ $((SECONDS - t0)) -ge "$ATTACH_TIMEOUT" ]; then
			say "error bpftrace did not attach within $ATTACH_TIMEOUT s"
			return 1
		fi
		sleep 0.2
	done
	sleep 1
	info probe_attach_s "$((SECONDS - t0))"
	say "stage probe attached after $((SECONDS - t0)) s"
}

wait_for_drain() {
	# bpftrace's user space formats rows slower than a busy guest completes commands: the perf buffer
	# holds the backlog. Wait until its output stops growing, then stop it (unread events would be lost).
	local size=-1 now still=0 t0=$SECONDS
	while [ "$still" -lt 3 ] && [ $((SECONDS - t0)) -lt "$DRAIN_TIMEOUT" ]; do
		now="$(stat -c %s "$TMP/probe.out")"
		if [ "$now" = "$size" ]; then
			still=$((still + 1))
		else
			still=0
			size="$now"
		fi
		if [ $(((SECONDS - t0) % 10)) -eq 0 ] && [ "$still" -eq 0 ]; then
			say "stage probe draining its buffer: $(wc -l < "$TMP/probe.out") rows written"
		fi
		sleep 1
	done
	info probe_drain_s "$((SECONDS - t0))"
}

cpu_ticks() {
	# CPU time bpftrace has used so far (user + system clock ticks), or empty once it has exited.
	awk '{print $14 + $15}' "/proc/$BT_PID/stat" 2>/dev/null
}

signal_until_exit() {
	# SIGINT bpftrace once and wait for it to exit. A second SIGINT kills bpftrace outright, losing what it
	# has not printed (the whole map of nvme_zone.bt, which it reads before printing a line: about 50 s per
	# million rows under TCG), so the signal is repeated only when bpftrace has used no CPU for 5 s: it has
	# been seen to miss a SIGINT and sit in epoll_wait. It gets STOP_TIMEOUT s of idleness, DUMP_TIMEOUT
	# in all.
	local t0=$SECONDS idle=0 ticks now
	ticks="$(cpu_ticks)"
	kill -INT "$BT_PID" 2>/dev/null
	while kill -0 "$BT_PID" 2>/dev/null; do
		sleep 1
		now="$(cpu_ticks)"
		if [ "$now" = "$ticks" ]; then idle=$((idle + 1)); else idle=0; fi
		ticks="$now"
		if [ "$idle" -ge "$STOP_TIMEOUT" ] || [ $((SECONDS - t0)) -ge "$DUMP_TIMEOUT" ]; then break; fi
		if [ "$idle" -gt 0 ] && [ $((idle % 5)) -eq 0 ]; then kill -INT "$BT_PID" 2>/dev/null; fi
	done
	if kill -0 "$BT_PID" 2>/dev/null; then
		say "stage probe bpftrace did not finish after SIGINT in $((SECONDS - t0)) s: terminating it (rows not yet written are lost)"
		kill -TERM "$BT_PID" 2>/dev/null
		sleep 5
		kill -KILL "$BT_PID" 2>/dev/null
	fi
	wait "$BT_PID" 2>/dev/null
	say "stage probe bpftrace exited after $((SECONDS - t0)) s; extracting the rows"
}

recursion_misses() {
	# Runs of bpftrace's programs that the kernel skipped because the same program was already running on
	# that CPU (a completion interrupt inside the completion program): fdinfo "recursion_misses" of each
	# program (Linux >= 5.12; 0 where not reported). In map mode each is a command without a row or count.
	local f v n=0
	for f in /proc/"$BT_PID"/fdinfo/*; do
		v="$(sed -n 's/^recursion_misses:[[:space:]]*\([0-9]*\)$/\1/p' "$f" 2>/dev/null)"
		[ -n "$v" ] && n=$((n + v))
	done
	echo "$n"
}

counter() {
	# The last value bpftrace printed for a counter map ("@name: N"), or empty if it never printed one.
	sed -n "s/^@$1: \([0-9]*\)\$/\1/p" "$TMP/probe.out" | tail -n 1
}

extract_rows() {
	# probe.out -> nvme.csv: the two header lines of the probe's BEGIN, then the rows in completion order.
	if [ "$MAP_PROBE" = 1 ]; then
		sed -n '/^# ztbp nvme v1$/{p;n;p;q}' "$TMP/probe.out" > "$TMP/nvme.csv"
		if ! grep -q '^@unstamped: ' "$TMP/probe.out"; then
			# bpftrace prints its maps, @unstamped last, only when it exits normally.
			say "error bpftrace did not print its map of rows (killed or crashed before its exit?): they are lost"
			STATUS="failed"
		fi
		if ! awk -f "$TO_CSV" "$TMP/probe.out" | LC_ALL=C sort -n -t, -k1,1 | cut -d, -f2- >> "$TMP/nvme.csv"; then
			say "error $(basename "$TO_CSV") could not convert every row (see console.log); they count as lost"
			STATUS="failed"
		fi
	else
		# From the version line on, without bpftrace's own messages, counters and blank lines.
		sed -n '/^# ztbp nvme v1$/,$p' "$TMP/probe.out" |
			grep -v -E '^(Lost [0-9]+ events|@[a-z_]+: [0-9]+)?$' > "$TMP/nvme.csv"
	fi
}

stop_probe() {
	[ -n "$BT_PID" ] || return 0
	[ "$MAP_PROBE" = 1 ] || wait_for_drain
	say "stage probe stopping bpftrace"
	local misses
	misses="$(recursion_misses)"
	signal_until_exit
	BT_PID=""
	extract_rows
	local lost setups completed unstamped unmatched rows unprinted
	lost="$(grep -h -o -E '^Lost [0-9]+ events' "$TMP/probe.out" "$TMP/probe.err" | awk '{s += $2} END {print s + 0}')"
	completed="$(counter completed)"
	unstamped="$(counter unstamped)"
	unstamped="${unstamped:-0}"
	if [ "$MAP_PROBE" = 1 ]; then
		# No submission-side probe: every command is counted once, at completion, unless the kernel skipped
		# the program (a recursion miss); the stream probe's setup count covers that case by itself.
		if [ -n "$completed" ]; then setups=$((completed + misses)); else setups=""; fi
	else
		setups="$(counter setups)"
	fi
	unmatched=$(( ${setups:-0} - ${completed:-0} ))
	rows=$(($(wc -l < "$TMP/nvme.csv") - 2))
	# Rows the kernel side counted but that never reached the file: "Lost N events" and anything still in
	# the perf buffer when bpftrace stopped (stream), or rows a full map could not take (map).
	unprinted=$(( ${completed:-0} - rows ))
	[ "$unprinted" -lt "$lost" ] && unprinted=$lost
	if [ -z "$setups" ] || [ -z "$completed" ]; then
		say "error bpftrace did not print its counters: the lost-event count is unknown"
		STATUS="failed"
	fi
	if [ "$unstamped" -gt 0 ]; then
		say "error $unstamped commands had no block-layer issue stamp, so the probe could not time them:" \
			"turn on the queue's I/O statistics with 'echo 2000 > /sys/block/$(basename "$DEV")/queue/wbt_lat_usec'" \
			"and capture again (see probes/nvme_zone.bt, ISSUE STAMP)"
		STATUS="failed"
	fi
	info probe_setups "${setups:-0}"
	info probe_completed "${completed:-0}"
	info probe_recursion_misses "$misses"
	info probe_rows "$rows"
	info probe_perf_lost "$lost"
	# Lost = completed commands without a row + submissions whose completion the probe never saw.
	info lost_events_nvme "$((unprinted + unmatched))"
	say "stage probe stopped: $rows commands, $((unprinted + unmatched)) lost ($lost reported by bpftrace, $unmatched without completion)"
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

traced_so_far() {
	# Commands the probe has seen: its periodic @completed (map mode) or the rows written so far (stream).
	if [ "$MAP_PROBE" = 1 ]; then
		local n
		n="$(counter completed)"
		echo "${n:-0}"
	else
		grep -c '^[0-9]' "$TMP/probe.out" 2>/dev/null
	fi
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
		say "progress traced=$(traced_so_far) fio=$(fio_done)"
		sleep "$PROGRESS_SECONDS"
	done
}

run_workload() {
	say "stage workload $(grep -m1 '^; ' "$WORKLOAD" | sed 's/^; //')"
	local t0 rc=0
	t0="$(date +%s.%N)"
	READS_AT_START="$(device_reads)"
	fio --eta=never --output-format=json --output="$TMP/fio.json" "$WORKLOAD" &
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
	cp "$TMP/probe.err" "$OUT/.capture/probe.err" 2>/dev/null
	info status "$STATUS"
	cp "$TMP/guest.env" "$OUT/.capture/guest.env"
	sync
}

on_exit() {
	local rc=$?
	if [ -n "$BT_PID" ]; then
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
	load_module || return 1
	check_device || return 1
	start_probe || return 1
	reset_zones || return 1
	prefill || return 1
	blkzone report "$DEV" > "$TMP/zones.txt"
	if [ -f "$STOP_FILE" ]; then
		STATUS="partial"
	else
		run_workload
	fi
	stop_probe
	say "stage saving the run"
	return 0
}

# Sourced by bench.sh for its functions; run directly for a capture.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	main "$@"
fi
