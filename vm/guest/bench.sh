#!/bin/bash
# Guest side of vm/bench-probe.sh: probe overhead in one boot. Resets and prefills the read region once,
# then, ROUNDS times, runs the same fio workload without any tracer and under each tracer in turn (the NVMe
# probe, then the comparison tools of ZTBP_TOOLS), printing one "ZTBP-BENCH" line per run: IOPS, the reads
# the device completed, and for traced runs the reads traced and the events lost.
# Environment: as capture.sh (ZTBP_WORKLOAD, ZTBP_PREFILL, ZTBP_RESET, ZTBP_DEV, ZTBP_PROBE: default
# probes/nvme_zone.bt, ZTBP_EXPECTED: the commands of one run, which size its map) plus ZTBP_ROUNDS and
# ZTBP_TOOLS, a comma list of the tools people use today, each writing its output to a file as a user would:
#   biosnoop.bt   bpftrace's own tool (Debian's bpftrace package: /usr/share/bpftrace/tools/biosnoop.bt in
#                 Debian 12, /usr/sbin/biosnoop.bt in Debian 13)
#   biosnoop-bcc  bcc's biosnoop (biosnoop-bpfcc, Debian's bpfcc-tools package)
# A tool's lost events are the device's reads (its /sys/block stat) it printed no row for, or what it
# reported lost ("Lost N events", "Possibly lost N samples"), whichever is more.
set -uo pipefail

# shellcheck source=vm/guest/capture.sh
. "$(dirname "${BASH_SOURCE[0]}")/capture.sh"
ROUNDS="${ZTBP_ROUNDS:-3}"
TOOLS="${ZTBP_TOOLS:-}"
BPFTRACE_TOOL_DIRS="/usr/share/bpftrace/tools /usr/sbin"
BCC_BIOSNOOP=/usr/sbin/biosnoop-bpfcc
TOOL_ATTACH_TIMEOUT=600    # s for a tool to compile and attach (bcc runs clang: minutes under TCG)
TOOL_IDLE_STOP=3           # s without CPU after the workload before a tool is stopped (it has drained)
TOOL_DRAIN_TIMEOUT=300     # s at most for that
TOOL_PID=""

fio_read() {
	# Run the workload; print "<read IOPS> <read I/Os>" from fio's JSON (group_reporting: one job entry).
	fio --eta=never --output-format=json --output="$TMP/bench.json" "$WORKLOAD" || return 1
	local iops ios
	iops="$(grep -m1 '"iops" :' "$TMP/bench.json" | tr -dc '0-9.')"
	ios="$(grep -m1 '"total_ios" :' "$TMP/bench.json" | tr -dc '0-9')"
	echo "$iops $ios"
}

perf_fds() { # PID: its perf-event file descriptors (attached kprobes/tracepoints and perf buffers)
	find "/proc/$1/fd" -lname 'anon_inode:*perf_event*' 2>/dev/null | wc -l
}

tool_start() { # TOOL: start it with its output in $TMP/TOOL.out, wait until it is attached
	local tool="$1" t0=$SECONDS
	case "$tool" in
		biosnoop.bt)
			local dir script=""
			for dir in $BPFTRACE_TOOL_DIRS; do [ -f "$dir/$tool" ] && script="$dir/$tool" && break; done
			[ -n "$script" ] || { say "error no $tool in $BPFTRACE_TOOL_DIRS"; return 1; }
			bpftrace "$script" > "$TMP/$tool.out" 2> "$TMP/$tool.err" & ;;
		biosnoop-bcc)
			"$BCC_BIOSNOOP" > "$TMP/$tool.out" 2> "$TMP/$tool.err" & ;;
		*) say "error unknown comparison tool $tool (biosnoop.bt, biosnoop-bcc)"; return 1 ;;
	esac
	TOOL_PID=$!
	# bpftrace prints its header in BEGIN, once attached; bcc's biosnoop writes its header into a full
	# stdout buffer, so its perf-event descriptors (its kprobes or tracepoints and a perf buffer per CPU) tell.
	local ready=$(( $(nproc) + 2 ))
	until { [ "$tool" = biosnoop.bt ] && grep -q '^TIME' "$TMP/$tool.out"; } ||
		{ [ "$tool" = biosnoop-bcc ] && [ "$(perf_fds "$TOOL_PID")" -ge "$ready" ]; }; do
		if ! kill -0 "$TOOL_PID" 2>/dev/null || [ $((SECONDS - t0)) -ge "$TOOL_ATTACH_TIMEOUT" ]; then
			say "error $tool did not attach: $(tail -c 600 "$TMP/$tool.err" | tr '\n' ' ')"
			kill -KILL "$TOOL_PID" 2>/dev/null
			return 1
		fi
		sleep 0.5
	done
	sleep 2
	say "stage tool $tool attached after $((SECONDS - t0)) s"
}

tool_stop() { # TOOL: let it drain (until it uses no CPU), stop it with SIGINT as a user would
	local tool="$1" t0=$SECONDS idle=0 ticks now
	ticks="$(cpu_ticks "$TOOL_PID")"
	while [ "$idle" -lt "$TOOL_IDLE_STOP" ] && [ $((SECONDS - t0)) -lt "$TOOL_DRAIN_TIMEOUT" ]; do
		sleep 1
		now="$(cpu_ticks "$TOOL_PID")"
		if [ "$now" = "$ticks" ]; then idle=$((idle + 1)); else idle=0; fi
		ticks="$now"
	done
	kill -INT "$TOOL_PID" 2>/dev/null
	local i
	for i in $(seq 1 60); do kill -0 "$TOOL_PID" 2>/dev/null || break; sleep 1; done
	kill -KILL "$TOOL_PID" 2>/dev/null
	wait "$TOOL_PID" 2>/dev/null
	echo "$((SECONDS - t0))"
}

tool_rows() { # TOOL: rows it printed for the traced device; a sample of the output is kept. bcc's biosnoop and
	# bpftrace <= 0.17's biosnoop.bt name the disk (a word); bpftrace >= 0.21's print its "MAJOR MINOR" after the time
	local name majmin
	name="$(basename "$DEV")"
	majmin="$(cat "/sys/block/$name/dev")"
	head -n 4 "$TMP/$1.out" | sed "s/^/ZTBP-TOOL-OUT $1: /" >&2
	grep -c -E "(^|[[:space:]])$name([[:space:]]|\$)|^ *[0-9.]+[[:space:]]+${majmin%:*}[[:space:]]+${majmin#*:}[[:space:]]" \
		"$TMP/$1.out"
}

tool_reported_lost() { # TOOL: the losses it reported itself
	grep -h -o -E '(Lost|Possibly lost) [0-9]+ (events|samples)' "$TMP/$1.out" "$TMP/$1.err" |
		awk '{s += $(NF - 1)} END {print s + 0}'
}

bench_tool() { # ROUND TOOL: one fio run under TOOL
	local r="$1" tool="$2" res before dev rows lost reported drain
	tool_start "$tool" || { echo "ZTBP-BENCH round=$r probe=$tool failed=attach"; return 0; }
	before="$(device_reads)"
	res="$(fio_read)" || return 1
	dev=$(($(device_reads) - before))
	drain="$(tool_stop "$tool")"
	rows="$(tool_rows "$tool")"
	reported="$(tool_reported_lost "$tool")"
	lost=$((dev - rows))
	[ "$lost" -lt "$reported" ] && lost=$reported
	[ "$lost" -lt 0 ] && lost=0
	echo "ZTBP-BENCH round=$r probe=$tool iops=${res% *} fio_reads=${res#* } device_reads=$dev" \
		"traced_reads=$rows lost=$lost reported_lost=$reported drain_s=$drain"
}

bench_probe() { # ROUND: one fio run under the project's NVMe probe
	local r="$1" res lost traced
	start_probe || return 1
	res="$(fio_read)" || return 1
	stop_probe
	lost="$(sed -n 's/^lost_events_nvme=//p' "$TMP/guest.env" | tail -n 1)"
	traced="$(grep -c ',read,' "$TMP/nvme.csv")"
	echo "ZTBP-BENCH round=$r probe=on iops=${res% *} fio_reads=${res#* } traced_reads=$traced lost=$lost"
}

bench_main() {
	TMP="$(mktemp -d /tmp/ztbp-bench.XXXXXX)"
	: > "$TMP/guest.env"
	echo "ZTBP-BENCH-ENV suite=$(. /etc/os-release; echo "$VERSION_CODENAME") kernel=$(uname -r)" \
		"bpftrace=$(bpftrace --version | tr -d ' ')"
	reset_zones || return 1
	prefill || return 1
	local r res tool
	for r in $(seq 1 "$ROUNDS"); do
		res="$(fio_read)" || return 1
		echo "ZTBP-BENCH round=$r probe=off iops=${res% *} fio_reads=${res#* }"
		bench_probe "$r" || return 1
		for tool in ${TOOLS//,/ }; do
			bench_tool "$r" "$tool" || return 1
		done
	done
}

bench_main "$@"
