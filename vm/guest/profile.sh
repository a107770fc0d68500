#!/bin/bash
# Guest side of `ztbp profile` (the interference profiler): a measurement server. The host decides which
# zones to measure together (acquire/profile.py); this script runs what it is sent through the mailbox
# (probe-lib.sh; the host's half is ztbp/io/mailbox.py), one request at a time:
#   REQ/NNNNN.fio    a fio job file      -> RES/NNNNN.json (fio's JSON output), RES/NNNNN.rc (fio's status)
#   REQ/NNNNN.reset  "FIRST COUNT" zones  -> blkzone reset of those zones, RES/NNNNN.rc
#   REQ/done         stop serving and exit 0
# Answers are written whole (mailbox_answer), so the host never reads half a file. Before serving, it loads a
# kernel module when asked (NVMeVirt: probe-lib.sh's module_prepare and module_load, which retries once when the
# nvme driver gave up on the device), describes the device in OUT/device.env (the host waits for it) and writes
# its zone report to OUT/zones.txt.
#
# Environment:
#   ZTBP_OUT        folder shared with the host (default /ztbp/out); requests in OUT/req, results in OUT/res
#   ZTBP_DEV        zoned block device (default /dev/nvme0n1)
#   ZTBP_KO, ZTBP_KO_PARAMS   kernel module to load first and its parameters (NVMeVirt)
#   ZTBP_IDLE_S     exit with status 3 when no request came for this many seconds (default 900)
#   ZTBP_STOP_FILE  exit when this file appears (default /ztbp/ctl/stop)
# Console lines start with "ZTBP: " (the host shows them as progress).
set -uo pipefail

# shellcheck source=vm/guest/probe-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/probe-lib.sh"   # also OUT, DEV, STOP_FILE, SRC (the repository)

IDLE_S="${ZTBP_IDLE_S:-900}"
REQ="$OUT/req"
RES="$OUT/res"
POLL_S=0.2
TMP=""

usage() {
	cat <<EOT
Usage: $0
Serve the interference profiler's measurements on \$ZTBP_DEV (see the header of this script).
EOT
}

describe_device() {
	[ -b "$DEV" ] || { say "error $DEV is not a block device"; return 1; }
	{
		device_facts "$DEV"
		echo "kernel=$(uname -r)"
		echo "fio=$(fio --version 2>&1 | head -n 1)"
		echo "model=$(cat "/sys/block/$(basename "$DEV")/device/model" 2>/dev/null | tr -s ' ')"
	} | mailbox_answer "$OUT/device.env"
	blkzone report "$DEV" > "$OUT/zones.txt" 2>/dev/null || true
}

serve_fio() {
	local id="$1" rc=0
	fio --eta=never --output-format=json --output="$TMP/$id.json" "$REQ/$id.fio" > "$TMP/$id.err" 2>&1 || rc=$?
	# fio may print notes before the JSON: keep the JSON object only.
	sed -n '/^{/,$p' "$TMP/$id.json" | mailbox_answer "$RES/$id.json"
	[ "$rc" -eq 0 ] || say "error fio request $id: $(tail -n 3 "$TMP/$id.err" | tr '\n' ' ')"
	rm -f "$TMP/$id.json" "$TMP/$id.err"
	mailbox_status "$RES" "$id" "$rc"
}

serve_reset() {
	local id="$1" first count rc=0
	read -r first count < "$REQ/$id.reset"
	blkzone reset -o $((first * $(sys_queue "$DEV" chunk_sectors))) -c "$count" "$DEV" || rc=$?
	mailbox_status "$RES" "$id" "$rc"
}

serve() {
	local idle_since=$SECONDS f id
	say "stage serving requests from $REQ"
	while :; do
		[ -f "$STOP_FILE" ] && { say "stage stop requested"; return 0; }
		[ -f "$REQ/done" ] && { say "stage done"; return 0; }
		while mailbox_next "$REQ" "$RES"; do
			f="$NEXT" id="$NEXT_ID"
			case "$f" in
				*.fio) serve_fio "$id" ;;
				*.reset) serve_reset "$id" ;;
				*) say "error request ${f##*/}: unknown kind"; mailbox_status "$RES" "$id" 2 ;;
			esac
			idle_since=$SECONDS
		done
		if [ $((SECONDS - idle_since)) -ge "$IDLE_S" ]; then
			say "error no request for $IDLE_S s: stopping"
			return 3
		fi
		nap "$POLL_S"
	done
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	TMP="$(mktemp -d /tmp/ztbp-profile.XXXXXX)"
	: > "$TMP/guest.env"
	mkdir -p "$REQ" "$RES"
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	module_prepare || return 1
	module_load "$DEV" || return 1
	describe_device || return 1
	say "stage device $(tr '\n' ' ' < "$OUT/device.env")"
	serve
}

main "$@"
