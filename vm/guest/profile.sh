#!/bin/bash
# Guest side of `ztbp profile` (the interference profiler): a measurement server. The host decides which
# zones to measure together (acquire/profile.py); this script runs what it is sent, one request at a time:
#   REQ/NNNN.fio    a fio job file      -> RES/NNNN.json (fio's JSON output), RES/NNNN.rc (fio's status)
#   REQ/NNNN.reset  "FIRST COUNT" zones  -> blkzone reset of those zones, RES/NNNN.rc
#   REQ/done        stop serving and exit 0
# Results are written under a temporary name and renamed, so the host never reads half a file. Before serving,
# it loads a kernel module when asked (NVMeVirt: insmod, then `modprobe nvme`, since the guest has no udev),
# checks the zoned device and writes its geometry to OUT/device.env and its zone report to OUT/zones.txt.
#
# Environment:
#   ZTBP_OUT        folder shared with the host (default /ztbp/out); requests in OUT/req, results in OUT/res
#   ZTBP_DEV        zoned block device (default /dev/nvme0n1)
#   ZTBP_KO, ZTBP_KO_PARAMS   kernel module to load first and its parameters (NVMeVirt)
#   ZTBP_IDLE_S     exit with status 3 when no request came for this many seconds (default 900)
#   ZTBP_STOP_FILE  exit when this file appears (default /ztbp/ctl/stop)
# Console lines start with "ZTBP: " (the host shows them as progress).
set -uo pipefail

OUT="${ZTBP_OUT:-/ztbp/out}"
DEV="${ZTBP_DEV:-/dev/nvme0n1}"
IDLE_S="${ZTBP_IDLE_S:-900}"
STOP_FILE="${ZTBP_STOP_FILE:-/ztbp/ctl/stop}"
REQ="$OUT/req"
RES="$OUT/res"
POLL_S=0.2
DEVICE_WAIT_TENTHS=300

usage() {
	cat <<EOF
Usage: $0
Serve the interference profiler's measurements on \$ZTBP_DEV (see the header of this script).
EOF
}

say() { echo "ZTBP: $*"; }

load_module() {
	[ -n "${ZTBP_KO:-}" ] || return 0
	say "stage module insmod $(basename "$ZTBP_KO") ${ZTBP_KO_PARAMS:-}"
	# shellcheck disable=SC2086  # the parameters are separate words
	insmod "$ZTBP_KO" ${ZTBP_KO_PARAMS:-} || { say "error insmod failed (see console.log)"; return 1; }
	modprobe nvme 2>/dev/null || true
	local i
	for i in $(seq 1 "$DEVICE_WAIT_TENTHS"); do
		[ -b "$DEV" ] && return 0
		sleep 0.1
	done
	say "error $DEV did not appear after loading the module"
	return 1
}

describe_device() {
	local name q
	[ -b "$DEV" ] || { say "error $DEV is not a block device"; return 1; }
	name="$(basename "$DEV")"
	q="/sys/block/$name/queue"
	{
		echo "device=$name"
		echo "zoned=$(cat "$q/zoned" 2>/dev/null || echo none)"
		echo "lba_bytes=$(cat "$q/logical_block_size")"
		echo "zone_sectors=$(cat "$q/chunk_sectors")"
		echo "nr_zones=$(cat "$q/nr_zones" 2>/dev/null || echo 0)"
		echo "max_open_zones=$(cat "$q/max_open_zones" 2>/dev/null || echo 0)"
		echo "max_active_zones=$(cat "$q/max_active_zones" 2>/dev/null || echo 0)"
		echo "kernel=$(uname -r)"
		echo "fio=$(fio --version 2>&1 | head -n 1)"
		echo "model=$(cat "/sys/block/$name/device/model" 2>/dev/null | tr -s ' ')"
	} > "$OUT/device.env.tmp" && mv "$OUT/device.env.tmp" "$OUT/device.env"
	blkzone report "$DEV" > "$OUT/zones.txt" 2>/dev/null || true
}

finish() {
	# finish ID RC: publish the status of request ID.
	echo "$2" > "$RES/$1.rc.tmp" && mv "$RES/$1.rc.tmp" "$RES/$1.rc"
}

serve_fio() {
	local id="$1" rc=0
	fio --eta=never --output-format=json --output="/tmp/ztbp-profile-$id.json" "$REQ/$id.fio" \
		> "/tmp/ztbp-profile-$id.err" 2>&1 || rc=$?
	# fio may print notes before the JSON: keep the JSON object only.
	sed -n '/^{/,$p' "/tmp/ztbp-profile-$id.json" > "$RES/$id.json.tmp" && mv "$RES/$id.json.tmp" "$RES/$id.json"
	[ "$rc" -eq 0 ] || say "error fio request $id: $(tail -n 3 "/tmp/ztbp-profile-$id.err" | tr '\n' ' ')"
	rm -f "/tmp/ztbp-profile-$id.json" "/tmp/ztbp-profile-$id.err"
	finish "$id" "$rc"
}

serve_reset() {
	local id="$1" first count zone_sectors rc=0
	read -r first count < "$REQ/$id.reset"
	zone_sectors="$(cat "/sys/block/$(basename "$DEV")/queue/chunk_sectors")"
	blkzone reset -o $((first * zone_sectors)) -c "$count" "$DEV" || rc=$?
	finish "$id" "$rc"
}

serve() {
	local idle_since=$SECONDS f id
	say "stage serving requests from $REQ"
	while :; do
		[ -f "$STOP_FILE" ] && { say "stage stop requested"; return 0; }
		[ -f "$REQ/done" ] && { say "stage done"; return 0; }
		for f in "$REQ"/*.fio "$REQ"/*.reset; do
			[ -e "$f" ] || continue
			id="$(basename "${f%.*}")"
			[ -e "$RES/$id.rc" ] && continue
			case "$f" in
				*.fio) serve_fio "$id" ;;
				*.reset) serve_reset "$id" ;;
			esac
			idle_since=$SECONDS
		done
		if [ $((SECONDS - idle_since)) -ge "$IDLE_S" ]; then
			say "error no request for $IDLE_S s: stopping"
			return 3
		fi
		sleep "$POLL_S"
	done
}

main() {
	case "${1:-}" in -h|--help) usage; return 0 ;; esac
	mkdir -p "$REQ" "$RES"
	say "stage booted $(cut -d' ' -f1 /proc/uptime) s"
	load_module || return 1
	describe_device || return 1
	say "stage device $(tr '\n' ' ' < "$OUT/device.env")"
	serve
}

main "$@"
