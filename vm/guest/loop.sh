#!/bin/bash
# loop.sh - the body of `ztbp loop`: one bpftrace session and one device for many rounds. Each round runs the
# round's fio job under the map-mode NVMe probe (probes/nvme_zone.bt), hands its rows over, waits for the host's
# decision (apply a cache configuration with ztbp-ctl, skip, or stop) and applies it; the next round then runs with
# the configuration active. Run by `ztbp loop` in the VM (through vm/vmtest.sh) or on a real machine (--host).
#
# Why one session: NVMeVirt's busy-polling threads hold off RCU-tasks grace periods, which fentry programs need to
# attach and to detach (probe-lib.sh, "a device module"). So the probe attaches once before the module is loaded,
# rows are handed over per round without detaching, and the module is unloaded before bpftrace stops. A round's
# rows are in the probe's map as soon as fio has ended (the probe stores a row when the command completes, and fio
# ends after its last completion): vm/guest/mapdump.py takes them out of the running bpftrace
# (BPF_MAP_LOOKUP_AND_DELETE_BATCH: the map is empty again for the next round) as raw batches, which the host turns
# into the round's raw/nvme.csv (probes/nvme_zone_csv.sh --raw, at native speed; ztbp/acquire/mapcsv.py
# map_rows_csv). The streaming probe this replaced left bpftrace's user space formatting a backlog of rows for
# minutes after each round's fio (vm/README.md, "The wait after a loop round").
#
# Handshake: the mailbox of probe-lib.sh in ZTBP_OUT/.loop (host side ztbp/io/loop.py over ztbp/io/mailbox.py;
# the host is the brain, this script the body):
#   host  .loop/job-NN.fio             the fio job of round NN (written before the guest asks for it)
#   guest round-NN/raw/ (fio.json, zones.txt), round-NN/.capture/nvme.rows (the rows, mapdump.py --raw),
#         round-NN/.capture/guest.env, .loop/device-NN.env, .loop/dmesg-NN.txt,
#         .loop/setup-nvme.csv (the probe's rows of the set-up: zone reset, prefill, priming read)
#   guest .loop/ready-NN               round NN is captured (written last)
#   host  .loop/decision-NN            one line: "apply CONFIG" | "clear" (ztbp-ctl stop: the A/B mode's off arm) |
#                                      "skip REASON" | "stop REASON" (renamed into place)
#   guest .loop/applied-NN.env         what ztbp-ctl set (or stop) / info / status answered and the zones the device
#                                      logged
# .loop/device-NN.env: status_before / status_after (STATUS's read count around the round's fio, empty when the
# device refuses STATUS), hits_before / hits_after (its hit count, empty when ztbp-ctl answered none: the 32-bit
# ioctl), status_ioctl (admin64 / admin32), then ztbp-ctl's answers. A host reads the hits_* lines when they are
# there; a mailbox without them (an older guest script) has reads only (ztbp/analysis/device_counters.py from_env).
# Every wait is bounded (LOOP_DECISION_TIMEOUT, LOOP_JOB_TIMEOUT); the stop file ends the loop after the round in
# progress. Progress: "ZTBP: loop ..." and "ZTBP: stage ..." lines on the console, "ZTBP: progress" every 5 s of fio.
#
# Environment: ZTBP_OUT (default /ztbp/out), ZTBP_DEV (/dev/nvme0n1), ZTBP_CTRL (the controller, default DEV
# without its namespace suffix), ZTBP_PREFILL, ZTBP_RESET ("FIRST COUNT"), ZTBP_PROBE (the map-mode probe),
# ZTBP_EXPECTED (the most commands one round or the set-up issues: sizes the probe's map, probe-lib.sh MAP SIZE),
# ZTBP_CTL (ztbp-ctl binary), ZTBP_KO / ZTBP_KO_PARAMS (NVMeVirt), ZTBP_STOP_FILE, ZTBP_ROUNDS (upper bound).
set -uo pipefail

# capture.sh's functions (reset_zones, prefill) and through it probe-lib.sh; its settings (OUT, DEV, PREFILL, RESET,
# STOP_FILE, SRC) come from the same ZTBP_* variables
# shellcheck source=vm/guest/capture.sh
. "$(dirname "${BASH_SOURCE[0]}")/capture.sh"
settings CTRL="${DEV%n[0-9]*}" PROBE="$SRC/probes/nvme_zone.bt" CTL="$SRC/tools/ztbp-ctl/build/ztbp-ctl" \
	ROUNDS=100
LOOP_DECISION_TIMEOUT=1800   # s to wait for the host's decision on a round
LOOP_JOB_TIMEOUT=600         # s to wait for the next round's fio job
LOOP="$OUT/.loop"

TMP=""
READS_MARK=0     # block-layer reads completed at the last hand-over
TRACED_MARK=0    # the probe's count of completions at the start of the round (progress lines only)

usage() {
	cat <<EOF
Usage: ZTBP_OUT=DIR bash $0
The guest side of \`ztbp loop\` (see the comment at the top of this file); not meant to be run by hand.
EOF
}

rnd() { printf '%02d' "$1"; }

blk_reads() { awk '{print $1}' "/sys/block/$(basename "$DEV")/stat"; }

ctl_json() { # ARGS...: run ztbp-ctl --json, print "RC JSON" (its last line; {} when it printed none)
	local rc=0
	"$CTL" "$@" --json > "$TMP/ctl.out" 2>/dev/null || rc=$?
	echo "$rc $(tail -n 1 "$TMP/ctl.out" | grep . || echo '{}')"
}

device_counters() { # the ZTBP STATUS counters as "READS HITS IOCTL": the read count (dword 0), the cache's hits
	# (dword 1; "-" when ztbp-ctl answered none: the 32-bit ioctl) and how ztbp-ctl asked (admin64 / admin32);
	# empty when the device refuses STATUS
	local rc json hits ioctl
	read -r rc json <<< "$(ctl_json status "$CTRL")"
	echo "status_rc=$rc $json" >> "$TMP/status.log"   # why a STATUS failed (copied to .loop/device-NN.env)
	[ "$rc" = 0 ] || return 0
	hits="$(sed -n 's/.*"hits": *\([0-9][0-9]*\).*/\1/p' <<< "$json")"
	ioctl="$(sed -n 's/.*"status_ioctl": *"\([a-z0-9]*\)".*/\1/p' <<< "$json")"
	echo "$(sed -n 's/.*"result": *\([0-9]*\).*/\1/p' <<< "$json") ${hits:--} ${ioctl:--}"
}

device_status() { # the ZTBP STATUS read counter (empty when the device refuses it)
	local reads _rest
	read -r reads _rest <<< "$(device_counters)"
	echo "$reads"
}

dmesg_mark() { dmesg | wc -l; }

take_rows() { # OUTPUT: the rows completed since the last hand-over, out of the probe's map (mapdump.py --raw) into
	# OUTPUT, written locally first and then copied and checked (a write to the 9p share has been seen to stop
	# short); sets TAKEN (rows taken, empty when mapdump.py failed) and TAKE_S
	local t0=$SECONDS rc=0 size
	python3 "$SRC/vm/guest/mapdump.py" --raw "${PROBE_PID[nvme]}" > "$TMP/rows.bin" 2> "$TMP/rows.err" || rc=$?
	TAKEN="$(sed -n 's/^mapdump: \([0-9]*\) rows$/\1/p' "$TMP/rows.err")"
	[ "$rc" -eq 0 ] || { TAKEN=""; say "error mapdump.py exit $rc: $(tr '\n' ' ' < "$TMP/rows.err")"; }
	size="$(stat -c %s "$TMP/rows.bin")"
	cp "$TMP/rows.bin" "$1" && sync
	if [ "$(stat -c %s "$1")" != "$size" ]; then
		say "stage $(basename "$1") has $(stat -c %s "$1") bytes on the share, not $size: copying again"
		cp "$TMP/rows.bin" "$1" && sync
		[ "$(stat -c %s "$1")" = "$size" ] || { say "error $(basename "$1") incomplete on the share"; TAKEN=""; }
	fi
	rm -f "$TMP/rows.bin"
	TAKE_S=$((SECONDS - t0))
	[ -z "$TAKEN" ] || PROBE_TAKEN[nvme]=$((${PROBE_TAKEN[nvme]:-0} + TAKEN))
}

hand_over_rows() { # ROUND DIR: the round's rows to DIR/.capture/nvme.rows and its counters to its guest.env; the host
	# converts the rows and applies the LOSS RULE per round (acquire/mapcsv.py map_rows_csv): block-layer reads
	# without a read row, plus rows taken but not converted
	local r="$1" dir="$2" reads
	reads=$(($(blk_reads) - READS_MARK))
	mkdir -p "$dir/raw" "$dir/.capture"
	take_rows "$dir/.capture/nvme.rows"
	READS_MARK=$(blk_reads)
	{
		echo "probe_nvme_taken=$TAKEN"
		echo "probe_nvme_dump_s=$TAKE_S"
		echo "block_reads=$reads"
	} >> "$dir/.capture/guest.env"
	say "stage round $r: ${TAKEN:-no} rows taken from the probe's map in $TAKE_S s ($reads reads by the block layer)"
}

run_round() { # ROUND: the round's fio job under the running probe; the run directory round-NN
	local r="$1" n dir job st0 st1 h0 h1 io0 io1 d0 rc=0 t0
	n="$(rnd "$r")"
	dir="$OUT/round-$n"
	job="$LOOP/job-$n.fio"
	mailbox_wait "$job" "$LOOP_JOB_TIMEOUT" loop || return 1
	mkdir -p "$dir/.capture"
	cp "$TMP/guest.env" "$dir/.capture/guest.env"
	blkzone report "$DEV" > "$TMP/zones.txt"
	d0="$(dmesg_mark)"
	read -r st0 h0 io0 <<< "$(device_counters)"
	say "stage workload round $r: $(grep -m1 '^; ' "$job" | sed 's/^; //')"
	t0="$(date +%s.%N)"
	TRACED_MARK="$(probe_traced nvme)"
	fio --eta=never --output-format=json+ --output="$TMP/fio.json" "$job" &
	fio_progress $!
	wait $! || rc=$?
	echo "workload_s=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.3f", $1 - $2}')" >> "$dir/.capture/guest.env"
	echo "fio_rc=$rc" >> "$dir/.capture/guest.env"
	read -r st1 h1 io1 <<< "$(device_counters)"
	hand_over_rows "$r" "$dir"
	[ -s "$TMP/fio.json" ] && sed -n '/^{/,$p' "$TMP/fio.json" > "$dir/raw/fio.json"
	cp "$TMP/zones.txt" "$dir/raw/zones.txt"
	[ "$r" = 1 ] && [ -s "$TMP/prefill.json" ] && cp "$TMP/prefill.json" "$dir/.capture/prefill-fio.json"
	{
		echo "status_before=$st0"
		echo "status_after=$st1"
		echo "hits_before=${h0#-}"
		echo "hits_after=${h1#-}"
		echo "status_ioctl=${io1:-${io0:-}}"
		cat "$TMP/status.log"
	} | mailbox_answer "$LOOP/device-$n.env"
	: > "$TMP/status.log"
	dmesg | tail -n +"$((d0 + 1))" > "$LOOP/dmesg-$n.txt"
	local state=complete
	[ "$rc" = 0 ] || state=failed
	echo "status=$state" >> "$dir/.capture/guest.env"
	sync
	mailbox_answer "$LOOP/ready-$n" < /dev/null
	say "loop round $r ready"
}

apply_decision() { # ROUND: wait for the host's decision and carry it out; 1 = stop the loop
	local r="$1" n action arg rc json irc ijson d0 env
	n="$(rnd "$r")"
	mailbox_wait "$LOOP/decision-$n" "$LOOP_DECISION_TIMEOUT" loop || return 1
	read -r action arg < "$LOOP/decision-$n"
	env="$LOOP/applied-$n.env"
	case "$action" in
	apply)
		d0="$(dmesg_mark)"
		read -r rc json <<< "$(ctl_json set "$DEV" --top5 --config "$arg")"
		read -r irc ijson <<< "$(ctl_json info "$DEV")"
		{
			echo "set_rc=$rc"
			echo "set_json=$json"
			echo "info_rc=$irc"
			echo "info_json=$ijson"
			echo "status=$(device_status)"
			echo "dmesg_zones=$(dmesg | tail -n +"$((d0 + 1))" | sed -n 's/.*ZONE CLUSTER \[[0-9]*\]=\([0-9]*\).*/\1/p' | paste -sd, -)"
		} | mailbox_answer "$env"
		say "loop round $r applied: ztbp-ctl set exit $rc, info exit $irc"
		;;
	clear) # the A/B mode's "off" arm: STOP (96) ends the device's zone check; its cache keeps what it holds
		read -r rc json <<< "$(ctl_json stop "$DEV")"
		{
			echo "stop_rc=$rc"
			echo "stop_json=$json"
			echo "status=$(device_status)"
		} | mailbox_answer "$env"
		say "loop round $r cleared: ztbp-ctl stop exit $rc"
		;;
	skip) echo "skipped=$arg" | mailbox_answer "$env"; say "loop round $r: nothing applied ($arg)" ;;
	*) say "loop stop after round $r: $arg"; return 1 ;;
	esac
	return 0
}

finish() { # unload the module, stop the probe, record the session's totals
	local rc=$?
	module_unload
	if [ -n "${PROBE_PID[nvme]:-}" ]; then
		probe_stop nvme
		cp "$TMP/guest.env" "$LOOP/session.env" 2>/dev/null
	fi
	sync
	exit "$rc"
}

prime_counter() { # NVMeVirt's read counter starts at -1 and its first read only resets it (STATUS answers 4294967295
	# until then): one read of block 0 starts it, so that each of its counter prints (every 1,000,000 reads) ends
	# with a round of 1,000,000 reads instead of with the first read of the next one
	[ "$(device_status)" = 4294967295 ] || { : > "$TMP/status.log"; return 0; }
	dd if="$DEV" of=/dev/null bs=4096 count=1 iflag=direct status=none || { say "error the priming read failed"; return 1; }
	info device_priming_reads 1
	say "stage device: one read of block 0 started its read counter (STATUS now $(device_status))"
	: > "$TMP/status.log"
}

fio_progress() { # PID: "progress" lines while fio runs (every 5 s; polled each second, so the round ends on time)
	local n=0
	while kill -0 "$1" 2>/dev/null; do
		nap 1
		n=$((n + 1))
		[ $((n % 5)) -eq 0 ] && kill -0 "$1" 2>/dev/null &&
			say "progress traced=$(($(probe_traced nvme) - TRACED_MARK)) fio=$(($(blk_reads) - READS_MARK))"
	done
}

cut_setup() { # the set-up's rows (zone reset, prefill, priming read) go to .loop/setup-nvme.csv, not to round 1
	take_rows "$TMP/setup.rows"
	{ sed -n "/^# ztbp nvme v1\$/{p;n;p;q}" "$TMP/nvme.out"; bash "$SRC/probes/nvme_zone_csv.sh" --raw "$TMP/setup.rows"; } \
		> "$LOOP/setup-nvme.csv"
	say "stage set-up traced: ${TAKEN:-no} rows in .loop/setup-nvme.csv"
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	TMP="$(mktemp -d /tmp/ztbp-loop.XXXXXX)"
	: > "$TMP/guest.env"
	mkdir -p "$LOOP"
	trap finish EXIT
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	record_versions
	device_bring_up "$DEV" start_probe || return 1
	reset_zones || return 1
	prefill || return 1
	prime_counter || return 1
	cut_setup
	READS_MARK=$(blk_reads)
	local r
	for r in $(seq 1 "$ROUNDS"); do
		[ -f "$STOP_FILE" ] && break
		run_round "$r" || return 1
		apply_decision "$r" || break
	done
	say "loop done"
	return 0
}

main "$@"
