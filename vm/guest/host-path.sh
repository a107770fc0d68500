#!/bin/bash
# Guest side of the host path's test (tests/test_host_path_vm.py, `just test-host-path`): the guest plays a user's
# Debian machine with a zoned drive. The workbench is installed there from its wheel with pip, as a user would,
# and run from a folder outside any checkout: `ztbp doctor`, `ztbp capture-host`, `ztbp cluster` on that capture,
# and `ztbp loop --host`. Each step's exit status and wall time go to $OUT/steps.env (STEP_rc, STEP_s), its
# output to $OUT/STEP.out and $OUT/STEP.err. Python's fault handler is on, so a crash leaves its Python stack in
# STEP.err.
#
# Environment:
#   ZTBP_OUT           the shared folder (default /ztbp/out); it holds the wheel (ztbp-*.whl), the wheelhouse of
#                      its dependencies (wheelhouse/, pip's own wheel among them) and, for a guest without make,
#                      a ztbp-ctl built for this Debian release (ztbp-ctl)
#   ZTBP_HOST_DEV      the zoned namespace (default /dev/nvme0n1)
#   ZTBP_HOST_READS    reads of the capture and of each loop round (default 20000)
#   ZTBP_HOST_CACHE_MIB  the loop's model cache (default 16: 20,000 reads on zones of 32 MiB)
#   ZTBP_HOST_ROUNDS   the loop's rounds at most (default 2; it stops earlier when nothing is recommended)
#   ZTBP_HOST_REGION   their read region (default 1G; zones of 64 MiB need 2G for the paper's hot zone 19)
#   ZTBP_HOST_PROBE    the capture's NVMe probe, capture-host's --probe (default: capture-host's own, nvme_zone.bt)
#   ZTBP_HOST_VENV     where the venv goes (default /opt/ztbp)
#   ZTBP_HOST_DEPS     site-packages folders, separated by ':', that already hold the wheel's dependencies (the
#                      checkout's venv over the share, and polars' runtime for CPUs without AVX2 unpacked on the host):
#                      the wheel alone is installed and the venv finds them there (a .pth file), which takes seconds
#                      instead of the minutes of installing about 1 GB of wheels over 9p under emulation
#   ZTBP_HOST_STEPS    the steps to run (default: install ctl doctor capture cluster loop watch)
#   ZTBP_WATCH_PHASES  the watch step's workload: phases "HOT_ZONES:READS" (paper80's shape on those zones) or
#                      "zipf:READS", one after the other under one `ztbp watch` session (default:
#                      "3,9,14,22,27:6000 5,12,18,25,30:6000")
#   ZTBP_WATCH_BUDGET_PHASES  the phases of the watch-budget step: a second session with --budget-per-day 1
#                      (default: the first two of ZTBP_WATCH_PHASES)
#   ZTBP_WATCH_RATE_IOPS  the watch phases' reads a second, shared by their fio jobs (default: no limit). bpftrace prints each
#                      CPU's buffer in turn: when its user space lags (under emulation it formats 1-2k rows/s), the
#                      rows of different times come interleaved (the journal's late_rows); a slower workload keeps it
#                      in step
#   ZTBP_WATCH_ARGS    `ztbp watch`'s options (default: "--window-commands 2000 -k 2 --min-interval 0")
#   ZTBP_KO, ZTBP_KO_PARAMS  the module that makes the device (NVMeVirt): loaded for the doctor, and handed to
#                      capture-host, loop --host and watch as --module/--module-params, which load it after their
#                      probe attached and unload it before the probe detaches (its threads stall the RCU-tasks
#                      grace periods fentry programs need to attach and detach)
# Progress lines start with "ZTBP:".
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # say, module_prepare, module_load, zone_cap_sectors
settings HOST_DEV=/dev/nvme0n1 HOST_READS=20000 HOST_CACHE_MIB=16 HOST_ROUNDS=2 HOST_REGION=1G HOST_PROBE= HOST_VENV=/opt/ztbp HOST_DEPS= \
	HOST_STEPS="install ctl doctor capture cluster loop watch" \
	WATCH_PHASES="3,9,14,22,27:6000 5,12,18,25,30:6000" WATCH_BUDGET_PHASES= WATCH_RATE_IOPS= WATCH_ARGS="--window-commands 2000 -k 2 --min-interval 0"
TMP=""
ZTBP="$HOST_VENV/bin/ztbp"
MODULE=()   # --module KO --module-params P for the commands that attach a probe (ZTBP_KO)

step() { # NAME COMMAND...: run it from a folder outside any checkout; record its exit status and seconds
	local name="$1" t0 rc
	shift
	say "stage $name: $*"
	t0="$(date +%s.%N)"
	(cd /root && PYTHONFAULTHANDLER=1 "$@") > "$OUT/$name.out" 2> "$OUT/$name.err"
	rc=$?
	echo "${name}_rc=$rc" >> "$OUT/steps.env"
	echo "${name}_s=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')" >> "$OUT/steps.env"
	say "stage $name: exit $rc"
	return "$rc"
}

install_wheel() { # a venv without pip (Debian's python3 has no ensurepip), then pip run from its own wheel.
	# --ignore-requires-python: the wheelhouse holds the versions of the host's environment, whose Python may be
	# newer than this Debian release's (soupsieve 2.8 asks 3.11.5, Debian 12 has 3.11.2); a user's pip online picks
	# versions for their Python. polars[rtcompat]: the guest's CPU has no AVX (vm/vmtest.sh), which polars' default
	# runtime needs (SIGILL without it; `ztbp doctor` says so)
	local pip wheel compat site run
	pip="$(ls "$OUT"/wheelhouse/pip-*.whl | head -n 1)"
	# pip run from its wheel compiles each module it imports (zipimport keeps no byte code): the host's
	# pip-run.whl holds the byte code too (tests/wheelhouse.py runnable_pip)
	run="$pip"
	[ -f "$OUT/pip-run.whl" ] && run="$OUT/pip-run.whl"
	wheel="$(ls "$OUT"/ztbp-*.whl | head -n 1)"
	compat="$(ls "$OUT"/wheelhouse/polars_runtime_compat-*.whl 2> /dev/null | head -n 1)"
	[ -n "$pip" ] && [ -n "$wheel" ] || { say "error no wheel or no pip wheel in $OUT"; return 1; }
	python3 -m venv --without-pip "$HOST_VENV" || return 1
	if [ -z "${HOST_DEPS:-}" ]; then
		"$HOST_VENV/bin/python" "$run/pip" install -q --no-index --no-compile --ignore-requires-python \
			--find-links "$OUT/wheelhouse" "$pip" "$wheel" ${compat:+"$compat"}
		return
	fi
	local dir dirs
	IFS=: read -r -a dirs <<< "$HOST_DEPS"
	for dir in "${dirs[@]}"; do
		[ -d "$dir" ] || { say "error ZTBP_HOST_DEPS: $dir is not a folder"; return 1; }
	done
	"$HOST_VENV/bin/python" "$run/pip" install -q --no-index --no-compile --no-deps "$wheel" || return 1
	site="$("$HOST_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || return 1
	printf '%s\n' "${dirs[@]}" > "$site/ztbp-dependencies.pth"
	say "stage install: the wheel without its dependencies; they are found in ${dirs[*]}"
}

install_ctl() { # `ztbp build-ctl` where make and a C compiler exist; otherwise the binary the host built
	if command -v make > /dev/null && command -v cc > /dev/null; then
		"$ZTBP" build-ctl
		return
	fi
	local dest
	dest="$("$HOST_VENV/bin/python" -c 'from ztbp.writeback.ctl import CTL; print(CTL)')" || return 1
	say "stage ctl: no make or cc here: the ztbp-ctl built on the host for this Debian release -> $dest"
	mkdir -p "$(dirname "$dest")" && install -m 0755 "$OUT/ztbp-ctl" "$dest"
}

geometry_args() { # the zoned namespace's geometry as `ztbp workload` options
	local name cap
	name="$(basename "$HOST_DEV")"
	cap="$(( $(zone_cap_sectors "$HOST_DEV") * 512 ))"
	echo "--zone-size $(( $(cat "/sys/block/$name/queue/chunk_sectors") * 512 )) --zone-cap $cap" \
		"--zones $(cat "/sys/block/$name/queue/nr_zones")"
}

watch_session() { # NAME "EXTRA OPTIONS" "PHASES": `ztbp watch` on the device while the phases run one after the
	# other, then SIGINT: the journal in $OUT/NAME, one JSON line a window in NAME.out; fio's counts in NAME-fio-N.json;
	# the kernel log of the session in NAME-dmesg.txt (NVMeVirt logs there the zones each SET gave it)
	local name="$1" extra="$2" phases="$3" geo phase i=0 pid t total=0 window windows jobs
	dmesg -C
	# shellcheck disable=SC2086  # the options are separate words
	"$ZTBP" watch "$HOST_DEV" $WATCH_ARGS $extra --journal "$OUT/$name" --json "${MODULE[@]}" > "$OUT/$name.out" \
		2> "$OUT/$name.err" &
	pid=$!
	for t in $(seq 600); do  # the journal's "attached" record: every probe is attached, nothing will be missed
		has_line "$OUT/$name/watch.jsonl" '*"kind": "attached"*' && break
		kill -0 "$pid" 2> /dev/null || { say "error ztbp watch ended before its probe attached"; return 1; }
		nap 0.5
	done
	say "stage watch: probe attached after $((t / 2)) s"
	for t in $(seq 600); do  # the device (a module watch loads after the probe attached)
		[ -b "$HOST_DEV" ] && break
		nap 0.1
	done
	geo="$(geometry_args)" || return 1
	if [ -n "${ZTBP_KO:-}" ]; then  # a device the module has just made holds nothing: write what is read
		# shellcheck disable=SC2086
		"$ZTBP" workload paper80 $geo --reads 1 --region "$HOST_REGION" -o "$TMP/unused.fio" \
			--prefill "$TMP/prefill.fio" || return 1
		say "stage watch: prefill of the read region (traced: its writes are commands of the first windows)"
		fio --output-format=json --output="$OUT/$name-prefill.json" "$TMP/prefill.fio" || return 1
		total="$(python3 -c 'import json, sys; print(sum(j["write"]["total_ios"] for j in json.load(sys.stdin)["jobs"]))' \
			< "$OUT/$name-prefill.json")" || return 1
	fi
	for phase in $phases; do
		i=$((i + 1))
		if [ "${phase%%:*}" = zipf ]; then
			# shellcheck disable=SC2086
			"$ZTBP" workload zipf $geo --reads "${phase#*:}" --region "$HOST_REGION" -o "$TMP/phase-$i.fio"
		else
			# shellcheck disable=SC2086
			"$ZTBP" workload paper80 $geo --hot-zones "${phase%%:*}" --reads "${phase#*:}" \
				--region "$HOST_REGION" -o "$TMP/phase-$i.fio"
		fi || return 1
		if [ -n "$WATCH_RATE_IOPS" ]; then  # the phase's whole rate, shared by its jobs (rate_iops is a job's)
			jobs="$(awk -F= '/^numjobs=/ { n += $2 } END { print n ? n : 1 }' "$TMP/phase-$i.fio")"
			sed -i "/^\[global\]/a rate_iops=$(( (WATCH_RATE_IOPS + jobs - 1) / jobs ))" "$TMP/phase-$i.fio"
		fi
		say "stage watch: phase $i (${phase%%:*}), ${phase#*:} reads"
		fio --output-format=json --output="$OUT/$name-fio-$i.json" "$TMP/phase-$i.fio" || return 1
		total=$((total + ${phase#*:}))
	done
	# the rows still in bpftrace's buffer: wait until the whole windows of the reads are journaled (bpftrace's user
	# space formats a row at a time, slower than fio reads under emulation), then a few seconds for the rest
	window="$(echo "$WATCH_ARGS" | sed -n 's/.*--window-commands[ =]\([0-9]*\).*/\1/p')"
	for t in $(seq 600); do
		lines_matching "$OUT/$name/watch.jsonl" '*"kind": "window"*'
		windows=$MATCHED
		[ "$windows" -ge "$((total / ${window:-100000}))" ] && break
		nap 1
	done
	say "stage watch: $windows windows journaled after the workload's $total reads (+$t s)"
	sleep 3
	kill -INT "$pid"
	wait "$pid"
	t=$?
	dmesg > "$OUT/$name-dmesg.txt"
	return "$t"
}

main() {
	case "${1:-}" in -h|--help) sed -n '2,38p' "${BASH_SOURCE[0]}"; return 0 ;; esac
	TMP="$(mktemp -d /tmp/ztbp-host.XXXXXX)"
	: > "$TMP/guest.env"
	: > "$OUT/steps.env"
	# shellcheck disable=SC2086  # the first two phases
	[ -n "$WATCH_BUDGET_PHASES" ] || WATCH_BUDGET_PHASES="$(echo $WATCH_PHASES | cut -d' ' -f1-2)"
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	module_prepare || return 1
	[ -z "${ZTBP_KO:-}" ] || MODULE=(--module "$ZTBP_KO" --module-params "${ZTBP_KO_PARAMS:-}")
	local s
	for s in $HOST_STEPS; do
		case "$s" in
			install) step install install_wheel || return 1 ;;
			ctl) step ctl install_ctl || return 1 ;;
			doctor) module_load "$HOST_DEV" || return 1  # doctor attaches nothing: the device may be there
				step doctor "$ZTBP" doctor --json
				module_unload ;;
			capture) step capture "$ZTBP" capture-host "$HOST_DEV" paper80 --reads "$HOST_READS" \
				--region "$HOST_REGION" --destructive --json --out "$OUT/capture" ${HOST_PROBE:+--probe "$HOST_PROBE"} \
				"${MODULE[@]}" ;;
			cluster) step cluster "$ZTBP" cluster "$OUT/capture" --json ;;
			loop) step loop "$ZTBP" loop paper80 --host "$HOST_DEV" --rounds "$HOST_ROUNDS" --reads "$HOST_READS" \
				--region "$HOST_REGION" --cache-mib "$HOST_CACHE_MIB" --json -o "$OUT/loop" "${MODULE[@]}" ;;
			watch) step watch watch_session watch "" "$WATCH_PHASES" ;;
			watch-budget) step watch-budget watch_session watch-budget "--budget-per-day 1" "$WATCH_BUDGET_PHASES" ;;
			*) say "error unknown step '$s'"; return 1 ;;
		esac
	done
	say "stage done"
}

main "$@"
